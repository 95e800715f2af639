"""Run ``pyinfra ARGS`` in this process and write its CPU-seconds by phase as JSON: what
``benchmarks/converge.py --profile`` runs in place of the ``pyinfra`` command.

    python benchmarks/phases.py OUT.json TREE -y --json inventories/sandbox.py deploy.py

TREE is the project tree whose deploy runs (the working tree, or an older commit's files for a
before-and-after). Each phase is timed by the CPU this process spent in it (``time.process_time``:
every thread, paramiko's transport included), exclusive of the phases inside it:

    python start          the interpreter, before this script's first line
    pyinfra's import      pyinfra's CLI and API modules (gevent, paramiko, click, jinja2)
    podkit's import       the modules the deploy and its data import (roles, operations, podkit)
    pyinfra's start       pyinfra's CLI: its arguments, config and state
    inventory             the inventory file and group_data, each host's settings
    SSH                   connecting (key exchange, host key check, authentication)
    probe                 the one remote command that reads the host, and its reading
    plan                  the plan before spending (checkpoint, context, parsers), the preflight
    rendering             every file the host gets, rendered from templates
    comparison            the other steps: each operation compared with the probe's facts
    pyinfra's prepare     pyinfra's own work around the deploy file (its operation bookkeeping)
    running               pyinfra runs the operations (none yield a command on a converged host)
    output and exit       the results (JSON), disconnecting, exiting

Wrapping functions by name keeps this script apart from the product: a phase whose function a
tree lacks is 0.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
import time

START = time.process_time()


class Phases:
    """Exclusive CPU-seconds per phase: entering a phase charges what passed to the one it interrupts."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {"python start": START}
        self.stack: list[str] = []
        self.mark = START
        self.renames: dict[str, str] = {}

    def _charge(self) -> None:
        now = time.process_time()
        if self.stack:
            self.spent[self.stack[-1]] = self.spent.get(self.stack[-1], 0.0) + now - self.mark
        self.mark = now

    def enter(self, name: str) -> None:
        self._charge()
        self.stack.append(name)

    def leave(self) -> None:
        self._charge()
        name = self.stack.pop()
        if name in self.renames and self.stack:
            self.stack[0] = self.renames[name]

    def leave_all(self) -> None:
        while self.stack:
            self.leave()

    def after(self, phase: str, then: str) -> None:
        """Once ``phase`` returns, what is left of the run is ``then`` (the bottom of the stack renamed)."""
        self.renames[phase] = then

    def wrap(self, owner, attr: str, name: str) -> None:
        """Time ``owner.attr`` (a function or method) as phase ``name``; a tree without it is left alone."""
        func = getattr(owner, attr, None)
        if func is None:
            return

        def timed(*args, **kwargs):
            self.enter(name)
            try:
                return func(*args, **kwargs)
            finally:
                self.leave()

        setattr(owner, attr, timed)


def main() -> None:
    out, tree, args = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
    os.chdir(tree)
    sys.path.insert(0, tree)
    phases = Phases()

    phases.enter("pyinfra's import")
    import pyinfra_cli.cli as cli
    import pyinfra_cli.inventory  # noqa: F401
    import pyinfra_cli.main as entry

    phases.leave()

    sys.dont_write_bytecode = True  # as pyinfra's CLI sets it before it loads the inventory and the deploy
    phases.enter("podkit's import")
    found = {}
    for name in ("podkit.settings", "operations.facts", "roles.turn", "roles.server", "roles.router"):
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            pass
    phases.leave()

    phases.wrap(cli, "make_inventory", "inventory")
    phases.wrap(cli, "connect_all", "SSH")
    phases.wrap(cli, "load_deploy_file", "pyinfra's prepare")
    phases.wrap(cli, "run_ops", "running")
    if "roles.turn" in found:
        phases.wrap(found["roles.turn"].Turn, "__init__", "inventory")  # the host's settings, key and token
    if "operations.facts" in found:
        phases.wrap(found["operations.facts"], "pod_state", "probe")
    server = found.get("roles.server")
    if server is not None:
        for step in STEPS:
            phases.wrap(server.Server, step, "comparison")  # the probe and the rendering inside are their own
        phases.wrap(server.Server, "plan", "plan")
        phases.wrap(server, "host_files", "rendering")

    def write() -> None:
        phases.leave_all()
        with open(out, "w") as handle:
            json.dump(phases.spent, handle)

    atexit.register(write)
    sys.argv = ["pyinfra", *args]
    phases.enter("pyinfra's start")
    phases.after("running", "output and exit")
    entry.main()


#: The server's steps whose operations compare the host's facts with what it should be.
STEPS = ("read", "install", "key", "measure", "checkpoint", "check_launch", "scripts", "supervise", "readiness")
STEPS += ("self_stop",)


if __name__ == "__main__":
    main()
