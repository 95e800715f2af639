"""What ``podkit status`` says of a host: up or stopped, since when, what it serves, requests in
flight, the idle time and the idle-stop deadline, and what it has cost.

Two sources, each optional: the RunPod API's pod (its status, ``cost``, the container's uptime,
``startedAt``) and the host itself (``podctl status``: programs, vLLM's start, the served
model and context, the idle watcher's last reading, why the server was stopped). Times from the
host are read on the host's clock and turned into ages there, so a controller whose clock is off
still shows the right minutes. Pure: tests feed it recorded answers.

Its twin, :mod:`podkit.client.serverinfo`, reads ``podctl describe`` for ``verify``, ``bench`` and
``eval``.
"""

from __future__ import annotations

import math
import posixpath
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from podkit.client.wakes import wake_lines, wake_summary
from podkit.host.access import refusal_summary
from podkit.host.idlefiles import self_stop_problem
from podkit.host.podctl import PodctlError, last_line, read_answer
from podkit.host.probe import server_config
from podkit.host.start.phases import compare_lines, start_summary
from podkit.host.start.startup import STARTUP_NEEDLES, calibration_record, compare, parse_startup, row_text
from podkit.host.supervision import running, status_problems
from podkit.settings import Settings
from podkit.text import clean


def status_config(settings: Settings, name: str) -> dict[str, Any]:
    """What ``podctl status`` and ``podctl down`` read."""
    paths = settings.paths
    return {
        **server_config(settings),
        "name": name,
        "idle_state": paths.idle_state,
        "stopped_file": paths.stopped_marker,
        "wake_file": paths.wake_record,
        "access_log": paths.access_log,
        "plan_file": paths.plan_file,
        # podctl down stops through the idle watcher's program (idle.py --stop)
        "python": f"{paths.venv}/bin/python",
        "idle_script": paths.idle_script,
        "idle_config": paths.idle_config,
        "log_file": paths.log_file,
        "startup_needles": list(STARTUP_NEEDLES),
        "starts_file": paths.starts_record,
        "startup_plans": posixpath.join(paths.cache_env()["VLLM_CACHE_ROOT"], "startup_plan"),
        # podctl down waits for a deploy of the host to end, and holds its lock while it stops
        "lock": {"path": paths.deploy_lock, "volume": settings.volume},
        "lock_wait": 120,
    }


@dataclass
class HostStatus:
    """One host, as ``status --json`` prints it (times: seconds since the epoch; ages: minutes)."""

    host: str
    state: str  # up, starting, stopped, crashed, unreachable; for a pod also RunPod's (exited, ...)
    since: float | None = None  # when it came up, or was stopped
    since_text: str | None = None  # what RunPod says of a pod that is not up (when it last started)
    model: str | None = None
    context: int | None = None
    in_flight: int | None = None
    minutes_since_request: float | None = None  # None: no request seen since the watcher started
    idle_minutes: float | None = None  # what the idle clock counts (since the last request or the start)
    idle_stop_minutes: int | float = 0
    idle_stop_at: float | None = None
    idle_stop_in_minutes: float | None = None
    usd_per_hour: float | None = None
    spend_usd: float | None = None
    spend_basis: str | None = None
    stopped: dict[str, Any] | None = None  # the marker: by (idle, podkit down), at, why, how (stop, sleep)
    #: the last wake on request (podkit/remote/idle/wake.py): {"at", "seconds", "how", "ok", "said", "from", ...}
    wake: dict[str, Any] | None = None
    pod_id: str | None = None
    #: the idle watcher's proof that the pod can stop itself (``podkit/remote/idle/stops.py``)
    self_stop: dict[str, Any] | None = None
    #: what RunPod billed for the pod over the last 30 days (``GET /v2/billing/pods``), where read
    billed_usd: float | None = None
    read_host: bool = False  # the host itself was read (podctl status), not only the RunPod API
    #: the last start: {"at", "logged": what vLLM logged, "compare": predicted vs logged, "record": a reference case}
    last_start: dict[str, Any] | None = None
    #: the last two starts that passed readiness, older first: {"at", "phases", "profile", "kv_bytes"}
    starts: list[dict[str, Any]] = field(default_factory=list)
    #: what the edge refused lately, one line (podkit.host.access), None when it keeps no log yet
    refused: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    #: broken promises, each with its fix: a program not running, the supervisor gone, a stray process
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_status(output: str) -> dict[str, Any]:
    """``podctl status``'s JSON line (its last line), or {"error": ...}."""
    try:
        data = read_answer("status", output, parse_constant=_no_number, parse_float=_reading, parse_int=_reading)
    except PodctlError as exc:
        return {"error": str(exc)}
    if data.get("podctl") != 1:
        return {"error": data.get("error") or f"podctl status answered something else: {last_line(output)}"}
    return data


def _no_number(literal: str) -> None:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's JSON reader takes them, but no sum with them means anything."""
    return None


def _reading(literal: str) -> int | float | None:
    """A number the host wrote, or None where it is no reading (as :func:`_finite`)."""
    return _finite(float(literal) if any(c in literal for c in ".eE") else int(literal))


def _finite(value: Any) -> int | float | None:
    """A number the host or RunPod gave, or None where it is no reading: not a number (a bool
    included), not finite, or an integer past what a float holds exactly (every time, count and
    price here is far below)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value if abs(value) < 2**53 else None


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(max(seconds, 0.0) / 60.0, 1)


def host_status(
    name: str,
    settings: Settings | None,
    remote: dict[str, Any] | None,
    pod: dict[str, Any] | None = None,
    now: float | None = None,
) -> HostStatus:
    """A host's status from what the host said (``remote``: parsed ``podctl status``, or
    {"error"}; None when it was not asked, e.g. a stopped pod) and its RunPod pod (None on bare
    metal). ``settings``: the host's, None for a pod the inventory leaves out (stopped).
    ``now``: the controller's clock, for the pod's figures."""
    now = time.time() if now is None else now
    status = HostStatus(name, "unknown")
    if settings is not None:
        status.model, status.idle_stop_minutes = settings.served_model_name, settings.idle_stop_minutes
    if pod is not None:
        _from_pod(status, pod, now)
    elif settings is not None:
        status.usd_per_hour = settings.usd_per_hour
    if remote is None:
        return status
    if remote.get("error"):
        status.state, status.error = ("unreachable" if pod is None else status.state), remote["error"]
        return status
    _from_host(status, remote, bare_metal=pod is None, now=now)
    return status


def _from_pod(status: HostStatus, pod: dict[str, Any], now: float) -> None:
    """The pod's half, from RunPod's answer in plain values (``podkit.runpod.pods.status_of``):
    id, state (starting, running, stopped, ...), RunPod's own status, cost an hour, uptime,
    startedAt, and whether it runs without its GPU."""
    status.pod_id = pod.get("id")
    state = str(pod.get("state") or "unknown")
    status.usd_per_hour, uptime = _finite(pod.get("usd_per_hour")), _finite(pod.get("uptime_seconds"))
    if state == "running":
        status.state = "up" if pod.get("has_runtime") else "starting"
        if isinstance(uptime, (int, float)):
            status.since = now - uptime
            if isinstance(status.usd_per_hour, (int, float)):
                status.spend_usd = round(status.usd_per_hour * uptime / 3600.0, 4)
                status.spend_basis = "since it last started (RunPod's cost an hour x the container's uptime)"
        if pod.get("lost_gpu"):
            status.notes.append("it runs without its GPU (taken while it was stopped): move it (podkit up --move)")
        return
    status.state = state if state != "unknown" else str(pod.get("runpod_status") or "unknown").lower()
    if state != "stopped":  # starting (no address yet), in error, or a status podkit does not know
        status.since_text = f"RunPod says {pod.get('runpod_status')}"
        return
    status.since_text = f"last started {pod['started_at']}" if pod.get("started_at") else None
    status.spend_usd, status.spend_basis = 0.0, "stopped: RunPod bills only its volume"


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None for anything else (a string, a bool, NaN, 1e999, 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


#: The numbers podctl status carries, where they sit, and what each is (for the note on a bad one).
HOST_NUMBERS = (
    (None, "now", "the host's clock"),
    (None, "boot_at", "the host's boot time"),
    (None, "vllm_started_at", "vLLM's start time"),
    (None, "vllm_pid", "vLLM's pid"),
    ("served", "max_model_len", "the served context"),
    ("served", "health", "the health answer"),
    ("stopped", "at", "the stopped marker's time"),
    ("idle", "idle_stop_seconds", "the idle watcher's idle time"),
    ("idle", "usd_per_hour", "the idle watcher's price"),
    ("idle", "in_flight", "the idle watcher's requests in flight"),
    ("idle", "last_request_at", "the idle watcher's last request"),
    ("idle", "idle_since", "the idle watcher's idle start"),
    ("idle", "deadline", "the idle watcher's deadline"),
)
#: Where each part of the host's answer comes from (what to remove or rewrite when it is forged).
HOST_FILES = {
    "stopped": "the stopped marker (podkit up starts the server and removes it)",
    "idle": "the idle watcher's state file (re-apply the deploy to restart the watcher)",
    "wake": "the last wake's record (the next wake rewrites it)",
    "plan": "the deploy's plan file (re-apply the deploy to rewrite it)",
}


def checked_remote(remote: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """podctl status's answer with every part :func:`host_status` reads of the type it reads: a part
    or number that is not (a forged or hand-edited host file) is left out, with one note naming it."""
    out = dict(remote)
    notes: list[str] = []
    for part in ("served", "idle", "stopped", "plan", "programs", "wake"):
        value = out.get(part)
        if value is not None and not isinstance(value, dict):
            notes.append(f"ignored {HOST_FILES.get(part, part)}: it is not a JSON object ({clean(repr(value)[:60])})")
            value = None
        out[part] = dict(value) if value else ({} if part not in ("stopped", "wake") else None)
    out["programs"] = {str(k): str(v) for k, v in out["programs"].items()}
    for within, key, what in HOST_NUMBERS:
        holder = out if within is None else out.get(within)
        if not holder or holder.get(key) is None:
            continue
        number = _number(holder[key])
        if number is None:
            where = f" ({HOST_FILES[within]})" if within in HOST_FILES else ""
            notes.append(f"ignored {what}: {clean(repr(holder[key])[:60])} is not a finite number{where}")
        holder[key] = number
    models = out["served"].get("models")
    if models is not None and not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
        notes.append(f"ignored the served models: {clean(repr(models)[:60])} is not a list of names")
        out["served"]["models"] = None
    startup = out.get("startup")
    if not (isinstance(startup, list) and all(isinstance(line, str) for line in startup)):
        out["startup"] = []
    return out, notes


def _from_host(status: HostStatus, remote: dict[str, Any], bare_metal: bool, now: float) -> None:
    remote, notes = checked_remote(remote)
    status.notes += notes
    host_now = remote.get("now") or now

    def here(host_time: float | None) -> float | None:
        """A time the host read on its clock, on the controller's (a host clock that is off is no matter)."""
        return None if host_time is None else now - (host_now - host_time)

    served = remote.get("served") or {}
    idle = remote.get("idle") or {}
    status.read_host = True
    status.stopped = remote.get("stopped")
    vllm = (remote.get("programs") or {}).get("vllm")
    status.wake = wake_summary(remote.get("wake"), here)
    if served.get("health") == 200 and (status.stopped or {}).get("how") == "sleep":
        status.state = "asleep"
    elif served.get("health") == 200:
        status.state = "up"
    elif status.stopped:
        status.state = "stopped"
    elif vllm in ("STARTING", "BACKOFF", "ACTIVATING") or (remote.get("vllm_pid") and vllm in ("RUNNING", "ACTIVE")):
        status.state = "starting"
    elif vllm in ("FATAL", "FAILED", "EXITED"):
        status.state = "crashed"
    else:
        status.state = "stopped"
    if status.state in ("up", "starting") and (bare_metal or not status.since):
        status.since = here(remote.get("vllm_started_at"))
    elif status.stopped and bare_metal:
        status.since = here(status.stopped.get("at"))
    if served.get("models"):
        status.model = served["models"][0]
    status.context = None if served.get("max_model_len") is None else int(served["max_model_len"])
    if isinstance(idle.get("idle_stop_seconds"), (int, float)):  # what the host's watcher was given (--data too)
        minutes = round(float(idle["idle_stop_seconds"]) / 60, 2)
        status.idle_stop_minutes = int(minutes) if minutes == int(minutes) else minutes
    if bare_metal and isinstance(idle.get("usd_per_hour"), (int, float)):
        status.usd_per_hour = float(idle["usd_per_hour"])
    status.problems = status_problems(remote)
    status.refused = refusal_summary(remote.get("refused"))
    # the watcher's last reading is a promise only while the supervisor says the watcher runs
    if idle and status.state == "up" and running(remote.get("programs") or {}, "idle"):
        status.in_flight = None if idle.get("in_flight") is None else int(idle["in_flight"])
        last = idle.get("last_request_at")
        status.minutes_since_request = _minutes(host_now - last) if last else None
        since = idle.get("idle_since")
        status.idle_minutes = _minutes(host_now - since) if since else None
        deadline = idle.get("deadline")
        if deadline:
            status.idle_stop_in_minutes = _minutes(deadline - host_now)
            status.idle_stop_at = here(deadline)
    if idle and status.pod_id and status.idle_stop_minutes:  # never a stop promised that cannot happen
        proof = idle.get("self_stop") if isinstance(idle.get("self_stop"), dict) else None
        status.self_stop = proof
        problem = self_stop_problem(status.pod_id, status.idle_stop_minutes, proof)
        if problem:
            status.problems.append(clean(problem))
    try:  # the plan file and the log are the host's: a forged one is a note, not a traceback
        status.last_start = last_start(status.host, remote.get("plan") or {}, remote.get("startup") or [])
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError, ZeroDivisionError) as exc:
        status.notes.append(f"ignored the last start: {HOST_FILES['plan']} or the log is malformed ({exc})")
    try:  # run/starts.jsonl is the host's too
        status.starts = [start_summary(entry, remote.get("startup_plans")) for entry in remote.get("starts") or []]
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        status.notes.append(f"ignored the kept starts: run/starts.jsonl is malformed ({exc})")
    if bare_metal:
        boot = remote.get("boot_at")
        if status.usd_per_hour is not None and boot:
            status.spend_usd = round(status.usd_per_hour * (host_now - boot) / 3600.0, 4)
            status.spend_basis = "since the host booted, at podkit_usd_per_hour"
        elif status.usd_per_hour is None:
            status.spend_basis = "unknown: set podkit_usd_per_hour for this host"


def last_start(host: str, plan: dict[str, Any], lines: list[str]) -> dict[str, Any] | None:
    """What vLLM logged at its last start beside what the deploy predicted (None: no start logged)."""
    if not lines:
        return None
    marker = lines[0] if "starting vLLM" in lines[0] else ""
    when = marker.split(" ", 1)[0] if marker else "unknown"
    logged = parse_startup(lines)
    if not logged:
        return {"at": when, "logged": {}, "compare": [], "record": None}
    return {
        "at": when,
        "logged": logged,
        "compare": compare(plan.get("predicted") or {}, logged),
        "record": calibration_record(host, plan, logged, when, lines),
    }


PHASES = (
    ("load", "load"),
    ("compile", "compile"),
    ("profile_kv_warmup", "profile, KV cache, warm-up"),
    ("graph_capture", "graph capture"),
)


def _start_lines(start: dict[str, Any]) -> list[str]:
    logged = start.get("logged") or {}
    phases = logged.get("phases_seconds") or {}
    lines = []
    timed = ", ".join(f"{label} {phases[key]:g} s" for key, label in PHASES if key in phases)
    total = f"ready in {phases['total']:g} s" if "total" in phases else "started"
    lines.append(f"  last start ({start.get('at')}): {total}" + (f" ({timed})" if timed else ""))
    lines += [f"    {row_text(row)}" for row in start.get("compare") or []]
    if not start.get("compare") and logged:
        lines.append("    nothing predicted to compare (the plan has no figure for this host)")
    return lines


def _clock(epoch: float | None) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch)) if epoch else "?"
    except (OverflowError, OSError, ValueError):  # a time far outside what the clock can show
        return "?"


def _cannot_stop(status: HostStatus) -> bool:
    return any(problem.startswith(f"pod {status.pod_id} cannot stop itself") for problem in status.problems)


def describe(status: HostStatus, inventory: str) -> list[str]:
    """The human lines of one host: a headline, then what is known of it."""
    head = f"{status.host}: {status.state}"
    if status.since:
        head += f" since {_clock(status.since)}"
    elif status.since_text:
        head += f" ({status.since_text})"
    lines = [head]
    if status.error:
        lines.append(f"  {status.error}")
    lines += [f"  problem: {problem}" for problem in status.problems]
    if status.state == "up" and not status.read_host and not status.error:
        lines.append("  not read over SSH: the inventory leaves it out (pyinfra says why when it loads it)")
    if status.state == "up" and status.read_host:
        context = f", context {status.context} tokens" if status.context else ""
        lines.append(f"  serves {status.model}{context}; {status.in_flight or 0} request(s) in flight")
        if status.minutes_since_request is not None:
            lines.append(f"  last request {status.minutes_since_request:g} min ago")
        elif status.idle_minutes is not None:
            lines.append(f"  no request since the server came up {status.idle_minutes:g} min ago")
        if status.idle_stop_minutes and status.idle_stop_in_minutes is not None and not _cannot_stop(status):
            what = "the pod" if status.pod_id else "the server"
            proven = f" (proven: RunPod answers its own key, {status.self_stop['via']})" if status.self_stop else ""
            lines.append(
                f"  idle stop: {what} stops at {_clock(status.idle_stop_at)} "
                f"(in {status.idle_stop_in_minutes:g} min) unless a request comes{proven}"
            )
        elif not status.idle_stop_minutes:
            lines.append("  idle stop: off (podkit_idle_stop_minutes = 0)")
    if status.starts and status.read_host:
        lines += compare_lines(status.starts)
    if status.last_start and status.read_host:
        lines += _start_lines(status.last_start)
    if status.stopped:
        lines.append(
            f"  stopped on purpose: {status.stopped.get('why') or status.stopped.get('by') or 'no reason given'}"
        )
    lines += wake_lines(status)
    if status.refused and status.read_host:
        lines.append(f"  edge: {status.refused}")
    if status.state in ("stopped", "crashed") or status.stopped:
        lines.append(f"  start it: podkit up {inventory} --host {status.host}")
    if status.spend_usd is not None:
        rate = f" at ${status.usd_per_hour:g}/h" if status.usd_per_hour is not None else ""
        lines.append(f"  spend: ${status.spend_usd:.2f}{rate} ({status.spend_basis})")
    elif status.spend_basis:
        lines.append(f"  spend: {status.spend_basis}")
    if status.billed_usd is not None:
        lines.append(f"  billed by RunPod over the last 30 days: ${status.billed_usd:.2f}")
    lines += [f"  {note}" for note in status.notes]
    return [clean(line) for line in lines]  # host text is data: no escape sequence reaches the terminal
