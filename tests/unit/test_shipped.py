"""podctl and the idle watcher are each one program on the host, put together from parts here: the
program is exactly the parts, in their order, each part imports only the standard library and the
parts before it, and each part has tests of its own. Then podctl's parts no test elsewhere reaches
directly."""

import ast
import importlib
import inspect
import os
import re
from pathlib import Path

import pytest

from podkit.host.shipped import program
from tests.helpers import ROOT, idle, podctl

#: Each program shipped to the host as one file, and the module the tests load it as.
PROGRAMS = {"podkit.remote.podctl": podctl, "podkit.remote.idle": idle}
PARTS = [(package, name) for package in PROGRAMS for name in importlib.import_module(package).PARTS]


def folder(package):
    return ROOT / package.replace(".", "/")


def part(package, name):
    return importlib.import_module(f"{package}.{name}")


def own(module) -> dict:
    """What ``module`` defines itself (functions, classes), by name."""
    return {
        name: value
        for name, value in vars(module).items()
        if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__
    }


def code_of(value):
    """A function's code, or a class's methods' code, to compare what runs with what is written."""
    if inspect.isclass(value):
        return {name: code_of(member) for name, member in vars(value).items() if inspect.isfunction(member)}
    return bytecode(value.__code__)


def bytecode(code):
    """What a code object does, where it sits left out (a nested one's line numbers differ in the program)."""
    consts = tuple(bytecode(c) if inspect.iscode(c) else c for c in code.co_consts)
    return (code.co_code, consts, code.co_names, code.co_varnames)


@pytest.mark.parametrize("package", PROGRAMS)
def test_the_parts_are_the_folder(package):
    parts = importlib.import_module(package).PARTS
    assert sorted(parts) == sorted(p.stem for p in folder(package).glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("package, name", PARTS)
def test_what_runs_on_the_host_is_each_part_as_written(package, name):
    module = part(package, name)
    assert own(module), f"{name} defines nothing"
    for attr, value in own(module).items():
        assert code_of(getattr(PROGRAMS[package], attr)) == code_of(value), f"{name}.{attr} differs in the program"


@pytest.mark.parametrize("package", PROGRAMS)
def test_no_name_is_defined_by_two_parts(package):
    seen: dict[str, str] = {}
    for name in importlib.import_module(package).PARTS:
        tree = ast.parse((folder(package) / f"{name}.py").read_text())
        for node in tree.body:
            targets = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else []
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for target in targets:
                assert target not in seen, f"{target} is defined by {seen[target]} and {name}"
                seen[target] = name


@pytest.mark.parametrize("package, name", PARTS)
def test_a_part_imports_the_standard_library_and_earlier_parts_only(package, name):
    parts = importlib.import_module(package).PARTS
    earlier = {f"{package}.{p}" for p in parts[: parts.index(name)]}
    for node in ast.walk(ast.parse((folder(package) / f"{name}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("podkit"):
            assert node.module in earlier and not node.level, f"{name} imports {node.module}, not an earlier part"
            assert all(alias.asname is None for alias in node.names), "one namespace on the host: no renaming"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                top = (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                assert top in os.sys.stdlib_module_names, f"{name} imports {top}, which a host's python3 may lack"


@pytest.mark.parametrize("package", PROGRAMS)
def test_the_program_opens_with_the_table_of_contents_and_names_each_part(package):
    source = program(package)
    assert source.startswith('"""' + importlib.import_module(package).__doc__.split("\n")[0])
    banners = re.findall(r"^# --- (\w+): ", source, re.M)
    assert banners == list(importlib.import_module(package).PARTS)
    assert not re.search(r"^\s*(from|import) podkit", source, re.M), "one program: no part imports another"


@pytest.mark.parametrize("package", PROGRAMS)
def test_each_part_has_tests(package):
    """A part's functions (or podctl's verbs) are called by name somewhere in the tests, through the program."""
    name = package.rsplit(".", 1)[1]
    called = set()
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text()
        called |= set(re.findall(rf"\b{name}\.(\w+)", text))
        called |= {verb.replace("-", "_") for verb in re.findall(rf'{name}(?:_command)?\(\s*"([\w-]+)"', text)}
    parts = importlib.import_module(package).PARTS
    untested = [p for p in parts if not set(own(part(package, p))) & called]
    assert untested == [], "parts no test calls"


# --- podctl's parts the probe reaches only as a whole: machine, lock, cluster


def test_a_paths_mode_and_owner_are_read_without_following_a_link(tmp_path):
    target = tmp_path / "launch.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o750)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert podctl.mode_and_owner(str(target))["mode"] == "750"
    assert podctl.mode_and_owner(str(link))["mode"] == "777", "the link itself, not what it points at"
    assert podctl.mode_and_owner(str(tmp_path / "missing")) is None


def test_a_missing_volume_is_measured_at_the_folder_that_exists(tmp_path):
    found = podctl.volume(str(tmp_path / "workspace" / "deeper"))
    assert (found["exists"], found["checked_path"], found["tree_writable"]) == (False, str(tmp_path), None)
    assert found["free_bytes"] > 0 and found["writable"]


def test_the_lock_holder_is_named_outside_the_volume_until_the_run_folder_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(podctl.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = str(tmp_path / "volume" / "podkit" / "run" / "deploy.lock.json")
    stand_in = podctl.holder_stand_in(path)
    assert Path(stand_in).parent == tmp_path / "tmp" and stand_in == podctl.holder_stand_in(path)
    assert stand_in != podctl.holder_stand_in(path + "2")
    assert podctl.read_holder_file(path) is None
    Path(stand_in).write_text('{"controller": {"host": "laptop"}}')
    assert podctl.read_holder_file(path) == {"controller": {"host": "laptop"}}


def test_a_cluster_variable_comes_from_the_session_before_the_containers_init(monkeypatch):
    monkeypatch.setenv("PODKIT_TEST_NODE_RANK", "1")
    monkeypatch.delenv("PODKIT_TEST_ABSENT", raising=False)
    found = podctl.container_env(("PODKIT_TEST_NODE_RANK", "PODKIT_TEST_ABSENT"))
    assert found == {"PODKIT_TEST_NODE_RANK": "1"}


def test_loopback_is_among_the_interfaces_addresses():
    assert "127.0.0.1" in podctl.interface_addresses().get("lo", [])


@pytest.mark.parametrize(
    "fault, raised",
    [
        (None, False),
        ("NOT_RUNNING: vllm", False),  # a stop of a program that exited since its state was read
        ("ALREADY_STARTED: edge", False),  # a start its autorestart began
        ("SPAWN_ERROR: vllm", False),  # a start that exited at once: readiness reads it and puts back
        ("BAD_NAME: vllm", True),
    ],
)
def test_a_stop_or_start_the_program_already_made_is_no_error(fault, raised):
    import xmlrpc.client

    from podkit.remote.podctl.control import settled

    calls = []

    def call(name, wait):
        calls.append((name, wait))
        if fault:
            raise xmlrpc.client.Fault(50, fault)

    if raised:
        with pytest.raises(xmlrpc.client.Fault):
            settled(call, "vllm", False)
    else:
        settled(call, "vllm", False)
    assert calls == [("vllm", False)]
