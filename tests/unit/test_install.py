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
