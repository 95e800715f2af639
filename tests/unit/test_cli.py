"""The podkit command: installed as a console script, the same as ``python cli.py``, and a
failure of ``sandbox up`` is one line naming the cause, never a traceback."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from podkit_cli import cli
from tests.helpers import ROOT

GROUPS = ("bench", "cache", "client", "eval", "key", "plan", "sandbox", "tunnel", "verify")


@pytest.mark.proc
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


def one_line_error(result) -> str:
    assert "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_a_world_readable_key_file_is_one_line_naming_the_host(tmp_path):
    key = tmp_path / "api_key"
    key.write_text("k" * 32 + "\n")
    key.chmod(0o644)
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [('box', {{'ssh_hostname': '127.0.0.1', 'podkit_api_key_file': '{key}'}})]\n")
    for args in (["verify", str(inventory)], ["bench", str(inventory)], ["eval", str(inventory)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        assert one_line_error(result) == (
            f"Error: box: {key} is readable by other users (mode 644); run: chmod 600 {key}"
        ), args


def test_an_inventory_that_raises_is_one_line(tmp_path):
    inventory = tmp_path / "inventory.py"
    inventory.write_text("raise RuntimeError('the CMDB is down')\n")
    result = CliRunner().invoke(cli, ["verify", str(inventory)])
    assert result.exit_code == 1
    assert one_line_error(result) == f"Error: cannot load {inventory}: RuntimeError: the CMDB is down"


@pytest.mark.proc
def test_the_sandbox_inventory_after_sandbox_down_says_to_bring_it_up(tmp_path):
    """pyinfra loads inventories/sandbox.py itself: one line with the fix, for the deploy and the CLI."""
    env = {**os.environ, "PODKIT_SANDBOX_DIR": str(tmp_path / "sandbox")}
    expected = f"inventories/sandbox.py: the sandbox in {tmp_path / 'sandbox'} is not up: run podkit sandbox up"
    pyinfra = str(Path(sys.executable).parent / "pyinfra")
    deploy = subprocess.run(
        [pyinfra, "-y", "inventories/sandbox.py", "deploy.py"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    output = deploy.stdout + deploy.stderr
    assert deploy.returncode == 1 and "Traceback" not in output, output
    assert [line for line in output.splitlines() if line.strip()][-1] == expected, output
    result = CliRunner().invoke(
        cli, ["verify", "inventories/sandbox.py"], env={"PODKIT_SANDBOX_DIR": env["PODKIT_SANDBOX_DIR"]}
    )
    assert result.exit_code == 1 and one_line_error(result) == f"Error: {expected}"
