"""What the supervision of a host promises, checked against what runs: no promise without its process.

``podkit status`` and ``verify`` read the programs' states from the supervisor itself
(supervisord over its socket, or systemd), never from what a program wrote before it died: an
idle watcher that is not running stops nothing, so its last deadline is no promise. Each
problem is one line with the fix. Pure: tests feed it recorded answers of ``podctl status``
and ``podctl describe``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podkit.host.hoststate import orphan_line
from podkit.host.start.diagnose import diagnose
from podkit.text import clean

#: a program that runs (supervisord's RUNNING, systemd's active), or is starting (a moment after a start)
RUNS = ("RUNNING", "ACTIVE")
STARTS = ("STARTING", "ACTIVATING", "RELOADING")

WHAT = {"vllm": "vLLM", "router": "the router", "edge": "the edge (Caddy)", "idle": "the idle watcher"}
WHY = {
    "edge": "clients cannot reach the server",
    "idle": "nothing stops the server (or the pod) when it is idle: it bills until stopped by hand",
    "router": "clients get no answer",
}
#: systemd's inactive is also a follower's edge (it has none): only a failed unit is a problem there
SYSTEMD_DOWN = ("FAILED",)
#: the server given up on (supervisord's FATAL, systemd's failed) or exiting and retried (BACKOFF):
#: the idle watcher's FATAL is a problem, and so is the server's, with the cause from its log
SERVER_DOWN = ("FATAL", "BACKOFF", "FAILED")


def running(programs: dict[str, str], name: str) -> bool:
    """The supervisor says ``name`` runs (not: is starting, backing off, stopped or failed)."""
    return programs.get(name) in RUNS


def server_problem(supervisor: str, name: str, state: str, tail: Sequence[str] | None, said: str | None) -> str:
    """The server program that its supervisor gave up on or retries: one line with the cause from
    its log (the known failure, else its last exception, in vLLM's words) and the fix."""
    found = diagnose([str(line) for line in tail or []])
    cause = found.line() if found else (f"its log says: {said}" if said else "its log names no cause")
    retried = "it exited and is retried" if state == "BACKOFF" else "its supervisor gave up on it"
    return clean(
        f"{WHAT[name]} is {state} under {supervisor} ({retried}): clients get 503; {cause}; "
        "fix that and re-apply (podkit up)"
    )


def program_problems(
    supervisor: str,
    supervisor_pid: int | None,
    programs: dict[str, str],
    said: dict[str, str | None] | None = None,
    leftovers: Sequence[dict[str, Any]] = (),
    server_tail: Sequence[str] | None = None,
    every: bool = False,
) -> list[str]:
    """One line per broken promise, each with its fix: the supervisor is not running (or does
    not answer), a program other than the server is not running, the server given up on or
    crash-looping (FATAL, BACKOFF, failed: with the cause from ``server_tail``, its failed start's
    lines), a process runs outside the supervisor. The server's other states are the host's (up,
    starting, stopped). ``said``: the last log line of each program that is not running. ``every``
    (verify): any program the supervisor does not say RUNNING is a problem."""
    said = said or {}
    problems = []
    if supervisor == "supervisord" and not supervisor_pid:
        problems.append(
            "supervisord does not run: nothing restarts a program that exits, and what a killed supervisord "
            "left runs unsupervised; re-apply (podkit up) to start it"
        )
    elif "error" in programs:
        problems.append(
            f"{supervisor} does not answer on its socket ({clean(programs['error'])}); re-apply (podkit up) to restart it"
        )
    state = programs.get("vllm")
    if state in SERVER_DOWN:
        problems.append(server_problem(supervisor, "vllm", state, server_tail, clean(said.get("vllm") or "")))
    elif every and state is not None and state not in RUNS and "error" not in programs:
        found = diagnose([str(line) for line in server_tail or []])  # a start between two failed ones says why
        problems.append(
            f"vLLM is {clean(state)} under {supervisor}: verify proves a running server"
            + (f"; its last start: {found.line()}" if found else "")
            + "; start it (podkit up)"
        )
    for name in ("router", "edge", "idle"):
        state = programs.get(name)
        if state is None or state in RUNS + (() if every else STARTS):
            continue
        if supervisor == "systemd" and state not in SYSTEMD_DOWN and (not every or state == "INACTIVE"):
            continue  # a follower's edge is inactive: it has none
        line = clean(said.get(name) or "")
        problems.append(
            f"{WHAT[name]} is {clean(state)} under {supervisor}: {WHY[name]}"
            + (f"; its log says: {line}" if line else "")
            + "; fix that and re-apply (podkit up)"
        )
    problems += [clean(orphan_line(found)) for found in leftovers]
    return problems


def status_problems(remote: dict[str, Any]) -> list[str]:
    """:func:`program_problems` from ``podctl status``'s answer."""
    return program_problems(
        remote.get("supervisor") or "supervisord",
        remote.get("supervisor_pid"),
        remote.get("programs") or {},
        remote.get("program_said") or {},
        remote.get("leftovers") or [],
        remote.get("server_tail") if isinstance(remote.get("server_tail"), list) else None,
    )
