"""A measured plan: vLLM itself says whether the served flags fit, from a start without the weights.

``vllm serve --load-format dummy`` starts the real engine on the real host with random weights,
so it needs only the checkpoint's ``config.json`` and tokenizer (a few MB): it logs the same KV
cache size, concurrency, graph memory and warm-up it will log with the real weights, or fails
the same way. This module builds that start from the deploy's own plan and flags
(:func:`measure_config`, :func:`measure_command`, run on the host by ``podkit/remote/measure.py``),
and reads what comes back (:func:`read_measurement`): fits or not, and why in vLLM's own words,
beside what the analytic plan predicted, and the start as a reference case in the shape of
``tests/fixtures/kv_reference_cases.json``. Pure: tests feed it recorded answers.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from podkit.host.start.diagnose import last_exception
from podkit.host.start.startup import STARTUP_NEEDLES, calibration_record, compare, parse_startup, plan_record, row_text
from podkit.plan.checkpointfiles import METADATA_PATTERNS
from podkit.settings import FLAGS

_HEREDOC = "PODKIT_MEASURE_EOF"

#: Weight files: a measurement that fetched one of these broke its promise.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")


def measure_argv(serve: list[str]) -> list[str]:
    """The served ``vllm serve`` command line as a measurement runs it: the model and the port left
    as ``{model}`` and ``{port}`` for the host to fill in (the scratch snapshot, a free loopback port),
    and ``--load-format dummy`` last, so it wins over any load format the flags name."""
    argv = list(serve)
    argv[2] = "{model}"
    argv[argv.index(FLAGS["port"]) + 1] = "{port}"
    return argv + ["--load-format", "dummy"]


def measurement_key(hardware: dict[str, Any], vllm_version: str, checkpoint: str, argv: list[str]) -> str:
    """What a measurement depends on, as one digest: the GPUs (name, memory, count), the vLLM version,
    the checkpoint (repo and pinned revision, or the folder) and the flags."""
    text = json.dumps(
        {"hardware": hardware, "vllm": vllm_version, "checkpoint": checkpoint, "argv": argv}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_config(
    settings,
    launch,
    vllm_bin: str,
    *,
    key: str | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """What ``podkit/remote/measure.py`` is given: paths, names and flags, never a secret (the key
    and the HF token are read on the host from their files). ``keep``: leave the outcome on the host
    under ``key`` (the deploy's record, read back by the probe)."""
    from podkit.host.render import serve_argv

    paths = settings.paths
    folder = paths.measure  # its own folder, apart from everything the server uses
    fetch = launch.fetch
    return {
        "model": launch.model,
        "repo": fetch.repo if fetch else None,
        "revision": fetch.revision if fetch else None,
        "patterns": list(METADATA_PATTERNS),
        "scratch_hub": f"{folder}/hub",
        "tmp_dir": f"{folder}/tmp",
        "log_file": f"{folder}/vllm.log",
        "token_file": paths.hf_token,
        "key_file": paths.api_key,
        "argv": measure_argv(serve_argv(settings, vllm_bin, launch)),
        "env": {**paths.cache_env(), **settings.extra_env},
        "needles": list(STARTUP_NEEDLES),
        "timeout": settings.ready_timeout,
        "key": key,
        "record": f"{folder}/measured.json" if keep else None,
    }


def hardware_key(state) -> list[list[Any]]:
    """The GPUs a measurement ran on, as the probe saw them: name and memory of each."""
    return [[gpu.name, gpu.memory_mib] for gpu in state.gpus]


def deploy_step(settings, launch, state, vllm_bin: str) -> dict[str, Any]:
    """What the deploy does about measuring (``podkit_plan_measure``), decided from the probe alone:

    - ``skip``: not asked, the checkpoint is on the volume already, or a folder on the host;
    - ``recorded``: this very start (same key) was measured before: its outcome stands;
    - ``measure``: a new checkpoint, or flags, GPUs or vLLM that changed: start it once (``cfg``);
    - on GPUs whose memory the running server holds, ``skip`` with a note saying how to measure.
    """
    if not settings.plan_measure or launch.fetch is None or launch.fetched or launch.problems:
        return {"action": "skip", "why": None}
    version = launch.plan.vllm_version if launch.plan is not None else None
    checkpoint = f"{launch.fetch.repo}@{launch.fetch.revision}"
    cfg = measure_config(settings, launch, vllm_bin, keep=True)
    key = measurement_key({"gpus": hardware_key(state)}, version or "", checkpoint, cfg["argv"])
    cfg["key"] = key
    recorded = state.measured or {}
    if recorded.get("key") == key and isinstance(recorded.get("result"), dict):
        return {"action": "recorded", "why": None, "result": recorded["result"], "key": key}
    if state.has_gpus and state.server_pid:
        return {
            "action": "skip",
            "why": f"not measured: the running server (pid {state.server_pid}) holds the GPUs' memory; "
            f"measure first with podkit plan --measure INVENTORY --stop-server {settings.model}",
        }
    return {"action": "measure", "why": None, "cfg": cfg, "key": key}


def measure_command(cfg: dict[str, Any], python: str, endpoint: str | None) -> str:
    """One shell command that runs the measurement on the host with ``python`` (vLLM's); the hub
    is ``endpoint`` when the controller names one (``HF_ENDPOINT``), as for the deploy's fetch."""
    source = resources.files("podkit.remote").joinpath("measure.py").read_text()
    assert _HEREDOC not in source
    cfg = {**cfg, "endpoint": endpoint}
    return (
        f"export HF_HUB_DISABLE_TELEMETRY=1\n{shlex.quote(python)} - {shlex.quote(json.dumps(cfg, sort_keys=True))} "
        f"<<'{_HEREDOC}'\n{source}\n{_HEREDOC}"
    )


def parse_answer(output: str) -> dict[str, Any]:
    """The measurement's JSON line (its last), or {"error": ...} saying what came back instead."""
    for line in reversed(output.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("measure") == 1:
            return data
    return {"error": f"the measurement printed no JSON: {output.strip()[-300:]!r}"}


def vllm_reason(errors: list[str], tail: Sequence[str] = ()) -> str:
    """Why vLLM did not start, in its own words: the last exception line it printed (the KV cache
    it would need and the longest context that fits; the memory a warm-up asked for), else the last
    error line, else the last line."""
    raised = last_exception(errors)
    if raised:
        return raised
    for line in reversed(list(errors) or list(tail)):
        if line.strip():
            return line.strip()
    return "vLLM stopped without saying why"


def weight_files(files: list[str]) -> list[str]:
    """The fetched files that hold weights (none, when the measurement kept its promise)."""
    return [name for name in files if name.lower().endswith(WEIGHT_SUFFIXES)]


def read_measurement(host: str, answer: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """What one measurement says, beside the plan: ``record`` is :func:`plan_record`'s (what the
    analytic plan predicted for these flags). Returns the ``plan --measure --json`` object."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if answer.get("error"):
        return {"host": host, "measured": False, "fits": None, "reason": answer["error"], "predicted": record}
    logged = parse_startup(answer.get("lines") or [])
    started = bool(answer.get("started"))
    if started:
        tokens, length = logged.get("kv_cache_tokens"), logged.get("max_model_len") or record.get("max_model_len")
        reason = f"vLLM started with random weights: {tokens} KV cache tokens" + (
            f", {logged['max_concurrency']}x requests of {length} at once" if logged.get("max_concurrency") else ""
        )
    elif answer.get("timed_out"):
        reason = f"vLLM did not start within {answer.get('seconds', 0):.0f} s (podkit_ready_timeout)"
    else:
        reason = vllm_reason(answer.get("errors") or [], answer.get("tail") or [])
    case = calibration_record(host, record, logged, when, (answer.get("lines") or []) + (answer.get("errors") or []))
    case["id"] = f"{host}-measured-{when}"
    case["source"] = f"podkit plan --measure on {host} ({when}, --load-format dummy)"
    case["fits"] = started
    case["logged"]["error"] = None if started else reason
    fetched = answer.get("fetched") or []
    return {
        "host": host,
        "measured": True,
        "fits": started,
        "reason": reason,
        "logged": logged,
        "predicted": record.get("predicted") or {},
        "compare": compare(record.get("predicted") or {}, logged),
        "phases_seconds": logged.get("phases_seconds") or {},
        "seconds": answer.get("seconds"),
        "fetched": fetched,
        "weights_fetched": weight_files(fetched),
        "reference_case": case,
    }


def report_lines(measured: dict[str, Any]) -> list[str]:
    """``plan --measure`` as people read it: the verdict, then measured against predicted."""
    verdict = "FITS" if measured["fits"] else "DOES NOT FIT" if measured["fits"] is False else "NOT MEASURED"
    lines = [f"{measured['host']}: {verdict} (measured): {measured['reason']}"]
    logged = measured.get("logged") or {}
    if logged.get("kv_cache_tokens") is not None:
        lines.append(f"  KV cache tokens: {logged['kv_cache_tokens']}")
    if logged.get("max_concurrency") is not None:
        lines.append(f"  concurrency at {logged.get('max_model_len')} tokens: {logged['max_concurrency']}x")
    lines += [f"  {row_text(row)}" for row in measured.get("compare") or []]
    phases = measured.get("phases_seconds") or {}
    if phases:
        lines.append("  phases: " + ", ".join(f"{name} {seconds:g} s" for name, seconds in phases.items()))
    if measured.get("seconds") is not None:
        lines.append(f"  measured in {measured['seconds']:g} s (config and tokenizer only, random weights)")
    return lines


def keep_case(case: dict[str, Any], folder: Path) -> Path:
    """Write a reference case as ``folder/<id>.json`` (the controller's calibration folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (re.sub(r"[^A-Za-z0-9._-]+", "-", case["id"]) + ".json")
    path.write_text(json.dumps(case, indent=2, sort_keys=True) + "\n")
    return path


__all__ = [
    "METADATA_PATTERNS",
    "keep_case",
    "measure_argv",
    "measure_command",
    "measure_config",
    "measurement_key",
    "parse_answer",
    "plan_record",
    "read_measurement",
    "report_lines",
    "vllm_reason",
]
