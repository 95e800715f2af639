"""What verify reports, and what it checks in the host's own answer (``podctl describe``): where the
API key leaked (process argv, logs, scripts: pids, programs, files and line numbers, never the
key), vLLM engines that outlived their server, and programs the supervisor promises but does not
run. A :class:`Check` per thing checked, a :class:`Report` per host.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from podkit.client.outcome import Outcome, worst
from podkit.client.serverinfo import ServerInfo
from podkit.host.access import refusal_summary
from podkit.host.hoststate import orphan_line
from podkit.host.idlefiles import self_stop_problem
from podkit.host.supervision import program_problems
from podkit.text import clean


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float
    outcome: Outcome = Outcome.OK

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.name.lower()
        return data


@dataclass
class Report:
    endpoint: str
    model: str
    checks: list[Check] = field(default_factory=list)
    started: str = ""  # UTC, ISO 8601: when this host's checks began
    seconds: float = 0.0  # wall time of all of them (the host checks run beside the HTTP ones)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def outcome(self) -> Outcome:
        return worst(check.outcome for check in self.checks if not check.ok)

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "ok": self.ok,
            "outcome": self.outcome.name.lower(),
            "started": self.started,
            "seconds": self.seconds,
            "checks": [check.as_dict() for check in self.checks],
        }


_KEY_FIX = "rotate it (podkit key rotate) and re-apply"


def key_checks(info: ServerInfo, seconds: float) -> list[Check]:
    """The host's key checks from ``podctl describe``'s ``leaks``: argv, server logs, scripts."""
    leaks = info.leaks
    if leaks is None:
        return [
            Check("key checks on the host", False, f"cannot read the host: {info.error}", seconds, Outcome.UNREACHABLE)
        ]
    if leaks.get("error"):
        return [
            Check(
                "key checks on the host",
                False,
                f"{leaks['error']} on the host: apply the deploy",
                seconds,
                Outcome.ERROR,
            )
        ]
    argv = leaks.get("argv") or []
    if argv:
        where = ", ".join(f"pid {hit['pid']} ({hit['program']})" for hit in argv)
        checks = [
            Check(
                "key not in argv",
                False,
                f"the key is on the command line of {where}, where ps shows it to every user: stop it, then {_KEY_FIX}",
                seconds,
                Outcome.SECRET_EXPOSED,
            )
        ]
    else:
        hidden = f", {leaks['unreadable']} hidden from this user" if leaks.get("unreadable") else ""
        checks = [
            Check("key not in argv", True, f"in no process's argv ({leaks.get('processes', 0)} read{hidden})", seconds)
        ]
    for part in ("log", "scripts"):
        hits = leaks.get(part) or []
        if hits:
            where = "; ".join(
                f"{hit['file']} line{'s' if hit['count'] > 1 else ''} {', '.join(map(str, hit['lines']))}"
                + (f" ({hit['count']} lines)" if hit["count"] > len(hit["lines"]) else "")
                for hit in hits
            )
            checks.append(
                Check(
                    f"key not in {part}",
                    False,
                    f"the key is in {where}: {_KEY_FIX}, then remove those lines",
                    seconds,
                    Outcome.SECRET_EXPOSED,
                )
            )
        else:
            searched = [os.path.basename(path) for path in leaks.get(part + "_searched") or []]
            checks.append(
                Check(f"key not in {part}", True, f"not in {', '.join(searched) or 'any file (none yet)'}", seconds)
            )
    return checks


def orphan_check(info: ServerInfo, seconds: float) -> Check:
    """No vLLM engine of this volume outlived its server (it would hold the memory the server needs)."""
    if not info.orphans:
        return Check("no orphaned engine", True, "no vLLM engine outlived its server", seconds)
    return Check("no orphaned engine", False, "; ".join(map(orphan_line, info.orphans)), seconds, Outcome.ERROR)


def program_check(info: ServerInfo, seconds: float) -> Check:
    """The supervisor runs, and runs every program it promises (vLLM, the idle watcher's deadline, the
    edge): any program it does not say RUNNING is a failure, with its last log line (vLLM's: the cause
    from its failed start) and the fix."""
    if info.programs is None:
        return Check("programs supervised", True, "not read (an older host answer)", seconds)
    problems = program_problems(
        info.supervisor or "supervisord",
        info.supervisor_pid,
        info.programs,
        info.program_said or {},
        server_tail=info.server_tail,
        every=True,
    )
    if problems:
        return Check("programs supervised", False, "; ".join(problems), seconds, Outcome.ERROR)
    running = ", ".join(f"{name} {state}" for name, state in sorted(info.programs.items()))
    return Check("programs supervised", True, f"{info.supervisor}: {running}", seconds)


def self_stop_check(info: ServerInfo, seconds: float) -> Check | None:
    """A RunPod pod told to stop itself when idle has proven it can (its idle watcher read the pod with
    the pod's own key): else the stop podkit promised would not happen. None where nothing is promised."""
    idle = info.idle or {}
    idle_seconds = idle.get("idle_seconds")
    if idle.get("action") != "runpod" or not isinstance(idle_seconds, (int, float)) or idle_seconds <= 0:
        return None
    pod_id = str(idle.get("pod_id") or "?")
    proof = idle.get("self_stop") if isinstance(idle.get("self_stop"), dict) else None
    problem = self_stop_problem(pod_id, idle_seconds / 60, proof)
    if problem or proof is None:
        return Check("the pod can stop itself", False, clean(problem), seconds, Outcome.ERROR)
    return Check(
        "the pod can stop itself", True, f"RunPod answered pod {pod_id}'s own key ({proof.get('via')})", seconds
    )


def refusal_check(info: ServerInfo, seconds: float) -> Check | None:
    """What the edge refused lately, and why (its access log): said, never failed (a client's wrong
    key is the client's); None when the host keeps no access log yet."""
    said = refusal_summary(info.refused)
    return Check("edge refusals", True, said, seconds) if said else None
