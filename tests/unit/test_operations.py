"""Data-driven operation tests, in the style of pyinfra's own.

One JSON file per case under tests/cases/operations/<module>.<operation>/:
``args`` in, the ``commands`` the operation must yield out (or the
``noop_description`` it must give). Arguments that are objects are built from
plain JSON by ``ADAPTERS``. The harness runs ``op._inner`` against a fake host.
A function command is written ``{"function": NAME}``, with ``args`` and ``kwargs`` when the case
lists them (then they must match). Optional: ``diff`` (run as under ``pyinfra --diff``), ``facts`` (what the host
answers, as pyinfra's cases write them: ``{"files.FileContents": {"path=/x": [...]}}``;
an operation reading a fact no case lists fails, and every listed one must be
read) and ``logs`` (the lines it must log, unstyled).
"""

import json
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand
from pyinfra.context import ctx_host, ctx_state

from operations import checkpoint, interrupt, preflight, rollback, supervisor, vllm, volume
from podkit.host.fetch import FetchSpec
from podkit.host.hoststate import VllmInstall
from podkit.paths import Paths
from podkit.settings import PackageSpec, Settings
from tests.helpers import sample_data

CASES = Path(__file__).resolve().parent.parent / "cases" / "operations"
OPERATIONS = {
    "volume.root": volume.root,
    "volume.directories": volume.directories,
    "volume.file": volume.file,
    "volume.secret": volume.secret,
    "vllm.venv": vllm.venv,
    "vllm.endpoint": vllm.endpoint,
    "supervisor.programs": supervisor.programs,
    "supervisor.legacy_runner": supervisor.legacy_runner,
    "supervisor.supervisord_stopped": supervisor.supervisord_stopped,
    "supervisor.unit": supervisor.unit,
    "supervisor.unit_service": supervisor.unit_service,
    "supervisor.orphans": supervisor.orphans,
    "supervisor.self_stop": supervisor.self_stop,
    "preflight.checks": preflight.checks,
    "preflight.launch": preflight.launch,
    "rollback.kept": rollback.kept,
    "checkpoint.cache_clean": checkpoint.cache_clean,
    "checkpoint.fetched": checkpoint.fetched,
}
ADAPTERS = {
    "vllm.venv": {
        "package": lambda v: PackageSpec.parse(v, "package"),
        "paths": Paths,
        "found": lambda v: v and VllmInstall(**v),
        "tools": lambda v: [PackageSpec.parse(spec, "tools") for spec in v],
        "missing_tools": lambda v: [PackageSpec.parse(spec, "missing_tools") for spec in v],
    },
    "vllm.endpoint": {"settings": lambda v: Settings.from_mapping({**sample_data(), **v})},
    "preflight.launch": {"settings": lambda v: Settings.from_mapping({**sample_data(), **v})},
    "checkpoint.cache_clean": {"paths": Paths},
    "checkpoint.fetched": {"paths": Paths, "spec": lambda v: FetchSpec(**{**v, "files": tuple(v["files"])})},
}


class FakeHost:
    name = "fake"

    def __init__(self, facts=None):
        self.noops, self.logs, self.facts, self.facts_read = [], [], facts or {}, []

    def noop(self, description):
        self.noops.append(description)

    def log(self, message, log_func=None):
        del log_func  # pyinfra's logger: the fake keeps the message
        self.logs.append(click.unstyle(message))

    def get_fact(self, fact, **kwargs):
        name = f"{fact.__module__.rsplit('.', 1)[-1]}.{fact.__name__}"
        args = ",".join(f"{key}={value}" for key, value in sorted(kwargs.items()))
        assert args in self.facts.get(name, {}), f"unexpected remote read: {name} {args}"
        self.facts_read.append((name, args))
        return self.facts[name][args]


class FakeState:
    """The state of a change-detection pass (no ``-y``), with ``--diff`` on or off."""

    is_executing = False

    def __init__(self, diff=False):
        self.config = SimpleNamespace(DIFF=diff)

    def should_check_for_changes(self):
        return True


def describe(command, expected=None):
    """A yielded command as a case writes it; a function's arguments only where ``expected`` lists them."""
    if isinstance(command, FileUploadCommand):
        return {"upload": command.dest, "content": command.src.getvalue()}
    if isinstance(command, FunctionCommand):
        described = {"function": command.function.__name__}
        listed = expected if isinstance(expected, dict) else {}
        if "args" in listed:
            described["args"] = list(command.args)
        if "kwargs" in listed:
            described["kwargs"] = dict(command.kwargs)
        return described
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
    fake = FakeHost(case.get("facts"))
    expected = case.get("commands", [])
    with ctx_host.use(fake), ctx_state.use(FakeState(diff=case.get("diff", False))):
        yielded = list(op._inner(**args))
    commands = [describe(c, expected[i] if i < len(expected) else None) for i, c in enumerate(yielded)]
    assert commands == expected
    assert fake.noops == ([case["noop_description"]] if "noop_description" in case else [])
    assert fake.logs == case.get("logs", [])
    listed = [(name, key) for name, by_key in case.get("facts", {}).items() for key in by_key]
    assert sorted(fake.facts_read) == sorted(listed)


def test_every_operation_has_a_noop_case_and_a_change_case():
    seen = {}
    for path in CASES.glob("*/*.json"):
        case = json.loads(path.read_text())
        seen.setdefault(path.parent.name, set()).add("noop" if "noop_description" in case else "change")
    for name in OPERATIONS:
        assert seen.get(name) == {"noop", "change"}, f"{name} needs both a no-op and a change case"


# --- Ctrl-C: pyinfra 3.10 itself exits 0 on SIGINT (pyinfra_cli/main.py), later operations skipped ---

INTERRUPTED_DEPLOY = """\
from pyinfra.operations import server

from operations import interrupt

interrupt.exit_nonzero_on_interrupt()
server.shell(name="Sleep a while", commands=["sleep 10"])
server.shell(name="Write the marker", commands=["touch {marker}"])
"""


@pytest.mark.proc
@pytest.mark.parametrize("at", ["running", "opening"], ids=["as the host runs the command", "as the channel opens"])
def test_ctrl_c_during_a_deploy_exits_non_zero_and_says_what_is_left_undone(tmp_path, at):
    """A real pyinfra run against a private sshd, sent SIGINT in its first operation: while the host
    runs its command, or at once after the operation's line, as pyinfra opens the command's channel
    (a moment that once hung pyinfra for good: the exit is bounded now)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from podkit.sandbox.sshd import PrivateSshd
    from tests.helpers import ROOT

    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server (sshd) is not installed")
    sshd = PrivateSshd(tmp_path / "sshd")
    ssh_host = sshd.start()
    try:
        marker = tmp_path / "marker"
        (tmp_path / "deploy.py").write_text(INTERRUPTED_DEPLOY.format(marker=marker))
        (tmp_path / "inventory.py").write_text(f'hosts = [("box", {ssh_host.pyinfra_data()!r})]\n')
        run = subprocess.Popen(
            [str(Path(sys.executable).with_name("pyinfra")), "-y", "inventory.py", "deploy.py"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
        )
        seen = []
        for line in run.stdout:
            seen.append(line)
            if "Starting operation: Sleep a while" in line:
                break
        # the signal while the host runs the operation's command, as a user's Ctrl-C in a long step
        # (sent at once after the line above, it once met pyinfra still opening the command's channel,
        # and that pyinfra never exited: a fresh-clone run on a loaded machine hung here)
        sshd_pid = int(sshd.pid_file.read_text().split()[0])
        deadline = time.monotonic() + 30
        while at == "running" and not _runs_under(sshd_pid, b"sleep\x0010\x00") and time.monotonic() < deadline:
            time.sleep(0.1)
        run.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            rest, _ = run.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            run.kill()
            rest = run.communicate()[0]
            pytest.fail(f"pyinfra did not exit within 90 s of SIGINT: {''.join(seen)[-2000:]}{rest[-2000:]}")
        took = time.monotonic() - sent
        out = "".join(seen) + rest
        assert run.returncode == interrupt.EXIT_INTERRUPTED, out
    finally:
        sshd.stop()
    assert "box: interrupted (Ctrl-C) after 0 operation(s) ran, with 2 not done: Sleep a while; Write the marker" in out
    assert not marker.exists() and "Traceback" not in out
    # the bound the handler states (its grace, then the process ends anyway), with room for a loaded machine
    assert took < interrupt.GRACE_SECONDS + 5, f"{took:.1f} s from SIGINT to the exit"


class _Meta:
    def __init__(self, names):
        self.names = names


class _Op:
    def __init__(self, done):
        self.operation_meta = type("M", (), {"is_complete": lambda _: done})()


class _Host:
    def __init__(self, name):
        self.name = name


def _state(stage, done):
    """A pyinfra State as interrupt.lines reads it: its stage, and one host's three operations, ``done`` of them run."""
    from pyinfra.api.state import StateStage

    host = _Host("box")
    hashes = ["a", "b", "c"]
    return type(
        "State",
        (),
        {
            "current_stage": getattr(StateStage, stage),
            "inventory": [host],
            "failed_hosts": set(),
            "ops": {host: {h: _Op(i < done) for i, h in enumerate(hashes)}},
            "get_op_order": lambda self: hashes,
            "get_op_meta": lambda self, h: _Meta({f"Op {h}"}),
        },
    )()


@pytest.mark.parametrize(
    "stage, done, said",
    [
        ("Setup", 0, "interrupted (Ctrl-C) while pyinfra loaded the inventory: no host was reached"),
        ("Connect", 0, "interrupted (Ctrl-C) while pyinfra connected to the hosts: no operation ran, nothing changed"),
        (
            "Prepare",
            0,
            "interrupted (Ctrl-C) while the deploy was planned (the probe, the preflight): no operation ran",
        ),
        ("Execute", 1, "box: interrupted (Ctrl-C) after 1 operation(s) ran, with 2 not done: Op b; Op c; the host"),
        ("Execute", 3, "interrupted (Ctrl-C) after every operation ran"),
        ("Disconnect", 3, "interrupted (Ctrl-C) after every operation ran, while pyinfra disconnected"),
    ],
)
def test_the_ctrl_c_line_says_where_the_run_was_and_what_ran(stage, done, said):
    """At "Loading: deploy.py" the line once said every operation ran when none had: the stage says."""
    (line,) = interrupt.lines(_state(stage, done))
    assert line.startswith(said), line


def test_a_ctrl_c_before_pyinfra_made_its_state_says_no_host_was_reached():
    assert interrupt.lines(None) == [
        "interrupted (Ctrl-C) while pyinfra loaded the inventory: no host was reached: re-run the deploy"
    ]


def test_pyinfras_config_file_installs_the_handler_before_the_inventory_loads():
    from tests.helpers import ROOT

    assert "interrupt.exit_nonzero_on_interrupt()" in (ROOT / "config.py").read_text()


def _runs_under(ancestor: int, cmdline: bytes) -> bool:
    """Whether a process with exactly ``cmdline`` (NUL-separated) runs below process ``ancestor``."""
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "cmdline").read_bytes() != cmdline:
                continue
            pid = int(entry.name)
            while pid > 1:
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if pid == ancestor:
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def test_the_deploy_installs_the_interrupt_handler_before_reading_the_host():
    from tests.helpers import ROOT

    source = (ROOT / "deploy.py").read_text()
    handler = source.index("interrupt.exit_nonzero_on_interrupt()")
    assert 0 <= handler < source.index("turn.converge()") and handler < source.index("turn.read()")
    for role in ("server", "router"):  # and each role's path reads the host first
        steps = (ROOT / "roles" / f"{role}.py").read_text()
        assert steps.index("facts.pod_state(") < steps.index("preflight.checks(")
