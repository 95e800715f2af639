"""Every start measured (issue #29, part 3): its phases, from the log and the times podkit keeps.

``podctl wait`` keeps each start that passed readiness in ``run/starts.jsonl``: the launch
script's marker (``2026-11-23T10:00:00Z podkit: starting vLLM (local time +0000)``), the start's
lines (:data:`podkit.host.start.startup.STARTUP_NEEDLES`), when the server and the edge answered (the
host's clock), and with ``podkit up`` the total from the moment it began. This module turns one
such record into phases, in the order a start goes through them:

- ``process``: the supervisor's start to vLLM's first line (Python and vLLM's imports, arguments);
- ``load``, ``compile``, ``profile_kv_warmup`` (the memory profile, or its reuse), ``graph_capture``:
  what vLLM says each took;
- ``api``: vLLM's first line to "Starting vLLM server" (all of the above and the rest of its start);
- ``ready``: the supervisor's start to the moment vLLM listed the model with the key and the edge
  answered; ``up``: from ``podkit up`` (resuming a pod included) to that moment.

vLLM stamps its lines ``MM-DD HH:MM:SS`` in the host's local time; the marker gives the UTC offset
to line them up. Pure: tests feed it records.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from podkit.host.start.profile import outcome, outcome_text
from podkit.host.start.startup import parse_startup

_MARKER = re.compile(r"^(\d{4})-(\d\d-\d\dT\d\d:\d\d:\d\d)Z podkit: starting vLLM(?: \(local time ([+-]\d{4})\))?")
_STAMP = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")

#: the phases, in order, with the words status prints
PHASES = (
    ("process", "to vLLM's first line"),
    ("load", "weights"),
    ("compile", "compile"),
    ("profile_kv_warmup", "profile or reuse, KV cache, warm-up"),
    ("graph_capture", "graph capture"),
    ("api", "vLLM's start to its API"),
    ("ready", "to ready behind the edge"),
    ("up", "from podkit up"),
)


def marker_time(marker: str | None) -> tuple[datetime, timedelta] | None:
    """The start's UTC time and the host's UTC offset (none written: UTC), from the launch marker."""
    match = _MARKER.match(marker or "")
    if not match:
        return None
    when = datetime.strptime(f"{match.group(1)}-{match.group(2)}", "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    offset = match.group(3) or "+0000"
    sign = -1 if offset[0] == "-" else 1
    return when, sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[3:]))


def first_stamp(lines: list[str], year: int, offset: timedelta) -> datetime | None:
    """vLLM's first stamped line, in UTC."""
    for line in lines:
        match = _STAMP.search(line)
        if match:
            local = datetime.strptime(f"{year}-{match.group(1)}", "%Y-%m-%d %H:%M:%S")
            return (local - offset).replace(tzinfo=UTC)
    return None


def start_summary(entry: dict[str, Any], plans: dict[str, float] | None = None) -> dict[str, Any]:
    """One kept start as ``{"at", "phases": {name: seconds}, "profile": words, "kv_bytes"}``."""
    lines = entry.get("lines") or []
    logged = parse_startup(lines)
    phases: dict[str, float] = {}
    started = marker_time(entry.get("marker"))
    if started:
        when, offset = started
        first = first_stamp(lines, when.year, offset)
        if first is not None:
            # a year's turn between the marker and vLLM's first line: the stamp has no year
            gap = (first - when).total_seconds() % (366 * 86400)
            phases["process"] = gap if gap < 86400 else 0.0
        if isinstance(entry.get("ready_at"), (int, float)):
            phases["ready"] = round(entry["ready_at"] - when.timestamp(), 1)
    for key, value in (logged.get("phases_seconds") or {}).items():
        phases["api" if key == "total" else key] = value
    if isinstance(entry.get("up_seconds"), (int, float)):
        phases["up"] = entry["up_seconds"]
    found = outcome(lines, plans)
    return {
        "at": (entry.get("marker") or "").split(" ", 1)[0] or None,
        "phases": {key: phases[key] for key, _ in PHASES if key in phases},
        "profile": outcome_text(found, clock=_iso),
        "kv_bytes": (found or {}).get("bytes"),
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compare_lines(starts: list[dict[str, Any]]) -> list[str]:
    """The last start against the one before, a phase a line: ``weights  0.02 s  (before 0.03 s)``."""
    if not starts:
        return []
    last, before = starts[-1], (starts[-2] if len(starts) > 1 else None)
    lines = [
        f"  last start ({last['at']}): {last['profile'] or 'KV cache: not said'}"
        + (f"; the one before ({before['at']}): {before['profile'] or 'not said'}" if before else "")
    ]
    for key, words in PHASES:
        if key not in last["phases"] and not (before and key in before["phases"]):
            continue
        now = last["phases"].get(key)
        text = f"{now:g} s" if now is not None else "-"
        if before:
            then = before["phases"].get(key)
            text += f"  (before: {then:g} s)" if then is not None else "  (before: -)"
        lines.append(f"    {words}: {text}")
    return lines
