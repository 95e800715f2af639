"""Rooms of one job: no module of the product (the package, the CLI, the operations, the roles) over
450 lines, so a reader finds a thing without scrolling a thousand. podctl runs on the host as one program but is written as parts
(``podkit/remote/podctl/``), each under the limit too. And the deploy reads one screen per role:
``deploy.py`` picks the role, each role's ``converge`` lists its steps in order, each step a screen.
And ``podkit/host/`` keeps its modules in rooms by job, each room's ``__init__`` saying its job and
listing its modules, host's own ``__init__`` mapping every module and room."""

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.unit.test_floors import PRODUCT, module_graph, module_name, source_files

LIMIT = 450
#: Modules allowed past the limit, each with the reason; keep this short and say why.
ALLOWED: dict[str, str] = {}
FOLDERS = ("podkit", "podkit_cli", "operations", "roles")


def modules() -> list[Path]:
    return sorted(
        path
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if "tasks" not in path.relative_to(ROOT).parts
    )


def test_no_module_is_over_the_limit():
    over = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in modules()
        if len(path.read_text().splitlines()) > LIMIT and str(path.relative_to(ROOT)) not in ALLOWED
    }
    assert over == {}, f"split these by job (or add one to ALLOWED with the reason): {over}"


def test_what_is_allowed_still_needs_it():
    for name, reason in ALLOWED.items():
        path = ROOT / name
        assert reason and path.exists() and len(path.read_text().splitlines()) > LIMIT, f"drop {name} from ALLOWED"


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_walk_finds_the_modules(folder):
    assert len([p for p in modules() if p.relative_to(ROOT).parts[0] == folder]) >= (3 if folder == "roles" else 8)


# --- the deploy: one screen per role


ROLES = {"server": "Server", "router": "Router"}
SCREEN = 60


def role_class(role: str) -> ast.ClassDef:
    tree = ast.parse((ROOT / "roles" / f"{role}.py").read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == ROLES[role])


def test_the_deploy_only_picks_the_role():
    assert len((ROOT / "deploy.py").read_text().splitlines()) <= SCREEN


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_path_is_its_steps_called_in_the_order_they_are_written(role):
    """``converge`` reads as the path: one step a line, each a method below it, in the file's order."""
    cls = role_class(role)
    methods = [m.name for m in cls.body if isinstance(m, ast.FunctionDef)]
    converge = next(m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "converge")
    steps = []
    for statement in converge.body[1:]:  # after its docstring
        call = statement.value if isinstance(statement, ast.Expr) else None
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute), ast.unparse(statement)
        steps.append(call.func.attr)
    assert steps and all(step in methods for step in steps)
    assert [methods.index(step) for step in steps] == sorted(methods.index(step) for step in steps)


@pytest.mark.parametrize("role", [*ROLES, "turn"])
def test_every_step_fits_on_a_screen(role):
    tree = ast.parse((ROOT / "roles" / f"{role}.py").read_text())
    long = {
        f"{cls.name}.{m.name}": m.end_lineno - m.lineno + 1
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for m in cls.body
        if isinstance(m, ast.FunctionDef) and m.end_lineno - m.lineno + 1 > SCREEN
    }
    assert long == {}, "split these steps"


# --- podkit/host/: rooms by job


HOST = ROOT / "podkit" / "host"
#: Each room of podkit/host/ and its job, the words its ``__init__``'s docstring opens with.
ROOMS = {"start": "One vLLM start"}


def listed(package: Path) -> set[str]:
    """The names a package's docstring maps (``    name   what it does``; a room as ``name/``)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return set(re.findall(r"^    (\w+/?)  +\S", doc, re.MULTILINE))


def contents(package: Path) -> set[str]:
    """Its modules and its rooms (``name/``), as a map names them."""
    return {p.stem for p in package.glob("*.py") if p.stem != "__init__"} | {
        f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()
    }


def test_each_room_of_host_says_its_job():
    assert {name.rstrip("/") for name in contents(HOST) if name.endswith("/")} == set(ROOMS)
    for room, job in ROOMS.items():
        doc = ast.get_docstring(ast.parse((HOST / room / "__init__.py").read_text())) or ""
        assert doc.startswith(job), f"podkit/host/{room}/__init__.py: open its docstring with its job, {job!r}"


@pytest.mark.parametrize("package", ["", *ROOMS])
def test_the_map_of_host_and_of_each_room_lists_what_it_holds(package):
    folder = HOST / package
    assert listed(folder) == contents(folder), f"{folder.relative_to(ROOT)}/__init__.py: map each module, and no other"


def room_of(module: str) -> str | None:
    """The room of podkit/host/ a module sits in (``podkit.host.start.readiness``: start), or None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["podkit", "host"] and len(parts) > 3 else None


def test_a_module_only_one_room_uses_sits_in_that_room():
    """A module at host/'s top level imported by one room's modules alone is that room's."""
    graph = module_graph([p for p in source_files() if module_name(p).split(".")[0] in PRODUCT])
    strays = {}
    for top in (f"podkit.host.{name}" for name in contents(HOST) if not name.endswith("/")):
        rooms = {room_of(user) for user, used in graph.items() if top in used}
        if len(rooms) == 1 and None not in rooms:
            strays[top] = rooms.pop()
    assert strays == {}, f"move each into its room: {strays}"
