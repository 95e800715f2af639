"""Every template rendered with hostile values runs nothing those values carry.

Settings refuse control characters before anything is rendered; these tests go
around them (``dataclasses.replace`` on a valid Settings) to prove the templates
hold on their own. Each hostile value lands everywhere a value can (the served
name in comments and in Description=, the model, parsers, extra argv and
environment, the package, the vLLM binary's path, the volume, the unit's user
and group); each would create a file named ``PWNED`` in the working folder if
it ran. The shell scripts are run for real (``sh -n``, then for real against a
stand-in vLLM that records its argv and environment); the unit is read as
systemd reads it: line by line, key by key, its command line unquoted and run.
"""

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from podkit.host.render import host_files, serve_argv
from podkit.plan.hostplan import HostPlan
from podkit.settings import PackageSpec
from tests.helpers import settings

MARK = "PWNED"
HOSTILE = [
    f"coder\ntouch {MARK} #",
    f"coder\r\ntouch {MARK}\n#",
    f"x'; touch {MARK}; echo '",
    f'x"; touch {MARK}; echo "',
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f"semi; touch {MARK}; & | > <",
    "100% %n %% $HOME ${HOME} $$",
    "back\\slash\\",
    f"unit\nExecStartPre=+/bin/touch {MARK}",
    f"unit\\\nExecStartPre=+/bin/touch {MARK}",
    "tab\there\x0bvt\x7fdel\x1besc",
]
KEY = "sk-test-" + "k" * 24
TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# A vLLM stand-in: records its argv (NUL-separated), the key and the hostile variable it got.
FAKE_VLLM = """#!/bin/sh
printf '%s\\0' "$@" > "$PODKIT_TEST_OUT"
printf '%s' "$VLLM_API_KEY" > "$PODKIT_TEST_OUT.key"
printf '%s' "$HOSTILE" > "$PODKIT_TEST_OUT.env"
"""


def representable_in_a_unit(value: str) -> bool:
    """A value systemd can take in a field with no escapes (User=, a path): one line, no trailing \\."""
    return not re.search(r"[\x00-\x1f\x7f]", value) and not value.endswith("\\")


def render(tmp_path: Path, value: str, *, supervisor: str = "runner", volume: str | None = None, user: str = "u"):
    """host_files with ``value`` everywhere, past the settings' own checks; the files written to
    their paths, the key file and a stand-in vLLM (under a folder named ``value``) beside them."""
    volume = volume or str(tmp_path / "volume" / value)
    valid = settings(podkit_volume="/workspace", podkit_supervisor=supervisor)
    hostile = dataclasses.replace(
        valid,
        volume=volume,
        served_model_name=value,
        model=value,
        host=value,
        extra_args=("--hostile", value),
        extra_env={"HOSTILE": value},
        generation_config={"k": value, value: "v"},
    )
    launch = HostPlan(value, 4096, 1, value, value, extra_args=(value,))
    vllm_bin = tmp_path / "bin" / value / "vllm"
    vllm_bin.parent.mkdir(parents=True)
    vllm_bin.write_text(FAKE_VLLM)
    vllm_bin.chmod(0o755)
    files = host_files(
        hostile,
        package=PackageSpec(value, value),
        vllm_bin=str(vllm_bin),
        launch=launch,
        user=user,
        group=user,
    )
    for file in files.values():
        Path(file.path).parent.mkdir(parents=True, exist_ok=True)
        Path(file.path).write_text(file.content)
        Path(file.path).chmod(int(file.mode, 8))
    paths = hostile.paths
    Path(paths.api_key).parent.mkdir(parents=True, exist_ok=True)
    Path(paths.api_key).write_text(KEY)
    Path(paths.run).mkdir(parents=True, exist_ok=True)
    return hostile, launch, str(vllm_bin), files


def run_sh(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """``sh ARGS`` in an empty working folder, with a bare environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home")}
    done = subprocess.run(["sh", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, timeout=60)
    return done, cwd


def assert_nothing_ran(tmp_path: Path) -> None:
    assert not list(tmp_path.rglob(MARK)), "a hostile value ran as a command"


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_env_and_launch_scripts_run_nothing_they_carry(tmp_path, value):
    hostile, launch, vllm_bin, files = render(tmp_path, value)
    for role in ("env", "launch"):
        syntax, _ = run_sh(tmp_path, "-n", files[role].path)
        assert syntax.returncode == 0, syntax.stderr
    out = tmp_path / "out"
    done, _ = run_sh(tmp_path, files["launch"].path, env={"PODKIT_TEST_OUT": str(out)})
    assert done.returncode == 0, done.stderr
    assert_nothing_ran(tmp_path)
    # every value reached vLLM whole, as one argument or one variable each
    argv = out.read_bytes().decode().split("\0")[:-1]
    assert argv == serve_argv(hostile, vllm_bin, launch)[1:]
    assert (tmp_path / "out.env").read_bytes().decode() == value
    assert (tmp_path / "out.key").read_bytes().decode() == KEY
    # a comment stays a comment: the header is the template's four comment lines
    lines = files["launch"].content.split("\n")
    assert lines.index("set -eu") == 4 and all(line.startswith("#") for line in lines[:4])


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_runner_script_runs_nothing_it_carries(tmp_path, value):
    _, _, _, files = render(tmp_path, value)
    syntax, _ = run_sh(tmp_path, "-n", files["runner"].path)
    assert syntax.returncode == 0, syntax.stderr
    done, _ = run_sh(tmp_path, files["runner"].path, "status")
    assert done.returncode == 3, done.stderr  # nothing runs: "stopped"
    assert_nothing_ran(tmp_path)


def keys(unit: str) -> list[str]:
    """The unit as systemd's parser sees it: sections and keys in order (lines split at \\n only)."""
    seen = []
    for line in unit.split("\n"):
        line = line.strip()
        if line and line[0] not in "#;":
            seen.append(line if line.startswith("[") else line.split("=", 1)[0])
    return seen


def systemd_word(word: str, program: bool = False) -> str:
    """What systemd passes on for one double-quoted word of an Exec line: C escapes, ``%%`` and
    (in arguments) ``$$`` undone."""
    assert word[0] == word[-1] == '"', word
    out, body, i = [], word[1:-1], 0
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(body[i + 1])
            i += 2
            continue
        assert body[i] != '"', "an unescaped quote ends the word early"
        out.append(body[i])
        i += 1
    text = "".join(out).replace("%%", "%")
    return text if program else text.replace("$$", "$")


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_unit_keeps_its_keys_and_runs_nothing_it_carries(tmp_path, value):
    tame = representable_in_a_unit(value)
    volume = str(tmp_path / "volume" / (value if tame else "tame"))
    hostile, _, _, files = render(tmp_path, value, supervisor="systemd", volume=volume, user=value if tame else "u")
    unit = files["unit"].content
    template = (TEMPLATES / "podkit-vllm.service.j2").read_text()
    assert keys(unit) == keys(template), "a value added or removed a line of the unit"
    assert not any(line.endswith("\\") for line in unit.split("\n")), "a line continues into the next"
    (description,) = [line for line in unit.split("\n") if line.startswith("Description=")]
    assert not re.search(r"[\x00-\x1f\x7f]", description)
    lines = dict(line.split("=", 1) for line in unit.split("\n") if "=" in line and not line.startswith("#"))
    if tame:
        assert lines["User"] == value.replace("%", "%%") and lines["Group"] == lines["User"]
    assert lines["StandardOutput"] == "append:" + hostile.paths.log_file.replace("%", "%%")
    assert systemd_word(lines["ExecStart"], program=True) == hostile.paths.launch_script
    # the recording command, as systemd would run it
    pre = lines["ExecStartPre"]
    assert pre.startswith("-/bin/sh -c ")
    done, _ = run_sh(tmp_path, "-c", systemd_word(pre[len("-/bin/sh -c ") :]))
    assert done.returncode == 0, done.stderr
    assert_nothing_ran(tmp_path)
    recorded = Path(hostile.paths.run, "serving.sha256").read_text()
    assert hostile.paths.launch_script in recorded and hostile.paths.api_key in recorded


@pytest.mark.parametrize("value", [v for v in HOSTILE if not representable_in_a_unit(v)])
def test_unit_refuses_a_user_or_path_it_cannot_write_on_one_line(tmp_path, value):
    with pytest.raises(ValueError, match="cannot be written in a systemd unit"):
        render(tmp_path, value, supervisor="systemd", volume=str(tmp_path / "volume" / "tame"), user=value)
    if re.search(r"[\x00-\x1f\x7f]", value):  # a path ending in \ is fine: the unit's end in vllm.log
        shutil.rmtree(tmp_path / "bin")
        with pytest.raises(ValueError, match="cannot be written in a systemd unit"):
            render(tmp_path, value, supervisor="systemd")


@pytest.mark.parametrize("name", ["A\n", "A;touch PWNED", "A B", "$(touch PWNED)", "1A"])
def test_env_file_refuses_a_variable_name_it_cannot_write(tmp_path, name):
    valid = settings(podkit_volume=str(tmp_path / "volume"))
    hostile = dataclasses.replace(valid, extra_env={name: "x"})
    with pytest.raises(ValueError, match="is not a shell variable name"):
        host_files(
            hostile,
            package=PackageSpec("vllm", "0.33.0"),
            vllm_bin="vllm",
            launch=HostPlan(valid.model, 4096, 1, None, None),
        )
