"""What vLLM logged at its last start, beside what the plan predicted.

vLLM prints what it really did at every start: the weights it loaded and how long that took,
torch.compile's time, the KV cache memory it found and the tokens that gives, the maximum
concurrency at the served context, CUDA-graph capture, and the engine's profiling and warm-up.
``podctl status`` hands back those lines of the last start (:data:`STARTUP_NEEDLES`) and the
plan the deploy recorded (``bin/plan.json``); this module reads them and puts the two side by
side. A gap above :data:`GAP` is flagged. :func:`calibration_record` writes one start in the
format of ``tests/fixtures/kv_reference_cases.json``, so a user's starts can be sent back as
reference cases. Pure: tests feed it recorded log lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from podkit.host.hostplan import int_flag
from podkit.host.start.profile import NEEDLES as PROFILE_NEEDLES
from podkit.plan.architecture import CONFIG_KEYS as ARCHITECTURE_KEYS
from podkit.plan.architecture import Architecture

#: Substrings of the log lines worth reading (what ``podctl status`` hands back, and no more).
STARTUP_NEEDLES = (
    "non-default args",  # the API server's first line: the start of the clock
    "API server version",
    "Initializing a V1 LLM engine (v",
    "Model loading took",
    "Loading model weights took",
    "Memory profiling results",
    "Loading weights took",
    "torch.compile take",
    "torch.compile took",
    "Available KV cache memory",
    "for KV cache on node",
    "KV cache size:",
    "Maximum concurrency for",
    "Graph capturing finished",
    "init engine (profile, create kv cache, warmup model) took",
    "--kv-cache-memory",
    "Starting vLLM server on",  # the last line before it answers: the end of the clock
    "Starting vLLM API server",
    "Application startup complete",
    *PROFILE_NEEDLES,  # how the KV cache was sized: profiled, a profile reused, or given
)

#: A predicted figure further than this from the logged one is flagged.
GAP = 0.05

_NUMBER = r"([\d,]+(?:\.\d+)?)"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _whole(text: str) -> int:
    return int(_num(text))


#: Each line vLLM prints at a start, and where its numbers go: (group, "found" or "phases", key, type).
_PATTERNS = (
    (r"(?:API server version |V1 LLM engine \(v)([\w.+-]+?)\)?(?:\s|$)", [(1, "found", "vllm_version", str)]),
    (
        r"Model loading took " + _NUMBER + r" GiB(?: memory)? and " + _NUMBER + r" s",
        [(1, "found", "model_weights_gib", _num), (2, "phases", "load", _num)],
    ),
    (r"Loading weights took " + _NUMBER + r" s", [(1, "phases", "load", _num)]),  # the CPU build's
    (r"Loading model weights took " + _NUMBER + r" GB", [(1, "found", "model_weights_gib", _num)]),  # V0's
    (r"\bkv_cache_size=" + _NUMBER + r"GiB", [(1, "found", "kv_cache_gib", _num)]),  # V0's
    (r"torch\.compile (?:takes|took) " + _NUMBER + r" s", [(1, "phases", "compile", _num)]),
    (r"Available KV cache memory: " + _NUMBER + r" GiB", [(1, "found", "kv_cache_gib", _num)]),
    (r"Explicitly set \(" + _NUMBER + r"/" + _NUMBER + r"\) GiB for KV cache", [(1, "found", "kv_cache_gib", _num)]),
    (r"(?:GPU|CPU) KV cache size: " + _NUMBER + r" tokens", [(1, "found", "kv_cache_tokens", _whole)]),
    (
        r"Maximum concurrency for " + _NUMBER + r" tokens per request: " + _NUMBER + r"x",
        [(1, "found", "max_model_len", _whole), (2, "found", "max_concurrency", _num)],
    ),
    (
        r"Graph capturing finished in " + _NUMBER + r" secs?, took " + _NUMBER + r" GiB",
        [(1, "phases", "graph_capture", _num), (2, "found", "cuda_graph_gib", _num)],
    ),
    (
        r"init engine \(profile, create kv cache, warmup model\) took " + _NUMBER + r" s",
        [(1, "phases", "profile_kv_warmup", _num)],
    ),
    (r"--kv-cache-memory[= ](\d+)", [(1, "found", "suggested_kv_cache_memory_bytes", int)]),
)
_COMPILED = [(re.compile(pattern), targets) for pattern, targets in _PATTERNS]
_STAMP = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")


#: Figures each worker logs for itself (vLLM 0.10 prints a KV line per GPU); the engine sizes every
#: worker's cache to the smallest, so that one is the start's.
_SMALLEST = frozenset({"kv_cache_gib", "kv_cache_tokens", "max_concurrency"})


def parse_startup(lines: list[str]) -> dict[str, Any]:
    """The figures and phase times of one start, from its log lines (with several workers the
    lines repeat: the last value of each wins, the smallest for the KV cache's). Keys absent from
    the log are absent here."""
    found: dict[str, Any] = {}
    phases: dict[str, float] = {}
    into = {"found": found, "phases": phases}
    stamps: list[datetime] = []
    ready_at = None
    for line in lines:
        stamp = _STAMP.search(line)
        if stamp:
            try:
                stamps.append(datetime.strptime(stamp.group(1), "%m-%d %H:%M:%S"))
            except ValueError:
                pass
        if ("Starting vLLM server on" in line or "Starting vLLM API server" in line) and stamps:
            ready_at = stamps[-1]
        for pattern, targets in _COMPILED:
            match = pattern.search(line)
            if match is None:
                continue
            for group, where, key, kind in targets:
                value = kind(match.group(group))
                if key in _SMALLEST and key in into[where]:
                    value = min(value, into[where][key])
                into[where][key] = value
    if stamps and ready_at is not None:
        phases["total"] = (ready_at - stamps[0]).total_seconds() % (366 * 86400)
    if phases:
        found["phases_seconds"] = phases
    return found


#: predicted key (bin/plan.json) -> logged key (parse_startup), in the order they are shown
FIGURES = (
    ("weights_gib", "model_weights_gib", "weights GiB"),
    ("available_kv_gib", "kv_cache_gib", "KV cache GiB"),
    ("kv_tokens", "kv_cache_tokens", "KV tokens"),
    ("max_concurrency", "max_concurrency", "max concurrency"),
)


def compare(predicted: dict[str, Any], logged: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure both sides have: predicted, logged, the gap (predicted / logged - 1) and
    whether it is above :data:`GAP`."""
    rows = []
    for ours, theirs, label in FIGURES:
        plan, log = predicted.get(ours), logged.get(theirs)
        if plan is None or log is None:
            continue
        if label.endswith("GiB") or label == "max concurrency":
            plan = round(plan, 2)  # vLLM prints these with two decimals: compare as printed
        gap = (plan / log - 1.0) if log else (0.0 if not plan else float("inf"))
        rows.append({"figure": label, "predicted": plan, "logged": log, "gap": round(gap, 4), "flag": abs(gap) > GAP})
    return rows


def row_text(row: dict[str, Any]) -> str:
    """One compared figure as people read it: ``KV tokens: predicted 152000, logged 139776 (+8.7%)``,
    with a gap above :data:`GAP` flagged."""
    flag = f"  <- off by more than {GAP:.0%}" if row["flag"] else ""
    return f"{row['figure']}: predicted {row['predicted']:g}, logged {row['logged']:g} ({row['gap'] * 100:+.1f}%){flag}"


def _kind(config: dict[str, Any] | None) -> str | None:
    try:
        arch = Architecture.from_config(config or {})
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return "moe" if arch.is_moe and arch.kind == "standard" else arch.kind


def calibration_record(
    host: str, plan: dict[str, Any], logged: dict[str, Any], when: str, lines: Sequence[str] = ()
) -> dict[str, Any]:
    """One start as a reference case (the format of tests/fixtures/kv_reference_cases.json), with
    the prediction beside it. ``plan``: what the deploy recorded in bin/plan.json; ``lines``: the
    start lines it was read from (the case's excerpt)."""
    config = plan.get("config") or {}
    quantization = config.get("quantization_config")
    return {
        "kind": _kind(config),
        "dtype": config.get("torch_dtype") or config.get("dtype"),
        "quantization": quantization.get("quant_method") if isinstance(quantization, dict) else None,
        "nodes": 1,
        "fits": logged.get("kv_cache_tokens") is not None,
        "excerpt": "\n".join(lines),
        "notes": f"recorded by podkit on {host}",
        "check": {},
        "id": f"{host}-{when}",
        "source": f"podkit status of {host} ({when})",
        "vllm_version": logged.get("vllm_version") or plan.get("vllm_version"),
        "model": plan.get("model"),
        "gpu": plan.get("gpu"),
        "gpu_count": plan.get("gpu_count"),
        "gpu_memory_gib": plan.get("gpu_memory_gib"),
        "tensor_parallel_size": plan.get("tensor_parallel_size"),
        "pipeline_parallel_size": plan.get("pipeline_parallel_size") or 1,
        "max_num_seqs": plan.get("max_num_seqs"),
        "max_num_batched_tokens": plan.get("max_num_batched_tokens"),
        "gpu_memory_utilization": plan.get("gpu_memory_utilization"),
        "max_model_len": logged.get("max_model_len") or plan.get("max_model_len"),
        "kv_cache_dtype": plan.get("kv_cache_dtype"),
        "logged": {
            "kv_cache_tokens": logged.get("kv_cache_tokens"),
            "model_weights_gib": logged.get("model_weights_gib"),
            "kv_cache_gib": logged.get("kv_cache_gib"),
            "cuda_graph_gib": logged.get("cuda_graph_gib"),
            "max_concurrency": logged.get("max_concurrency"),
            "error": None,
        },
        "config": plan.get("config"),
        "predicted": plan.get("predicted"),
        "phases_seconds": logged.get("phases_seconds"),
    }


def plan_record(settings, launch) -> dict[str, Any]:
    """What the deploy predicts for the server it starts (``bin/plan.json``): the launch (GPU,
    TP, utilisation, context, KV dtype), the model's architecture, and the predicted weights, KV
    cache memory, KV tokens and concurrency. On a GPU host these are the plan's; on a CPU host,
    whose KV cache is the ``--kv-cache-memory-bytes`` it is given, the tokens that memory holds."""
    plan = launch.plan
    hardware = plan.hardware if plan is not None else None
    config = launch.config or {}
    args = list(launch.extra_args) + list(settings.extra_args)
    record: dict[str, Any] = {
        "vllm_version": plan.vllm_version if plan is not None else None,
        "model": plan.checkpoint.repo if plan is not None else launch.model,
        "gpu": hardware.gpu_name if hardware else None,
        "gpu_count": hardware.gpu_count if hardware else 0,
        "gpu_memory_gib": hardware.gpu_memory_gib if hardware else None,
        "tensor_parallel_size": launch.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "max_model_len": plan.max_model_len if plan is not None and plan.max_model_len else launch.max_model_len,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "pipeline_parallel_size": launch.pipeline_parallel_size,
        "max_num_seqs": int_flag(args, "--max-num-seqs"),
        "max_num_batched_tokens": int_flag(args, "--max-num-batched-tokens"),
        "config": {key: config.get(key) for key in CONFIG_KEYS if config.get(key) is not None},
        "predicted": {},
    }
    if plan is not None and plan.kv_cache_tokens is not None:
        record["predicted"] = {
            "weights_gib": plan.weights_gib_per_gpu,
            "available_kv_gib": plan.available_kv_cache_gib,
            "kv_tokens": plan.kv_cache_tokens,
            "max_concurrency": plan.max_concurrency,
        }
        return record
    kv_bytes = _flag_value(args, "--kv-cache-memory-bytes")
    if kv_bytes and config and isinstance(record["max_model_len"], int):
        try:
            per_token = Architecture.from_config(config).kv_bytes_per_token(
                launch.tensor_parallel_size, 1 if settings.kv_cache_dtype.startswith("fp8") else 2
            )
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return record
        tokens = int(kv_bytes // per_token)
        record["predicted"] = {
            "available_kv_gib": round(kv_bytes / 2**30, 4),
            "kv_tokens": tokens,
            "max_concurrency": round(tokens / record["max_model_len"], 2),
        }
    return record


#: what a reference case keeps of a model's config.json: what the plan reads, and what it was
CONFIG_KEYS = ("architectures", "torch_dtype", *ARCHITECTURE_KEYS)


def _flag_value(args: list[str], flag: str) -> int | None:
    for index, arg in enumerate(args):
        value = None
        if arg == flag and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return _bytes(value)
    return None


def _bytes(text: str) -> int | None:
    """``67108864``, ``64M``, ``64MiB``, ``1.5G`` as bytes (powers of 1024, as vLLM reads them)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match:
        return None
    try:
        return int(float(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " "))
    except ValueError:
        return None
