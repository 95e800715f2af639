"""The podkit command: installed as a console script, the same as ``python cli.py``, and a
failure of ``sandbox up`` is one line naming the cause, never a traceback."""

import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from podkit_cli import cli
from tests.helpers import ROOT

GROUPS = ("bench", "cache", "eval", "key", "plan", "sandbox", "verify")


def test_the_console_script_and_the_shim_are_the_same_command():
    script = shutil.which("podkit", path=str(Path(sys.executable).parent))
    assert script, "pip install -e . installs the podkit console script"
    installed = subprocess.run([script, "--help"], capture_output=True, text=True, cwd="/")
    shim = subprocess.run([sys.executable, "cli.py", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert installed.returncode == shim.returncode == 0
    for group in GROUPS:
        assert f"\n  {group} " in installed.stdout and f"\n  {group} " in shim.stdout


def test_sandbox_up_that_cannot_start_says_why_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    result = CliRunner().invoke(cli, ["sandbox", "up"], env={"PODKIT_SANDBOX_DIR": str(blocker / "sandbox")})
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: sandbox up: "), result.output
    assert "Traceback" not in result.output and "Not a directory" in lines[0]


def test_a_missing_inventory_is_bad_input_for_every_host_command(tmp_path):
    missing = str(tmp_path / "nowhere.py")
    for args in (["verify", missing], ["bench", missing], ["cache", "ls", missing], ["eval", missing]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "no such inventory file" in result.output, (args, result.output)
