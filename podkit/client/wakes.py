"""What ``podkit status`` says of sleep and wake on request (bare metal): the last wake the idle
watcher's hook made (``run/wake.json``, written by ``podkit/remote/idle/wake.py``): from which stop or
sleep, when, how long until a real completion proved it, and how many requests the edge held
meanwhile. Pure: tests feed it recorded answers; the record is the host's, so anything of the
wrong type in it is left out."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from podkit.text import clean


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _text(value: Any) -> str | None:
    return clean(value)[:200] if isinstance(value, str) else None


def wake_summary(record: dict[str, Any] | None, here: Callable[[float | None], float | None]) -> dict[str, Any] | None:
    """The last wake, times on the controller's clock (``here`` turns a host time into one):
    {"at", "seconds", "how" (start, wake_up), "ok", "said", "requests_held", "answer_changed",
    "from": {"by", "how", "why", "at"}}; None when no wake was recorded."""
    if not record:
        return None
    found = record.get("from")
    stop: dict[str, Any] = found if isinstance(found, dict) else {}
    held = _number(record.get("requests_held"))
    return {
        "at": here(_number(record.get("at"))),
        "seconds": _number(record.get("seconds")),
        "how": _text(record.get("how")),
        "ok": record.get("ok") is True,
        "said": _text(record.get("said")),
        "requests_held": None if held is None else int(held),
        "answer_changed": record.get("answer_changed") is True,
        "from": {
            "by": _text(stop.get("by")),
            "how": _text(stop.get("how")) or "stop",
            "why": _text(stop.get("why")),
            "at": here(_number(stop.get("at"))),
        },
    }


def wakes_on_request(status: Any) -> bool:
    """A bare-metal server stopped or asleep for idleness: the next request with the key wakes it."""
    stopped = status.stopped or {}
    return stopped.get("by") == "idle" and stopped.get("action", "server") == "server" and not status.pod_id


def _clock(epoch: float | None) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "?"
    except (OverflowError, OSError, ValueError):
        return "?"


def wake_lines(status: Any) -> list[str]:
    """The human lines: how a resting server comes back, and the last wake."""
    lines = []
    if wakes_on_request(status):
        what = "asleep" if (status.stopped or {}).get("how") == "sleep" else "stopped"
        lines.append(f"  {what} for idleness: the next request with the key wakes it (the edge holds it meanwhile)")
    wake = status.wake
    if not wake:
        return lines
    stop = wake["from"]
    came = "woke it from sleep" if wake["how"] == "wake_up" else "started it"
    after = f"after {'a sleep' if stop['how'] == 'sleep' else 'a stop'} ({stop['by'] or '?'}) at {_clock(stop['at'])}"
    if wake["ok"]:
        held = wake["requests_held"]
        lines.append(
            f"  last wake: {_clock(wake['at'])}, {after}: a request {came}, proven by {wake['said']} "
            f"{wake['seconds'] if wake['seconds'] is not None else '?'} s later"
            + (f"; {held} request(s) held meanwhile" if held else "")
        )
        if wake["answer_changed"]:
            lines.append("  it answered otherwise after its sleep than before it, so it was restarted")
    else:
        lines.append(f"  last wake FAILED: {_clock(wake['at'])}, {after}: {wake['said']}")
    return lines
