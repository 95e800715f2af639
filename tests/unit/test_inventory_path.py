"""A relative INVENTORY is read from the folder the user runs in (agents run "in the project folder",
not in podkit's checkout); podkit's own ``inventories/`` is the fallback, said once on stderr."""

from __future__ import annotations

import json
import os

import click
import pytest

from podkit import PROJECT_ROOT
from podkit_cli import hosts
from podkit_cli.lifecycle import pod_selection
from tests import helpers
from tests.helpers import podkit

KEY = "k3y-" + "c0ffee00" * 4


def test_a_relative_inventory_is_read_from_the_current_folder(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "infra").mkdir(parents=True)
    inventory = helpers.write_inventory(project / "infra", {"box": {"ssh_hostname": "10.192.0.10"}}, KEY)
    monkeypatch.chdir(project)
    relative = os.path.relpath(inventory, project)
    assert relative == "infra/inventory.py" and not (PROJECT_ROOT / relative).exists()
    result = podkit(tmp_path, "client", relative, "--json")
    assert result.exit_code == 0, result.output
    assert [row["host"] for row in json.loads(result.stdout)] == ["box"]
    assert "using" not in result.stderr
    # ../ works as the shell reads it
    monkeypatch.chdir(project / "infra")
    assert podkit(tmp_path, "client", "../infra/inventory.py", "--json").exit_code == 0
    assert pod_selection("inventory.py") is None


def test_the_checkouts_inventories_are_the_fallback_said_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hosts, "_SAID", set())
    found = hosts.inventory_file("inventories/sandbox.py")
    assert found == PROJECT_ROOT / "inventories" / "sandbox.py"
    assert hosts.inventory_file("inventories/sandbox.py") == found
    said = capsys.readouterr().err.splitlines()
    assert said == [f"inventories/sandbox.py: not in {tmp_path}; using {found}"]


def test_an_inventory_found_nowhere_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = podkit(tmp_path, "client", "nowhere/inv.py")
    assert result.exit_code == 2
    assert (
        result.stderr.splitlines()[-1] == "Error: Invalid value for INVENTORY: nowhere/inv.py: no such inventory file"
    )
    with pytest.raises(click.BadParameter, match="nowhere/inv.py: no such inventory file"):
        pod_selection("nowhere/inv.py")
