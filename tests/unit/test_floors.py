"""Imports run down the floors, never up: every import statement of the product, read with ast.

The floors follow the data: settings and the way in are read by everyone; the plan takes plain
values; a host's probe, its plan and its files build on the plan; a client reads what the deploy
left; the pyinfra operations and the CLI stand on all of it, and the entry points on them.

A module may import its own unit (a subpackage of ``podkit``, the rooms inside it included, as
``podkit/host/start/`` is ``podkit.host``'s; or ``podkit``'s root modules together), any unit on a
lower floor, and ``podkit.remote``. Units side by side on one floor
stay apart. ``podkit.remote`` is what runs on the host: the standard library and itself alone. And no two
modules of the product import each other, directly or through others.

The units are found by walking the tree, so a new subpackage, root module or front end fails here
until it is given a floor.
"""

from __future__ import annotations

import ast
import graphlib
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

#: Bottom first. A unit is a subpackage of podkit (``podkit.host``), ``podkit`` (its root
#: modules: settings, checks, paths, text, keys, wayin), a top-level package or module of the
#: project (``operations``, ``deploy``), or a library whose place is part of the design.
FLOORS: list[tuple[str, set[str]]] = [
    ("what everything reads: settings, their checks, paths, keys, text, the way in", {"podkit"}),
    ("planning before spending, from plain values", {"podkit.plan"}),
    (
        "one host (probe, plan, files, readiness), RunPod pods, the local sandbox",
        {"podkit.host", "podkit.runpod", "podkit.sandbox"},
    ),
    ("what a client does with the hosts the deploy left", {"podkit.client"}),
    ("the libraries the front ends stand on", {"pyinfra", "pyinfra_cli", "click"}),
    ("the front ends: pyinfra's operations and facts, the podkit command", {"operations", "podkit_cli"}),
    ("the deploy's roles: a server's path, a router's", {"roles"}),
    (
        "entry points, inventories and group data, and the test doubles (outside the product)",
        {"deploy", "config", "cli", "inventories", "group_data", "testing"},
    ),
]
#: Shipped to the host and run there by its own Python; anything may import its helpers.
REMOTE = "podkit.remote"
#: What a remote program may import beside the standard library: the Python it runs under has it
#: (the detached download, the measured start and vLLM's check of a launch run on the Python that
#: has vLLM, and so huggingface_hub and torch).
RUNS_WITH = {
    "podkit.remote.fetch": {"huggingface_hub"},
    "podkit.remote.measure": {"huggingface_hub"},
    "podkit.remote.vllmcheck": {"vllm", "torch"},
}
#: The product: what ships (and the deploy and the shim that run it); testing/ is outside it.
PRODUCT = ("podkit", "podkit_cli", "operations", "roles", "deploy", "config", "cli")
#: The project's own code whose imports are checked (tests/, benchmarks/, scripts/ may import anything).
CHECKED = (
    "podkit",
    "podkit_cli",
    "operations",
    "roles",
    "inventories",
    "group_data",
    "testing",
    "deploy.py",
    "config.py",
    "cli.py",
)

FLOOR_OF = {unit: number for number, (_, units) in enumerate(FLOORS) for unit in units}
#: The project's folders outside the product (tests/, benchmarks/, scripts/): above every floor.
OUTSIDE = len(FLOORS)


def unit_of(module: str) -> str | None:
    """The unit a dotted module name belongs to, or None for a library the floors do not place."""
    parts = module.split(".")
    if parts[0] == "podkit":
        if len(parts) > 1 and (ROOT / "podkit" / parts[1]).is_dir():
            return f"podkit.{parts[1]}"
        return "podkit"
    return (
        parts[0] if parts[0] in FLOOR_OF or (ROOT / parts[0]).exists() or (ROOT / f"{parts[0]}.py").exists() else None
    )


def source_files() -> list[Path]:
    found = []
    for name in CHECKED:
        path = ROOT / name
        found += [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "tasks" not in p.parts)
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import statement in ``path``, in functions too; a relative
    import resolved against the module's package; ``from x import y`` counted as ``x.y`` (y may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base) for alias in node.names]
    return found


def upward(path: Path) -> list[str]:
    """Each import of ``path`` that runs up a floor or across to a sibling unit, as a line naming it."""
    here = unit_of(module_name(path))
    problems = []
    for line, target in imports(path):
        there = unit_of(target)
        if here == REMOTE:
            allowed = RUNS_WITH.get(module_name(path), set())
            if target.split(".")[0] not in sys.stdlib_module_names | allowed and unit_of(target) != REMOTE:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line} imports {target}: podkit.remote runs on the host with the standard library alone"
                )
            continue
        if there is None or there == here or there == REMOTE:
            continue
        mine, theirs = FLOOR_OF[here], FLOOR_OF.get(there, OUTSIDE)
        if theirs >= mine:
            way = "up a floor" if theirs > mine else "across to a sibling on its floor"
            problems.append(
                f"{path.relative_to(ROOT)}:{line} imports {target}: {here} (floor {mine}) reaching {way} to {there} "
                f"(floor {theirs}); move what it needs down to a floor both read, or take it as a plain value"
            )
    return problems


def module_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Each module and the modules of ``paths`` it imports (``from x import y``: y when it is a module, else x)."""
    modules = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for _, target in imports(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Modules that import each other, each through the next (the first back to itself), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as found:
        return list(found.args[1])
    return None


def test_every_unit_of_the_tree_has_a_floor():
    found = {unit_of(module_name(path)) for path in source_files()} - {REMOTE}
    placed = {unit for unit in FLOOR_OF if (ROOT / unit.replace(".", "/")).exists() or (ROOT / f"{unit}.py").exists()}
    assert found == placed, "give each new unit a floor in FLOORS (and drop the ones that are gone)"
    assert {"podkit.plan", "podkit.host", "podkit.client", "podkit.runpod", "podkit.sandbox"} <= found


def test_a_room_is_part_of_its_floors_unit():
    """podkit/host/start/ is podkit.host's, on host's floor: a room groups modules, it is no unit."""
    rooms = [p for p in source_files() if p.is_relative_to(ROOT / "podkit") and len(p.relative_to(ROOT).parts) > 3]
    assert any(p.relative_to(ROOT).parts[:3] == ("podkit", "host", "start") for p in rooms)
    assert {module_name(p): unit_of(module_name(p)) for p in rooms} == {
        module_name(p): ".".join(p.relative_to(ROOT).parts[:2]) for p in rooms
    }


def test_no_import_runs_up_a_floor():
    problems = [problem for path in source_files() for problem in upward(path)]
    assert problems == [], "\n".join(problems)


def test_no_two_modules_of_the_product_import_each_other():
    """Within a floor too: rendering does not go back to the probe that goes back to rendering."""
    product = [path for path in source_files() if module_name(path).split(".")[0] in PRODUCT]
    found = cycle(module_graph(product))
    assert found is None, "modules import each other: " + " -> ".join(found or [])


def test_a_cycle_through_a_third_module_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    paths = [
        write(tmp_path, "podkit/host/render.py", "from podkit.host.probe import edge_files\n"),
        write(tmp_path, "podkit/host/probe.py", "from podkit.host.start import readiness\n"),
        write(tmp_path, "podkit/host/start/readiness.py", "def f():\n    from podkit.host.render import host_files\n"),
        write(tmp_path, "podkit/host/programs.py", "from podkit.settings import Settings\n"),
    ]
    found = cycle(module_graph(paths))
    assert found is not None and set(found) == {
        "podkit.host.render",
        "podkit.host.probe",
        "podkit.host.start.readiness",
    }
    assert cycle(module_graph([paths[0], paths[3]])) is None


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "relative, text, reaches",
    [
        ("podkit/plan/x.py", "from podkit.host.probe import HostState\n", "up a floor to podkit.host"),
        ("podkit/plan/x.py", "def f():\n    from podkit.client import api\n", "up a floor to podkit.client"),
        (
            "podkit/host/x.py",
            "from podkit.runpod.pods import PodHost\n",
            "across to a sibling on its floor to podkit.runpod",
        ),
        ("podkit/settings_x.py", "import podkit.plan.gpus\n", "up a floor to podkit.plan"),
        ("podkit/client/x.py", "import click\n", "up a floor to click"),
        ("podkit/host/x.py", "from testing import netpods\n", "up a floor to testing"),
        ("podkit/host/start/x.py", "from podkit.client.status import describe\n", "up a floor to podkit.client"),
        ("podkit/runpod/x.py", "from podkit.host.start.profile import profile_key\n", "across to a sibling"),
        ("operations/x.py", "from tests.helpers import settings\n", "up a floor to tests"),
        ("podkit_cli/x.py", "from operations import facts\n", "across to a sibling on its floor to operations"),
        ("podkit/remote/x.py", "from podkit.text import clean\n", "standard library alone"),
        ("podkit/remote/x.py", "import requests\n", "standard library alone"),
        ("podkit/remote/x.py", "import huggingface_hub\n", "standard library alone"),
    ],
)
def test_an_import_up_a_floor_is_named_with_its_line(tmp_path, monkeypatch, relative, text, reaches):
    for package in (
        "podkit/plan",
        "podkit/host",
        "podkit/client",
        "podkit/runpod",
        "podkit/remote",
        "podkit_cli",
        "operations",
        "testing",
        "tests",
    ):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = upward(write(tmp_path, relative, text))
    assert len(problems) == 1 and reaches in problems[0] and relative in problems[0], problems


@pytest.mark.parametrize(
    "relative, text",
    [
        ("podkit/host/x.py", "from podkit.plan.gpus import Hardware\nfrom podkit.wayin import WayIn\n"),
        ("podkit/host/x.py", "from podkit.remote.idle import config_problem\nfrom podkit.host import probe\n"),
        ("podkit/client/x.py", "from podkit.host.shell import Run\nimport jinja2\n"),
        ("podkit/host/start/x.py", "from podkit.host.probe import server_config\nfrom .startup import compare\n"),
        ("podkit/client/status.py", "from podkit.host.start.phases import start_summary\n"),
        ("podkit_cli/x.py", "from .hosts import load_targets\nimport click\nfrom podkit.client import api\n"),
        ("podkit/remote/x.py", "import json, os\nfrom urllib.request import urlopen\n"),
        ("podkit/remote/fetch.py", "from huggingface_hub import snapshot_download\n"),
        ("podkit/remote/podctl/lock.py", "from podkit.remote.podctl.base import read_json\n"),
        ("deploy.py", "from operations import facts\nfrom pyinfra import host\n"),
    ],
)
def test_an_import_down_or_within_its_unit_passes(tmp_path, monkeypatch, relative, text):
    for package in ("podkit/plan", "podkit/host", "podkit/client", "podkit/remote", "podkit_cli", "operations"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward(write(tmp_path, relative, text)) == []
