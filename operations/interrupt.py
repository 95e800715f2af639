"""Ctrl-C ends a deploy at once, non-zero, with a line saying what ran and what did not.

pyinfra 3.10's CLI (``pyinfra_cli/main.py``) answers SIGINT with ``click.echo("Exiting upon user
request!"); sys.exit(0)``: the ``SystemExit`` unwinds the run, pyinfra disconnects, and the shell
sees success although the later operations never ran (the host kept serving its old files).
:func:`exit_nonzero_on_interrupt` puts a handler in its place that ends the run the same way,
through ``SystemExit``, but with status 130 (128 + SIGINT, what a shell reports) after one line
per host saying where the run was: loading the inventory or connecting (no host reached or
changed), planning (the probe and the preflight: nothing changed), or running (how many of the
host's operations ran, and the ones that did not).

It is installed twice: by ``config.py`` (the file pyinfra itself executes first, before the
inventory is loaded and any host is reached) and again by ``deploy.py``. What runs before
``config.py`` is pyinfra's own start (its imports, its handler); ``podkit up`` starts pyinfra with
SIGINT ignored until those handlers take it (``podkit_cli/lifecycle.py``), so no Ctrl-C meets a
Python import there.

Nothing it leaves behind prints a traceback: paramiko's transport, whose socket the unwinding
closes while it still reads a host's banner, would log one; its logger is silenced first.

The exit is bounded: the unwinding (pyinfra disconnecting from each host while a remote command
still runs, or a channel being opened) gets :data:`GRACE_SECONDS`, after which a real thread (not a
greenlet: pyinfra patches threading) ends the process with the same status. A Ctrl-C that once met
pyinfra opening a channel hung the deploy for 20 minutes.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import click
import gevent
from gevent import monkey
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_state

EXIT_INTERRUPTED = 130
#: Seconds the run has to unwind after Ctrl-C before the process ends anyway (the stated bound).
GRACE_SECONDS = 3.0

_said: list[bool] = []  # the line is said once, whatever number of Ctrl-C follow
_thrown: list[bool] = []  # the exit is raised in (or thrown into) the run's greenlet once
_main: list = []  # the run's greenlet: pyinfra's main, where config.py and deploy.py run


def undone(state) -> dict[str, tuple[int, list[str]]]:
    """Per host still in the run: (how many of its operations ran, the names of those that did not),
    in run order; a host with nothing left is not named."""
    left = {}
    for host in state.inventory:
        if host in state.failed_hosts:
            continue
        ops = state.ops.get(host, {})
        order = [op_hash for op_hash in state.get_op_order() if op_hash in ops]
        names = [
            ", ".join(sorted(state.get_op_meta(op_hash).names)) or op_hash
            for op_hash in order
            if not ops[op_hash].operation_meta.is_complete()
        ]
        if names:
            left[host.name] = (len(order) - len(names), names)
    return left


#: Before the operations run, where the run was, and that nothing changed on any host.
BEFORE_RUN = {
    StateStage.Setup: "while pyinfra loaded the inventory: no host was reached",
    StateStage.Connect: "while pyinfra connected to the hosts: no operation ran, nothing changed",
    StateStage.Prepare: "while the deploy was planned (the probe, the preflight): no operation ran, nothing changed",
}


def lines(state) -> list[str]:
    """What a Ctrl-C now left: one line per host whose operations did not all run, or one line for the run."""
    stage = getattr(state, "current_stage", None) if state is not None else None
    if state is None or stage in BEFORE_RUN:
        where = BEFORE_RUN.get(stage, BEFORE_RUN[StateStage.Setup])
        return [f"interrupted (Ctrl-C) {where}: re-run the deploy"]
    if stage == StateStage.Disconnect:
        return ["interrupted (Ctrl-C) after every operation ran, while pyinfra disconnected"]
    return [
        f"{name}: interrupted (Ctrl-C) after {ran} operation(s) ran, with {len(names)} not done: "
        f"{'; '.join(names)}; the host may still serve its old files: re-run the deploy"
        for name, (ran, names) in undone(state).items()
    ] or ["interrupted (Ctrl-C) after every operation ran"]


def _exit_within(seconds: float) -> None:
    """End the process with :data:`EXIT_INTERRUPTED` in ``seconds`` unless it has ended by then, from
    a real thread (pyinfra's gevent patches threading, and a greenlet would wait for the hub)."""
    start = monkey.get_original("_thread", "start_new_thread")
    sleep = monkey.get_original("time", "sleep")

    def later() -> None:
        sleep(seconds)
        os.write(sys.stderr.fileno(), b"(the run did not unwind in time: ended)\n")
        os._exit(EXIT_INTERRUPTED)

    start(later, ())


def _say_once() -> None:
    """The line (once), paramiko silenced, and the process's end set for :data:`GRACE_SECONDS` later."""
    if _said:
        return
    _said.append(True)
    # the connections closed under it: paramiko's transport logs its broken read with a traceback
    logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)
    # os.write, not click.echo: the signal may arrive while pyinfra's logger is inside a write to
    # the same buffered stderr, and a second write there raises "reentrant call" instead of exiting
    text = "".join(click.style(line, fg="red") + "\n" for line in lines(ctx_state.get()))
    os.write(sys.stderr.fileno(), text.encode())
    _exit_within(GRACE_SECONDS)


def _interrupted(_signum, _frame) -> None:
    """Python runs this in whichever greenlet runs Python code when the signal is checked: the run's
    own (the main greenlet) exits at once; another (gevent's hub checks signals every 0.3 s while the
    run waits on a host) throws the exit into the main greenlet, once. A ``SystemExit`` raised in the
    hub itself would kill the hub under the run and end it in a traceback."""
    _say_once()
    main = _main[0] if _main else None
    if main is None or gevent.getcurrent() is main:
        _thrown.append(True)
        sys.exit(EXIT_INTERRUPTED)
    if not _thrown:
        _thrown.append(True)
        gevent.kill(main, SystemExit(EXIT_INTERRUPTED))


def exit_nonzero_on_interrupt() -> None:
    """Make Ctrl-C end the run with status 130, a line per host saying what ran and what did not, and
    the exit within :data:`GRACE_SECONDS`, whichever greenlet is running when the signal is checked."""
    _main[:] = [gevent.getcurrent()]
    signal.signal(signal.SIGINT, _interrupted)
