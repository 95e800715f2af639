"""Ctrl-C ends a deploy with a non-zero exit and, per host, a line saying what was left undone.

pyinfra 3.10's CLI (``pyinfra_cli/main.py``) answers SIGINT with ``click.echo("Exiting upon user
request!"); sys.exit(0)``: the ``SystemExit`` unwinds the run, pyinfra disconnects, and the shell
sees success although the later operations never ran (the host kept serving its old files).
:func:`exit_nonzero_on_interrupt`, called at the top of ``deploy.py`` (which pyinfra runs after it
set its own handler and before any operation executes), puts a handler in its place that ends the
run the same way, through ``SystemExit``, but with status 130 (128 + SIGINT, what a shell reports)
after naming, per host, the operations it did not finish. A Ctrl-C before ``deploy.py`` runs
(while pyinfra connects) still meets pyinfra's own handler: nothing has changed on a host then.
"""

from __future__ import annotations

import os
import signal
import sys

import click
import gevent
from pyinfra.context import ctx_state

EXIT_INTERRUPTED = 130


def undone(state) -> dict[str, list[str]]:
    """Per host still in the run, the names of its operations not completed yet, in run order."""
    left = {}
    for host in state.inventory:
        if host in state.failed_hosts:
            continue
        ops = state.ops.get(host, {})
        names = [
            ", ".join(sorted(state.get_op_meta(op_hash).names)) or op_hash
            for op_hash in state.get_op_order()
            if op_hash in ops and not ops[op_hash].operation_meta.is_complete()
        ]
        if names:
            left[host.name] = names
    return left


def lines(state) -> list[str]:
    """One line per host that was interrupted: how many operations it did not finish, and which."""
    if state is None:
        return ["interrupted (Ctrl-C) before any operation ran: re-run the deploy"]
    return [
        f"{name}: interrupted (Ctrl-C) with {len(names)} operation(s) not done: {'; '.join(names)}; "
        "the host may still serve its old files: re-run the deploy"
        for name, names in undone(state).items()
    ] or ["interrupted (Ctrl-C) after every operation ran"]


def _interrupted(_signum, _frame) -> None:
    # os.write, not click.echo: the signal may arrive while pyinfra's logger is inside a write to
    # the same buffered stderr, and a second write there raises "reentrant call" instead of exiting
    text = "".join(click.style(line, fg="red") + "\n" for line in lines(ctx_state.get()))
    os.write(sys.stderr.fileno(), text.encode())
    sys.exit(EXIT_INTERRUPTED)


def exit_nonzero_on_interrupt() -> None:
    """Make Ctrl-C end the run with status 130 and a line per host naming what it left undone.

    The Python-level handler runs only when the main greenlet runs Python code, which it does not
    while it waits on a remote command (``sleep 30`` there would delay the exit by 30 s); gevent's
    own signal watcher runs in the hub at once and throws the same exit into the main greenlet."""
    signal.signal(signal.SIGINT, _interrupted)
    main = gevent.getcurrent()

    def in_the_hub() -> None:
        try:
            _interrupted(signal.SIGINT, None)
        except SystemExit as stop:
            gevent.kill(main, stop)

    gevent.signal_handler(signal.SIGINT, in_the_hub)
