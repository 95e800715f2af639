"""What the edge refused lately, and why, from its access log.

The edge (Caddy) logs each request it answers to ``logs/access.log`` on the volume: the method,
the path (no query string), the status, the size and the time, never a header, a body or the key,
rolled by Caddy itself (templates/Caddyfile.j2). ``podctl describe`` and ``podctl status`` read
the end of it (``refused``: the 4xx answers counted by status, method and path, and the last few);
:func:`refusal_summary` turns that into one line for ``podkit verify`` and ``podkit status``.
The answer is the host's: anything not of the expected shape is left out, and every text is cleaned.
"""

from __future__ import annotations

from typing import Any

from podkit.text import clean

#: Why the edge, or vLLM behind it, answers each status.
WHY = {
    400: "vLLM refused the request (a prompt beyond the context, or a parameter it does not take)",
    401: "missing or wrong API key",
    404: "no such route or model (the edge passes /v1/* and /health only)",
    413: "the request is too large",
    429: "too many requests",
}
#: An API vLLM does not serve, by its path: what the client needs instead.
BRIDGED = {
    "/v1beta/": "the Gemini API, which vLLM does not serve: put the LiteLLM bridge in front "
    "(podkit client --for litellm, then --for gemini)",
}


def why(status: int, path: str) -> str:
    """Why a request of ``path`` was answered ``status``."""
    if status == 404:
        for prefix, said in BRIDGED.items():
            if path.startswith(prefix):
                return said
    return WHY.get(status, "refused")


def _status_path(key: str) -> tuple[int, str]:
    """The status and the path of a ``"STATUS METHOD PATH"`` key."""
    status_text, _, rest = key.partition(" ")
    return (int(status_text) if status_text.isdigit() else 0), rest.partition(" ")[2]


def _bridged(key: str) -> bool:
    status, path = _status_path(key)
    return status == 404 and path.startswith(tuple(BRIDGED))


def _counts(refused: Any) -> dict[str, int]:
    counts = refused.get("counts") if isinstance(refused, dict) else None
    if not isinstance(counts, dict):
        return {}
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def refusal_summary(refused: Any, most: int = 4) -> str | None:
    """One line: how many of the requests read were refused, the commonest refusals with why;
    None when the host has no access log yet (or said something else)."""
    if not isinstance(refused, dict):
        return None
    read = refused.get("read") if isinstance(refused.get("read"), int) else 0
    where = clean(refused.get("file") or "the access log")
    counts = _counts(refused)
    if not counts:
        return f"no request refused among the last {read} the edge logged ({where})"
    parts = []
    # an API vLLM does not serve first (its fix is a bridge), then the commonest
    for key, count in sorted(counts.items(), key=lambda item: (not _bridged(item[0]), -item[1], item[0]))[:most]:
        status, path = _status_path(key)
        parts.append(f"{count}x {clean(key)} ({why(status, path)})")
    more = len(counts) - most
    tail = f"; and {more} more kind{'s' if more > 1 else ''}" if more > 0 else ""
    total = sum(counts.values())
    return f"{total} of the last {read} requests refused ({where}): " + "; ".join(parts) + tail
