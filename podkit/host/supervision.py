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


def running(programs: dict[str, str], name: str) -> bool:
    """The supervisor says ``name`` runs (not: is starting, backing off, stopped or failed)."""
    return programs.get(name) in RUNS


def program_problems(
    supervisor: str,
    supervisor_pid: int | None,
    programs: dict[str, str],
    said: dict[str, str | None] | None = None,
    leftovers: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """One line per broken promise, each with its fix: the supervisor is not running (or does
    not answer), a program other than the server is not running (the server's own state is the
    host's: up, stopped, crashed), a process runs outside the supervisor. ``said``: the last
    log line of each program that is not running."""
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
    for name in ("router", "edge", "idle"):
        state = programs.get(name)
        if state is None or state in RUNS + STARTS:
            continue
        if supervisor == "systemd" and state not in SYSTEMD_DOWN:
            continue
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
    )
