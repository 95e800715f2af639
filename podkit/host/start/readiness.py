"""Waiting for a server to answer: what to ask the host, and how to read its answer.

The deploy polls through podctl's ``wait`` on the host (so a port that is not
exposed still works), a window of a few seconds per round trip, and prints a
progress line after each: elapsed time, what /health says, the log's last line.
It stops early when the supervisor is gone, a program is left stopped (FATAL),
or the server keeps crashing (it has exited ``CRASH_LIMIT`` times and none runs now, or once for a cause
every start of the same launch meets again: ``podkit.host.start.diagnose.LASTING``), and then names the cause found
in the failed start's log lines (``podkit.host.start.diagnose``). The live endpoint
always comes first: a server that answers when readiness looks is up, whatever
an exit count left from earlier starts or an old line of the log say.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from podkit.host.podctl import read_answer
from podkit.host.probe import server_config
from podkit.host.start.diagnose import diagnose, lasting_patterns
from podkit.host.start.startup import STARTUP_NEEDLES, compare, parse_startup, row_text
from podkit.settings import Settings

CRASH_LIMIT = 2
#: the environment variable podkit up sets for the deploy: when it began (seconds since the epoch)
UP_STARTED = "PODKIT_UP_STARTED"


def wait_config(
    settings: Settings,
    window: float,
    profile: dict | None = None,
    up_started_at=None,
    crashes_before: int = 0,
    accept: dict | None = None,
) -> dict:
    """What ``podctl wait`` reads. ``profile``: the launch script's profile key and the build's
    patterns for what a start measured (:func:`podkit.host.start.profile.wait_profile`), recorded once the
    server is ready; ``up_started_at``: when ``podkit up`` began (the controller's clock), for the
    start's total. ``crashes_before``: the exits counted before this wait (a server the deploy did
    not restart keeps its count): only exits since count towards giving up on a server that is starting.
    ``accept``: a launch no check read, added to the record of accepted launches once it serves
    (:func:`podkit.host.start.launchcheck.accept_config`)."""
    return {
        "starts_file": settings.paths.starts_record,
        "profile": profile,
        "up_started_at": up_started_at,
        "sent_at": time.time(),
        **server_config(settings),
        "crashes_before": crashes_before,
        # a stop on purpose (podkit down, the idle watcher) during the wait: the marker says so
        "stopped_file": settings.paths.stopped_marker,
        "served_model_name": settings.served_model_name,
        "log_file": settings.paths.router_log if settings.role == "router" else settings.paths.log_file,
        "window": window,
        "crash_limit": CRASH_LIMIT,
        # one exit for one of these is enough: the next start of the same launch fails the same way
        "lasting_failures": lasting_patterns(),
        "tail_lines": 200,  # vLLM prints the root cause far above its last lines
        "plan_file": settings.paths.plan_file,
        "startup_needles": list(STARTUP_NEEDLES),
        **({"accept": accept} if accept else {}),
    }


@dataclass(frozen=True)
class WaitResult:
    ready: bool
    health: int | None
    models_status: int | None
    models: list[str]
    runner_alive: bool
    crashes: int
    last_log_line: str | None
    log_tail: list[str]
    server_alive: bool = False  # a server process runs now (it may still be starting)
    edge_health: int | None = None  # what the edge answers on loopback for /health
    programs: dict | None = None  # {program: state} as the supervisor says
    ca_root: str | None = None  # the edge CA's root certificate, once Caddy made it
    startup: list[str] = field(default_factory=list)  # a ready server's start lines (STARTUP_NEEDLES)
    plan: dict | None = None  # what the deploy predicted for it (bin/plan.json)
    recorded: dict | None = None  # what podctl kept of a ready start: {"start": True, "profile": bytes or None}
    crashes_before: int = 0  # exits counted before this wait: not this start's
    stopped: dict | None = None  # the server was stopped on purpose during the wait: the marker (by, why)
    lasting: str | None = None  # a start of this wait exited for a cause the next meets again: its log line

    @classmethod
    def parse(cls, output: str, errors: str = "", status: int | None = None) -> WaitResult:
        """podctl wait's answer; raises :class:`~podkit.host.podctl.PodctlError` when it gave none."""
        data = read_answer("wait", output, errors, status)
        runner = data.get("runner") or {}
        return cls(
            ready=bool(data.get("ready")),
            health=data.get("health"),
            models_status=data.get("models_status"),
            models=data.get("models") or [],
            runner_alive=bool(runner.get("pid")),
            crashes=int(runner.get("crashes") or 0),
            last_log_line=data.get("last_log_line"),
            log_tail=data.get("log_tail") or [],
            server_alive=bool(runner.get("vllm_pid")),
            edge_health=(data.get("edge") or {}).get("health"),
            programs=runner.get("programs") or {},
            ca_root=data.get("ca_root"),
            startup=data.get("startup") or [],
            plan=data.get("plan"),
            recorded=data.get("recorded"),
            crashes_before=int(data.get("crashes_before") or 0),
            stopped=data.get("stopped") if isinstance(data.get("stopped"), dict) else None,
            lasting=data.get("lasting") if isinstance(data.get("lasting"), str) else None,
        )

    def start_checked(self) -> list[str]:
        """What vLLM logged at this start beside the plan: one line per figure, a gap above 5% flagged."""
        logged = parse_startup(self.startup)
        rows = compare((self.plan or {}).get("predicted") or {}, logged)
        return [f"this start, {row_text(row)}" for row in rows]

    @property
    def fatal(self) -> list[str]:
        """Programs the supervisor gave up on (supervisord's FATAL, systemd's failed)."""
        return sorted(name for name, state in (self.programs or {}).items() if state in ("FATAL", "FAILED"))

    @property
    def crashed(self) -> bool:
        """The server has exited ``CRASH_LIMIT`` times since the wait began and none runs now (exits
        counted before are not this start's: one that is starting may yet answer), or it exited once
        for a cause the next start meets again (``lasting``), whether or not the supervisor began it."""
        exits = self.crashes - self.crashes_before
        return (exits >= CRASH_LIMIT and not self.server_alive) or (exits >= 1 and self.lasting is not None)

    @property
    def hopeless(self) -> bool:
        """Waiting longer will not help: the supervisor is gone, the server keeps crashing, a
        program is left stopped, or the server was stopped on purpose (podkit down, idle)."""
        return not self.ready and (not self.runner_alive or self.crashed or bool(self.fatal) or bool(self.stopped))

    def progress(self, elapsed: float, timeout: float) -> str:
        health = self.health if self.health is not None else "no answer"
        line = f"waiting for vLLM: {elapsed:.0f}s of {timeout:.0f}s, /health {health}"
        if self.health == 200 and self.edge_health != 200:
            line += f", edge /health {self.edge_health if self.edge_health is not None else 'no answer'}"
        if self.crashes:
            line += f", {self.crashes} exit(s)"
        if self.last_log_line:
            line += f"; log: {self.last_log_line[-120:]}"
        return line

    def failure(self, settings: Settings, elapsed: float) -> str:
        listed = settings.served_model_name in self.models
        if self.stopped:
            return (
                f"vLLM was stopped on purpose while the deploy waited for it ({self.stopped.get('by') or '?'}: "
                f"{self.stopped.get('why') or 'no reason given'}); re-apply (podkit up) to start it"
            )
        if "edge" in self.fatal or (
            self.health == 200 and self.models_status == 200 and listed and self.edge_health != 200
        ):
            return (
                f"vLLM answers on loopback but the edge (Caddy) on port {settings.edge_port} does not "
                f"(/health: {self.edge_health}); see {settings.paths.edge_log} (another program may hold the port)"
            )
        if self.health == 200 and self.models_status == 401:
            return (
                "vLLM answers but rejects the key in "
                f"{settings.paths.api_key}; re-apply so the server restarts with the current key"
            )
        if self.health == 200 and self.models_status == 200:
            return (
                f"vLLM answers but does not list {settings.served_model_name!r} (it lists {self.models}); "
                "another server may hold the port"
            )
        if not self.runner_alive:
            what = f"{settings.supervisor} is not running"
        elif self.crashed:
            exits = self.crashes - self.crashes_before
            what = "vLLM exited once" if exits == 1 else f"vLLM exited {exits} times"
            if self.lasting is not None and exits < CRASH_LIMIT:
                what += " (another start would fail the same way)"
        else:
            what = f"vLLM did not answer within {settings.ready_timeout:.0f}s (podkit_ready_timeout)"
        found = diagnose(self.log_tail)
        cause = found.line() if found else "no known cause in the log; its tail follows"
        return f"{what} after {elapsed:.0f}s: {cause}"
