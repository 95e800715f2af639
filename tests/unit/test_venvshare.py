"""testing/venvshare.py: a venv staged by the installing e2e session and seeded into another
session's volume works at its new path, shares the unchanged files, and never changes the staged
or the installer's copy; a failed or absent installer sends the others to install for themselves."""

import os
import subprocess
import sys

import pytest

from testing import venvshare

pytestmark = pytest.mark.proc  # cp -al, and the seeded venv's console script run


def make_venv(path):
    """A real venv (without pip: fast) with a console script, a binary and a package file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    script = path / "bin" / "hello"
    script.write_text(f"#!{path}/bin/python\nimport sys\nprint(sys.prefix)\n")
    script.chmod(0o755)
    (path / "bin" / "caddy").write_bytes(b"\x7fELF\0\0" + str(path).encode())  # names the path, binary
    site = next((path / "lib").glob("python*/site-packages"))
    (site / "shared_module.py").write_text("VALUE = 1\n")
    return site


@pytest.mark.parametrize(
    "role, expected",
    [
        ("install:/tmp/x", ("install", "/tmp/x")),
        ("seed:/tmp/x", ("seed", "/tmp/x")),
        ("seed:", None),
        ("copy:/tmp/x", None),
        ("", None),
    ],
)
def test_role_reads_the_variable(role, expected):
    got = venvshare.role({venvshare.VARIABLE: role})
    assert (None if got is None else (got[0], str(got[1]))) == expected


def test_a_seeded_venv_runs_at_its_path_and_leaves_the_installers_as_it_was(tmp_path):
    installer = tmp_path / "a" / "podkit" / "venv"
    site = make_venv(installer)
    share = tmp_path / "share"
    share.mkdir()
    venvshare.stage(installer, share)
    seeded = tmp_path / "b" / "podkit" / "venv"
    venvshare.seed(venvshare.wait(share, timeout=1), seeded)

    ran = subprocess.run([str(seeded / "bin" / "hello")], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == str(seeded)  # its own python, by its own #! line
    config = (seeded / "pyvenv.cfg").read_text()
    assert str(seeded) in config and str(installer) not in config
    assert (installer / "bin" / "hello").read_text().startswith(f"#!{installer}/bin/python")
    assert (share / "venv" / "bin" / "hello").read_text().startswith(f"#!{installer}/bin/python")
    # the package files are the installer's, hard-linked: nothing unpacked again
    seeded_module = next((seeded / "lib").glob("python*/site-packages")) / "shared_module.py"
    assert os.stat(seeded_module).st_ino == os.stat(site / "shared_module.py").st_ino
    # a binary is left as it is (a hard link), even where it holds the old path's bytes
    assert os.stat(seeded / "bin" / "caddy").st_ino == os.stat(installer / "bin" / "caddy").st_ino
    assert (seeded / "bin" / "python").is_symlink()
    assert not (seeded / ".made-for").exists()


def test_vllms_model_inspections_go_with_the_venv_into_the_seeded_volumes_cache(tmp_path):
    """What vLLM's first start wrote to the installer's volume cache about each model class is in the
    seeded volume's cache before its first start (else vLLM inspects the class again in a subprocess);
    an installer whose cache holds none stages the venv alone."""
    installer = tmp_path / "a" / "podkit" / "venv"
    make_venv(installer)
    inspected = installer.parent / "cache" / "vllm" / "modelinfos"
    inspected.mkdir(parents=True)
    (inspected / "vllm-model_executor-models-qwen2-Qwen2ForCausalLM.json").write_text('{"hash": "h"}')
    share = tmp_path / "share"
    share.mkdir()
    venvshare.stage(installer, share)
    seeded = tmp_path / "b" / "podkit" / "venv"
    venvshare.seed(venvshare.wait(share, timeout=1), seeded)
    copied = seeded.parent / "cache" / "vllm" / "modelinfos" / "vllm-model_executor-models-qwen2-Qwen2ForCausalLM.json"
    assert copied.read_text() == '{"hash": "h"}'
    assert os.stat(copied).st_ino != os.stat(inspected / copied.name).st_ino  # a copy: vLLM may rewrite it

    bare = tmp_path / "c" / "podkit" / "venv"
    make_venv(bare)
    alone = tmp_path / "share-c"
    alone.mkdir()
    venvshare.stage(bare, alone)
    venvshare.seed(alone / "venv", tmp_path / "d" / "podkit" / "venv")
    assert not (tmp_path / "d" / "podkit" / "cache").exists()


def test_deleting_the_installers_venv_leaves_the_staged_one_whole(tmp_path):
    installer = tmp_path / "a" / "venv"
    make_venv(installer)
    share = tmp_path / "share"
    share.mkdir()
    venvshare.stage(installer, share)
    subprocess.run(["rm", "-rf", str(installer)], check=True)  # a test of the installer's session does this
    seeded = tmp_path / "b" / "venv"
    venvshare.seed(share / "venv", seeded)
    assert subprocess.run([str(seeded / "bin" / "hello")], capture_output=True, text=True).returncode == 0


def test_a_failed_installer_sends_the_others_to_install_and_nothing_staged_times_out(tmp_path):
    venvshare.give_up(tmp_path, "the installing session's first apply failed")
    assert venvshare.wait(tmp_path, timeout=5) is None
    assert venvshare.wait(tmp_path / "nothing-here", timeout=0.6) is None


def test_only_an_installer_with_nothing_staged_sends_the_others_to_install(tmp_path):
    venvshare.unless_staged("why", {venvshare.VARIABLE: f"seed:{tmp_path}"})
    assert not (tmp_path / "failed.json").exists()
    (tmp_path / "venv").mkdir()
    venvshare.unless_staged("why", {venvshare.VARIABLE: f"install:{tmp_path}"})
    assert not (tmp_path / "failed.json").exists()
    (tmp_path / "venv").rmdir()
    venvshare.unless_staged("why", {venvshare.VARIABLE: f"install:{tmp_path}"})
    assert venvshare.wait(tmp_path, timeout=1) is None
