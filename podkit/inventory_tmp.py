"""Read a pyinfra inventory and its group_data the way pyinfra does, without pyinfra.

The CLI's read-only commands (verify, bench) need each host's data exactly as
the deploy sees it, but importing pyinfra's CLI monkey-patches the whole
process with gevent. This module follows pyinfra 3.10's rules instead:

- an inventory is a Python file; each module-level list (or ``(hosts, data)``
  tuple) is a group, and a host is a name or a ``(name, data)`` pair;
- the inventory file's own name is a group too, applied last among groups;
- data precedence, highest first: the host's own data, group data
  (``group_data/<group>.py``; later groups win), ``group_data/all.py``;
- group_data is read from the project root's ``group_data/``, then from a
  ``group_data/`` beside the inventory file (which wins for the same key).

Values in group_data files are their module-level names that do not start
with ``_`` and are not modules, functions or classes.
"""

from __future__ import annotations

import runpy
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class InventoryError(ValueError):
    """The inventory could not be read; the message says why."""


@dataclass
class InventoryHost:
    name: str
    groups: list[str]
    data: dict[str, Any] = field(default_factory=dict)


def _public(namespace: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in namespace.items()
        if not key.startswith("_")
        and not isinstance(value, (types.ModuleType, types.FunctionType, type))
    }


def _run(path: Path, root: Path) -> dict[str, Any]:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        return runpy.run_path(str(path))
    except Exception as exc:  # the file's own code failed: report it plainly
        raise InventoryError(f"{path}: {exc}") from exc


def read_group_data(group: str, root: str | Path, inventory_dir: str | Path | None = None) -> dict[str, Any]:
    """``group``'s data from ``root/group_data/<group>.py``, then ``inventory_dir/group_data/``."""
    root = Path(root).resolve()
    merged: dict[str, Any] = {}
    folders = [root / "group_data"]
    if inventory_dir is not None and Path(inventory_dir).resolve() != root:
        folders.append(Path(inventory_dir).resolve() / "group_data")
    for folder in folders:
        file = folder / f"{group}.py"
        if file.exists():
            merged.update(_public(_run(file, root)))
    return merged


def load_inventory(inventory: str | Path, root: str | Path) -> list[InventoryHost]:
    """Hosts of ``inventory`` with their merged data; group_data is read from ``root``."""
    path = Path(inventory)
    root = Path(root)
    if not path.exists():
        raise InventoryError(f"{inventory}: no such inventory file")
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    group_own_data: dict[str, dict[str, Any]] = {}
    for name, value in _public(_run(path, root)).items():
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            hosts, group_own_data[name] = value
        elif isinstance(value, list):
            hosts = value
        else:
            continue
        entries = []
        for entry in hosts:
            if isinstance(entry, tuple):
                entries.append((entry[0], dict(entry[1])))
            elif isinstance(entry, str):
                entries.append((entry, {}))
        groups[name] = entries

    group_data = {group: read_group_data(group, root, path.parent) for group in ["all", *groups, path.stem]}

    hosts: dict[str, InventoryHost] = {}
    for group, entries in groups.items():
        for name, own in entries:
            host = hosts.setdefault(name, InventoryHost(name, []))
            host.groups.append(group)
            host.data.update(own)
    for host in hosts.values():
        merged = dict(group_data["all"])
        for group in [*host.groups, path.stem]:
            merged.update(group_data.get(group, {}))
            merged.update(group_own_data.get(group, {}))
        merged.update(host.data)
        host.data = merged
    return list(hosts.values())
