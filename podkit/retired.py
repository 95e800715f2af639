"""Settings that are gone, and the one line that refuses a key no setting declares.

A host's data that still sets a retired key is refused with what replaced it; a misspelt
``podkit_``/``vllm_`` key with the closest declared name (``podkit/settings.py``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from podkit.checks import Setting

# Settings that are gone, with what replaced them (a host's data that still sets one is refused with this).
RETIRED = {
    "vllm_host": "vLLM now listens on 127.0.0.1 only and Caddy owns the served port (podkit_edge_port); "
    "podkit_public = False keeps that port on loopback too",
    "podkit_restart_backoff_max": "supervisord restarts the server now: see podkit_start_retries",
}


def unknown_key(key: str, declared: Iterable[Setting]) -> str:
    """Why ``key`` is refused: retired (and what replaced it), or unknown (and the closest declared name)."""
    if key in RETIRED:
        return f"{key} is no longer a setting: {RETIRED[key]}"
    # Compared without the prefixes, which every key shares, and which a typo may have wrong.
    by_attr = {one.attr: one.name for one in declared}
    close = difflib.get_close_matches(key.split("_", 1)[1], by_attr, n=1)
    hint = f"did you mean {by_attr[close[0]]}?" if close else "every setting is declared in podkit/settings.py"
    return f"unknown setting {key}; {hint}"
