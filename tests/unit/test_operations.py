"""Data-driven operation tests, in the style of pyinfra's own.

One JSON file per case under tests/cases/operations/<module>.<operation>/:
``args`` in, the ``commands`` the operation must yield out (or the
``noop_description`` it must give). Arguments that are objects are built from
plain JSON by ``ADAPTERS``. The harness runs ``op._inner`` against a fake host.
"""

import json
from pathlib import Path

import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand
from pyinfra.context import ctx_host

from operations import checkpoint, preflight, runner, vllm, volume
from podkit.settings import PackageSpec, Paths, Settings
from podkit.host.fetch import FetchSpec
from podkit.host.probe import VllmInstall

from .test_config import sample_data

CASES = Path(__file__).resolve().parent.parent / "cases" / "operations"
OPERATIONS = {
    "volume.root": volume.root,
    "volume.directories": volume.directories,
    "volume.file": volume.file,
    "volume.secret": volume.secret,
    "vllm.venv": vllm.venv,
    "vllm.endpoint": vllm.endpoint,
    "runner.service": runner.service,
    "runner.unit": runner.unit,
    "runner.unit_service": runner.unit_service,
    "preflight.checks": preflight.checks,
    "checkpoint.cache_clean": checkpoint.cache_clean,
    "checkpoint.fetched": checkpoint.fetched,
}
ADAPTERS = {
    "vllm.venv": {
        "package": lambda v: PackageSpec.parse(v, "package"),
        "paths": Paths,
        "found": lambda v: v and VllmInstall(**v),
    },
    "vllm.endpoint": {"settings": lambda v: Settings.from_mapping({**sample_data(), **v})},
    "checkpoint.cache_clean": {"paths": Paths},
    "checkpoint.fetched": {"paths": Paths, "spec": lambda v: FetchSpec(**{**v, "files": tuple(v["files"])})},
}


class FakeHost:
    name = "fake"

    def __init__(self):
        self.noops = []

    def noop(self, description):
        self.noops.append(description)


def describe(command):
    if isinstance(command, FileUploadCommand):
        return {"upload": command.dest, "content": command.src.getvalue()}
    if isinstance(command, FunctionCommand):
        return {"function": command.function.__name__}
    return str(command)


def cases():
    return list(_cases())


def _cases():
    for path in sorted(CASES.glob("*/*.json")):
        yield pytest.param(path, id=f"{path.parent.name}/{path.stem}")


@pytest.mark.parametrize("path", cases())
def test_operation(path):
    case = json.loads(path.read_text())
    op = OPERATIONS[path.parent.name]
    adapters = ADAPTERS.get(path.parent.name, {})
    args = {k: adapters[k](v) if k in adapters else v for k, v in case["args"].items()}
    fake = FakeHost()
    with ctx_host.use(fake):
        commands = [describe(c) for c in op._inner(**args)]
    assert commands == case.get("commands", [])
    assert fake.noops == ([case["noop_description"]] if "noop_description" in case else [])


def test_every_operation_has_a_noop_case_and_a_change_case():
    seen = {}
    for path in CASES.glob("*/*.json"):
        case = json.loads(path.read_text())
        seen.setdefault(path.parent.name, set()).add("noop" if "noop_description" in case else "change")
    for name in OPERATIONS:
        assert seen.get(name) == {"noop", "change"}, f"{name} needs both a no-op and a change case"
