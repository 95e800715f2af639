"""The deploy's preflight plan for one host: the same plan as ``podkit plan``, from the host's probe.

It decides what the launch script serves (the FP8 sibling when the GPUs support
it and ``podkit_prefer_fp8`` is set), the context length when
``vllm_max_model_len`` is ``auto``, the tensor-parallel size, and the parser
flags when they are ``auto``; and it lists the problems that must stop the host
before anything is downloaded or installed, each with its fix. Memory is planned
with the overheads of the vLLM version the host will run, which the deploy chose
once (:func:`podkit.host.preflight.choose_vllm`) and passes in.

It sits in ``host/`` because it reads a host's probe; the planning it calls
(``podkit.plan``) takes plain values and imports nothing outside itself.

What that vLLM would refuse at start is a problem here, before the running server
is touched: a parser name its registry lacks (``podkit/plan/parsers.py``), a
context longer than the model's positions. A model that cannot be read or served
(no safetensors, a config without its sizes) is a problem of its host only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podkit.checks import vllm_flag
from podkit.host.fetch import FetchSpec
from podkit.host.hoststate import HostState
from podkit.plan.architecture import Architecture
from podkit.plan.checkpoints import Checkpoint, ModelError, find_fp8_alternative, from_hub, from_probe, max_positions
from podkit.plan.families import Family, UnknownFamily, family_for
from podkit.plan.gpus import Hardware, PlanError, gpu_by_name
from podkit.plan.memory import stage_layers, stage_weights_gib
from podkit.plan.parsers import parser_problem, plugin_flag
from podkit.plan.serverplan import Plan, make_plan
from podkit.settings import Settings

AUTO = "auto"
# Hermes Agent, the coding agent many of podkit's users run, refuses a smaller context.
HERMES_MIN_CONTEXT = 64000


def context_note(max_model_len: int | str | None) -> str | None:
    """A warning (not a failure) when the served context is below Hermes Agent's minimum."""
    if isinstance(max_model_len, int) and max_model_len < HERMES_MIN_CONTEXT:
        return (
            f"warning: a context of {max_model_len} tokens is below the {HERMES_MIN_CONTEXT:,} Hermes Agent "
            "needs; set vllm_max_model_len = 65536 if it is your client"
        )
    return None


@dataclass
class HostPlan:
    model: str  # what vllm serve is given
    max_model_len: int | str
    tensor_parallel_size: int
    tool_call_parser: str | None
    reasoning_parser: str | None
    extra_args: tuple[str, ...] = ()
    fetch: FetchSpec | None = None  # the hub checkpoint to have on the volume (None: a folder on the host)
    fetched: bool = False  # the probe found it complete, as recorded by an earlier fetch
    plan: Plan | None = None
    problems: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # the served checkpoint's config.json (its architecture)
    pipeline_parallel_size: int = 1  # stages: one per node of a cluster unless vllm_pipeline_parallel_size says
    #: with PP: each stage's layers and weights per GPU (and on GPUs its KV cache tokens), stage 0 first
    stages: list[dict] = field(default_factory=list)

    def summary(self) -> str:
        p = self.plan
        parts = [f"serves {self.fetch.repo}@{self.fetch.revision[:12]}" if self.fetch else f"serves {self.model}"]
        pipeline = f"PP {self.pipeline_parallel_size}" if self.pipeline_parallel_size > 1 else None
        if p is not None and p.kv_cache_tokens is not None:
            parts.append(
                f"{p.kv_cache_tokens} KV tokens, max_model_len {p.max_model_len} "
                f"({p.max_concurrency}x), TP {self.tensor_parallel_size}" + (f" x {pipeline}" if pipeline else "")
            )
        elif pipeline:
            parts.append(pipeline)
        parts.append(f"parser {self.tool_call_parser or 'none'}")
        if self.stages:
            parts.append(", ".join(stage_line(stage) for stage in self.stages))
        note = context_note(p.max_model_len if p is not None else self.max_model_len)
        return "; ".join(parts + ([note] if note else []))


def stage_line(stage: dict) -> str:
    """``stage 1: 14 layers, 7.1 GiB weights/GPU, 401,231 KV tokens`` (MiB for a small model)."""
    weights = stage["weights_gib"]
    size = f"{weights:.1f} GiB" if weights >= 0.1 else f"{weights * 1024:.2f} MiB"
    line = f"stage {stage['stage']}: {stage['layers']} layer{'s' if stage['layers'] != 1 else ''}, {size} weights/GPU"
    return line + (f", {stage['kv_cache_tokens']:,} KV tokens" if stage.get("kv_cache_tokens") is not None else "")


def stage_figures(plan: Plan, checkpoint: Checkpoint, pipeline: int) -> list[dict]:
    """Each pipeline stage's figures: the memory plan's on GPUs; on a CPU host (no memory plan) its
    layers and weights as vLLM would place them."""
    if pipeline <= 1:
        return []
    if plan.stages:
        return [
            {"stage": s.stage, "layers": s.layers, "weights_gib": s.weights_gib, "kv_cache_tokens": s.kv_cache_tokens}
            for s in plan.stages
        ]
    try:
        arch = Architecture.from_config(checkpoint.config)
        split = stage_layers(arch.num_layers, pipeline)
        weights = stage_weights_gib(arch, checkpoint.weight_bytes, 1, split, runtime_fp8=False)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a config the plan cannot read: no figures
        return []
    return [{"stage": i, "layers": n, "weights_gib": w} for i, (n, w) in enumerate(zip(split, weights))]


def hardware_of(state: HostState, nodes: int = 1) -> Hardware | None:
    """The GPUs one server runs on: this host's, times ``nodes`` when a cluster's nodes (each
    alike, which the preflight checks) serve it together."""
    if not state.gpus:
        return None
    first = state.gpus[0]
    try:
        _, memory, capability = gpu_by_name(first.name)
    except PlanError:  # an unknown card: what nvidia-smi says, less what the driver keeps
        memory, capability = first.memory_mib / 1024 - 0.5, None
    return Hardware(first.name, memory, len(state.gpus) * nodes, first.compute_capability or capability)


def plan_options(settings: Settings, vllm_version: str, pipeline: int = 1) -> dict[str, Any]:
    """What the settings tell the plan (``make_plan``'s options), the same for the deploy and for a
    pod planned before it exists (``podkit create``)."""
    return {
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "max_model_len": settings.max_model_len,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "runtime_fp8": "--quantization" in {vllm_flag(arg) for arg in settings.extra_args},
        "vllm_version": vllm_version,
        "pipeline_parallel_size": pipeline,
        "max_num_seqs": int_flag(settings.extra_args, "--max-num-seqs"),
        "max_num_batched_tokens": int_flag(settings.extra_args, "--max-num-batched-tokens"),
    }


def parser_problems(settings: Settings, launch: HostPlan, version: str) -> list[str]:
    """The parser names vLLM ``version`` lacks, each with the valid ones; none is checked when
    vllm_extra_args loads a parser plugin of that kind, whose names podkit cannot know."""
    flags = {vllm_flag(arg) for arg in (*settings.extra_args, *launch.extra_args)}
    chosen = {"tool_call_parser": launch.tool_call_parser, "reasoning_parser": launch.reasoning_parser}
    found = (parser_problem(kind, name, version, plugins=plugin_flag(kind) in flags) for kind, name in chosen.items())
    return [problem for problem in found if problem]


def int_flag(args, flag: str) -> int | None:
    """The integer ``vllm_extra_args`` give ``flag`` (``--max-num-seqs 64`` or ``--max-num-seqs=64``),
    so the plan checks the warm-up vLLM will really run; None when absent or not a number."""
    args = list(args)
    for index, arg in enumerate(args):
        value = args[index + 1] if arg == flag and index + 1 < len(args) else None
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def context_problem(settings: Settings, checkpoint: Checkpoint, version: str) -> str | None:
    """A vllm_max_model_len above the model's positions, which vLLM refuses at start (unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN in vllm_extra_env lets it take one)."""
    positions = max_positions(checkpoint.config)
    wanted = settings.max_model_len
    allow_long = settings.extra_env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in ("1", "true")
    if not isinstance(wanted, int) or positions is None or wanted <= positions or allow_long:  # a str: AUTO
        return None
    return (
        f"vllm_max_model_len {wanted} exceeds the {positions} positions of {checkpoint.repo} (its "
        f"config.json), which vLLM {version} refuses at start: lower vllm_max_model_len to at most "
        f"{positions}, or set it to 'auto'"
    )


def plan_host(
    settings: Settings,
    state: HostState,
    *,
    vllm_version: str,
    nodes: int = 1,
    prefer_fp8: bool = True,
    resolve: Callable[[str], Checkpoint] = from_hub,
    fp8_search: Callable[[Checkpoint], Checkpoint | None] = find_fp8_alternative,
) -> HostPlan:
    """The plan for ``state``'s host, serving alone or as one of ``nodes`` alike nodes of a cluster:
    tensor parallel within a node (every GPU of the host unless vllm_tensor_parallel_size says),
    pipeline parallel across the nodes (one stage each unless vllm_pipeline_parallel_size says).
    ``vllm_version``: the vLLM the host will serve with (the pin for its kind, GPU or CPU build:
    an install on the host counts only when it is that pin), whose parsers and overheads apply."""
    hardware = hardware_of(state, nodes)
    pipeline = settings.pipeline_parallel_size or nodes
    result = HostPlan(
        model=settings.model,
        max_model_len=settings.max_model_len,
        tensor_parallel_size=settings.tensor_parallel_size or max(len(state.gpus) * nodes // pipeline, 1),
        tool_call_parser=None if settings.tool_call_parser == AUTO else settings.tool_call_parser,
        reasoning_parser=None if settings.reasoning_parser == AUTO else settings.reasoning_parser,
        pipeline_parallel_size=pipeline,
    )
    if pipeline > 1 and nodes == 1 and not state.gpus:
        result.problems.append(
            f"vllm_pipeline_parallel_size is {pipeline} but this host has no GPU and serves alone: vLLM's CPU build "
            "starts such a pipeline and then fails every request (500, then 503); a pipeline stage per GPU, or "
            "one per node of a cluster (podkit_cluster): unset vllm_pipeline_parallel_size"
        )
    record = state.checkpoint if state.checkpoint and state.checkpoint.get("complete") else None
    try:
        if settings.model.startswith("/"):
            checkpoint = from_probe(settings.model, state.model_dir or {})
        elif record:  # fetched before, whole: plan from the snapshot on the volume, no hub request
            checkpoint = from_probe(record["snapshot"], record.get("metadata") or {})
            checkpoint.repo, checkpoint.revision, checkpoint.local = record["repo"], record["revision"], False
        else:
            checkpoint = resolve(settings.model)
    except ModelError as exc:
        result.problems.append(str(exc))
        return result

    result.config = dict(checkpoint.config or {})
    family: tuple[str, Family] | None = None
    try:
        family = family_for(checkpoint.repo, checkpoint.config)
    except UnknownFamily as exc:
        if AUTO in (settings.tool_call_parser, settings.reasoning_parser):
            result.problems.append(str(exc))
    if family:
        name, fam = family
        if settings.tool_call_parser == AUTO:
            result.tool_call_parser = fam.tool_call_parser
        if settings.reasoning_parser == AUTO:
            result.reasoning_parser = fam.reasoning_parser
        if fam.extra_args and (fam.extra_args_when is None or fam.extra_args_when in checkpoint.files):
            result.extra_args = fam.extra_args
    # what the vLLM this host runs would refuse at start, before the running server is touched
    result.problems += parser_problems(settings, result, vllm_version)
    too_long = context_problem(settings, checkpoint, vllm_version)
    if too_long:
        result.problems.append(too_long)

    fp8 = None
    if (
        hardware
        and hardware.fp8_supported
        and prefer_fp8
        and not checkpoint.is_fp8
        and not checkpoint.local
        and not record
    ):
        fp8 = fp8_search(checkpoint)
    try:
        plan = make_plan(
            checkpoint,
            hardware,
            fp8_alternative=fp8,
            prefer_fp8=prefer_fp8,
            disk_free_bytes=None if checkpoint.local else state.free_bytes,
            cached_bytes=state.hub_repos,
            family=family,
            **plan_options(settings, vllm_version, pipeline),
        )
    except PlanError as exc:
        result.problems.append(str(exc))
        return result
    except ModelError as exc:  # no safetensors: this host stops, the other hosts go on
        result.problems.append(f"{checkpoint.repo}: {exc}")
        return result
    except KeyError as exc:  # a config.json without a size the memory plan reads
        result.problems.append(
            f"{checkpoint.repo}: its config.json lacks {exc}, which podkit plans memory from; "
            "check vllm_model (a transformers checkpoint for vLLM)"
        )
        return result
    result.plan = plan
    result.stages = stage_figures(plan, checkpoint, pipeline)
    chosen = plan.checkpoint
    if not chosen.local:
        if chosen.revision is None:  # the hub answers every model_info with the commit it resolved
            result.problems.append(f"{chosen.repo}: the hub named no commit for it; apply again")
            return result
        result.fetch = FetchSpec(settings.model, chosen.repo, chosen.revision, plan.download_files, plan.download_bytes)
        result.fetched = record is not None
        result.model = result.fetch.snapshot(settings.paths)
    if settings.max_model_len == AUTO and plan.max_model_len_fit:
        result.max_model_len = plan.max_model_len_fit
    result.tensor_parallel_size = plan.tensor_parallel_size or result.tensor_parallel_size
    if not plan.fits and not (too_long and "positions" in plan.reason):  # the GPU plan says it too
        fixes = "; or ".join(plan.suggestions[:3])
        result.problems.append(f"{plan.reason}" + (f": {fixes}" if fixes else ""))
    return result
