"""Know before you spend: does a model and its context fit the GPUs, and what to change if not.

vLLM V1 profiles memory at start and gives the KV cache what is left::

    available_kv = total_gpu_memory * gpu_memory_utilization
                   - weights - peak_activation - non_torch - cuda_graphs        (per GPU)
    kv_cache_tokens = floor(available_kv / kv_bytes_per_token / block) * block

KV bytes per token per GPU depend on the attention kind:

- standard (MHA/GQA, MoE too): 2 * layers * ceil(kv_heads / TP) * head_dim * dtype_bytes
- MLA (DeepSeek-V2/V3): layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes, not split by TP
- sliding-window layers (gpt-oss, Gemma): vLLM's logged token count charges them like full
  layers, but a sequence never holds more than the window in them, so the longest context that
  fits counts only the full-attention layers (plus the windows)
- hybrid (Mamba / linear attention + a few attention layers): a fixed state per sequence plus
  KV for the attention layers only

The overheads (activation peak, non-torch memory, CUDA graphs) are estimates calibrated against
real startup logs (tests/fixtures/kv_reference_cases.json, each with its source).
:func:`plan_memory` is the memory verdict for one server; the overheads it deducts are in
:mod:`podkit.plan.overheads`, and :func:`podkit.plan.serverplan.make_plan` puts the verdict, the
checkpoint choice and the disk check into one plan. The GPU table is in :mod:`podkit.plan.gpus`, what is read from a config.json in
:mod:`podkit.plan.architecture`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from podkit.plan.architecture import Architecture
from podkit.plan.gpus import (  # noqa: F401 (importable from here too)
    GPUS,
    Hardware,
    PlanError,
    gpu_by_name,
    supports_fp8,
)
from podkit.plan.overheads import (  # noqa: F401 (importable from here too)
    BLOCK,
    CUDA_CONTEXT_GIB,
    DTYPE_BYTES,
    GIB,
    Overheads,
    context_gib,
    fused_moe_gib,
    graph_gib,
    start_refusal,
    version_problem,
    warmup_fixes,
    warmup_freed_gib,
    warmup_need_gib,
    warmup_room_gib,
)


@dataclass(frozen=True)
class Stage:
    """One pipeline stage, per GPU of its tensor-parallel group."""

    stage: int  # its rank in the pipeline, 0 first
    layers: int  # decoder layers it holds
    weights_gib: float
    activation_gib: float
    available_kv_cache_gib: float
    kv_bytes_per_token: int  # over its own layers
    kv_cache_tokens: int
    max_context: int  # the longest context its KV cache would hold


@dataclass
class MemoryPlan:
    weights_gib_per_gpu: float
    kv_bytes_per_token: int
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    available_kv_cache_gib: float
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    max_model_len_fit: int
    fits: bool
    reason: str
    suggestions: list[str] = field(default_factory=list)
    pipeline_parallel_size: int = 1
    #: with pipeline parallel, each stage's layers, weights, KV memory and tokens (the pool is the smallest)
    stages: list[Stage] = field(default_factory=list)
    max_num_seqs: int = 256
    #: what the warm-up after KV sizing needs outside the budget (graphs + sampler), and the room there
    warmup_gib: float = 0.0
    warmup_room_gib: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def valid_tp_sizes(arch: Architecture, gpus: int) -> list[int]:
    return [tp for tp in range(1, gpus + 1) if arch.num_attention_heads % tp == 0]


def valid_shapes(arch: Architecture, gpus: int) -> list[tuple[int, int]]:
    """Every (TP, PP) that uses at most ``gpus`` GPUs: TP divides the attention heads, PP is at
    most the layer count."""
    return [(tp, pp) for tp in valid_tp_sizes(arch, gpus) for pp in range(1, gpus // tp + 1) if pp <= arch.num_layers]


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM splits them (``get_pp_indices`` without
    VLLM_PP_LAYER_PARTITION): an even share each, the remainder one more each to the stages
    before the last (27 layers over 2 stages: 14 and 13)."""
    share = [num_layers // pp] * pp
    for index in range(2, num_layers % pp + 2):
        share[-index] += 1
    return share


def stage_weights_gib(
    arch: Architecture, weight_bytes: int, tp: int, split: list[int], runtime_fp8: bool
) -> list[float]:
    """Each pipeline stage's weights per GPU, placed as vLLM places them: the embedding on the first
    stage, the LM head on the last (a tied head too: the last stage holds its own copy of the
    embedding), and the rest of the checkpoint over the decoder layers by their estimated parameters
    (:meth:`Architecture.layer_parameters`: DeepSeek's dense first layer weighs a seventh of a MoE
    one). The embedding and the head count 2 bytes a parameter (bf16 in an FP8 checkpoint too; runtime
    FP8 leaves them so) and are split by TP as the decoder layers are."""
    matrix = arch.vocab_size * arch.hidden_size * 2
    decoder: float = weight_bytes - (1 if arch.tied_embeddings else 2) * matrix
    if decoder <= 0:  # a checkpoint smaller than its config's embeddings (a test model): by layers alone
        matrix, decoder = 0, weight_bytes
    if runtime_fp8:
        decoder /= 2
    params = arch.layer_parameters()
    bounds = [sum(split[:index]) for index in range(len(split) + 1)]
    return [
        (decoder * sum(params[start:end]) / sum(params) + matrix * ((start == 0) + (end == arch.num_layers))) / tp / GIB
        for start, end in zip(bounds, bounds[1:])
    ]


def plan_memory(
    arch: Architecture,
    *,
    weight_bytes: int,
    gpu_memory_gib: float,
    gpu_count: int,
    tensor_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | str = "auto",
    kv_cache_dtype: str = "auto",
    runtime_fp8: bool = False,
    vllm_version: str = "0.33.0",
    overheads: Overheads | None = None,
    pipeline_parallel_size: int = 1,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> MemoryPlan:
    """Plan one server; ``weight_bytes`` is the checkpoint's total (the FP8 one's if chosen).
    With ``pipeline_parallel_size`` > 1 each stage holds its share of the layers (and of the
    weights, in proportion), and the KV pool is the smallest stage's. A launch whose KV cache
    fits but whose warm-up would not fit outside the budget (:func:`warmup_need_gib`) does not
    fit either: vLLM would size the cache, then die."""
    pp = pipeline_parallel_size
    tp = tensor_parallel_size or max(1, gpu_count // pp)
    if pp == 1 and tp > gpu_count:
        raise PlanError(f"tensor_parallel_size {tp} exceeds the {gpu_count} GPU(s); use at most {gpu_count}")
    if pp < 1 or pp > arch.num_layers:
        raise PlanError(f"pipeline_parallel_size {pp} must be from 1 to the model's {arch.num_layers} layers")
    if tp * pp > gpu_count:
        shapes = ", ".join(f"TP {t} x PP {p}" for t, p in valid_shapes(arch, gpu_count) if t * p == gpu_count)
        raise PlanError(
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} needs {tp * pp} GPUs, more than the "
            f"{gpu_count} here; shapes that use them all: {shapes or 'none'}"
        )
    if tp > gpu_count:
        raise PlanError(f"tensor_parallel_size {tp} exceeds the {gpu_count} GPU(s); use at most {gpu_count}")
    if arch.num_attention_heads % tp:
        raise PlanError(
            f"tensor_parallel_size {tp} does not divide the {arch.num_attention_heads} attention heads; "
            f"valid sizes here: {valid_tp_sizes(arch, gpu_count)}"
        )
    if kv_cache_dtype not in DTYPE_BYTES:
        raise PlanError(f"kv_cache_dtype must be one of {', '.join(DTYPE_BYTES)}")
    too_old = version_problem(vllm_version)
    if too_old:
        raise PlanError(too_old)
    ov = overheads or Overheads.for_version(vllm_version, gpu_memory_gib, max_num_batched_tokens, max_num_seqs)
    ov = ov.for_model(arch, gpu_memory_gib)
    weights = weight_bytes / tp
    if runtime_fp8:
        weights = weights / 2  # linear layers go to 8 bit; the download does not shrink
    kv_bytes = arch.kv_bytes_per_token(tp, DTYPE_BYTES[kv_cache_dtype])
    activation = ov.activation_gib(arch, tp)
    non_torch = ov.non_torch_gib(tp, pp)
    graphs = ov.cuda_graphs
    available = gpu_memory_gib * gpu_memory_utilization - weights / GIB - activation - non_torch - graphs
    tokens = max(0, math.floor(available * GIB / kv_bytes / BLOCK) * BLOCK) if available > 0 else 0
    capacity = _context_capacity(arch, available, tp, DTYPE_BYTES[kv_cache_dtype])
    stages: list[Stage] = []
    if pp > 1:
        split = stage_layers(arch.num_layers, pp)
        for index, (layers, stage_weights) in enumerate(
            zip(split, stage_weights_gib(arch, weight_bytes, tp, split, runtime_fp8))
        ):
            share = layers / arch.num_layers
            attention = max(1, round(arch.attention_layers * share))
            stage_activation = ov.stage_activation_gib(arch, tp, last=index == len(split) - 1)
            budget = gpu_memory_gib * gpu_memory_utilization - stage_activation - non_torch - graphs
            stage_available = budget - stage_weights
            stage_kv = arch.kv_bytes_per_token(tp, DTYPE_BYTES[kv_cache_dtype], attention)
            stage_tokens = (
                max(0, math.floor(stage_available * GIB / stage_kv / BLOCK) * BLOCK) if stage_available > 0 else 0
            )
            # the longest context: the stage's budget seen as the whole model's (its layers' share)
            stage_capacity = _context_capacity(
                arch, stage_available * arch.attention_layers / attention, tp, DTYPE_BYTES[kv_cache_dtype]
            )
            stages.append(
                Stage(
                    stage=index,
                    layers=layers,
                    weights_gib=round(stage_weights, 2),
                    activation_gib=round(stage_activation, 2),
                    available_kv_cache_gib=round(stage_available, 2),
                    kv_bytes_per_token=stage_kv,
                    kv_cache_tokens=stage_tokens,
                    max_context=stage_capacity,
                )
            )
        limiting = min(stages, key=lambda stage: stage.kv_cache_tokens)
        weights = max(stage.weights_gib for stage in stages) * GIB
        activation = max(stage.activation_gib for stage in stages)
        available, tokens, kv_bytes = (
            limiting.available_kv_cache_gib,
            limiting.kv_cache_tokens,
            limiting.kv_bytes_per_token,
        )
        capacity = min(stage.max_context for stage in stages)
    fit_len = min(capacity, arch.max_position_embeddings)
    wanted = fit_len if max_model_len == "auto" else int(max_model_len)
    if available <= 0:
        fits, reason = (
            False,
            (
                f"the weights ({weights / GIB:.1f} GiB per GPU) and vLLM's overheads "
                f"({activation + non_torch + graphs:.1f} GiB) leave no memory for the KV cache"
            ),
        )
    elif wanted > arch.max_position_embeddings:
        fits, reason = False, f"max_model_len {wanted} exceeds the model's {arch.max_position_embeddings} positions"
    elif wanted > capacity:
        fits, reason = False, f"the KV cache holds {capacity} tokens of context, fewer than max_model_len {wanted}"
    elif wanted < BLOCK:
        fits, reason = False, "the KV cache cannot hold a single block"
    else:
        fits, reason = True, f"{tokens} KV cache tokens, {tokens / wanted:.1f} requests of {wanted} at once"
    context = context_gib(tp, pp, vllm_version, arch.is_moe)
    fixes: list[str] = []
    refused = start_refusal(gpu_memory_gib, gpu_memory_utilization, context)
    if refused:  # vLLM's first check, before it loads anything
        fits, reason = False, refused[0]
        fixes = [refused[1]]
    graphs_out, sampler = warmup_need_gib(arch, ov, vllm_version)
    freed = warmup_freed_gib(ov, arch, tp, vllm_version)
    room = warmup_room_gib(gpu_memory_gib, gpu_memory_utilization, freed, context)
    need = graphs_out + sampler
    short = fits and need > room
    if short:
        fits = False
        reason = (
            f"the KV cache fits ({tokens} tokens), but the warm-up after it needs "
            f"{need:.2f} GiB outside the gpu_memory_utilization budget (CUDA graphs "
            f"{graphs_out:.2f} GiB, {ov.max_num_seqs} dummy requests through the forward and the sampler "
            f"{sampler:.2f} GiB) "
            f"where {max(room, 0):.2f} GiB is left: vLLM {vllm_version} would run out of memory after sizing it"
        )
    if short:
        fixes = warmup_fixes(
            max_num_seqs=ov.max_num_seqs,
            graphs=graphs_out,
            sampler=sampler,
            room=room,
            gpu_memory_gib=gpu_memory_gib,
            gpu_memory_utilization=gpu_memory_utilization,
            available_gib=available,
            kv_bytes_per_token=kv_bytes,
            freed=freed,
            context=context,
            freed_per_seq=ov.sampler_bytes * arch.vocab_size / GIB if freed else 0.0,
        )
    return MemoryPlan(
        weights_gib_per_gpu=round(weights / GIB, 2),
        kv_bytes_per_token=kv_bytes,
        activation_gib=round(activation, 2),
        non_torch_gib=non_torch,
        cuda_graph_gib=graphs,
        available_kv_cache_gib=round(available, 2),
        kv_cache_tokens=tokens,
        max_model_len=wanted,
        max_concurrency=round(tokens / wanted, 2) if wanted else 0.0,
        max_model_len_fit=max(0, fit_len),
        fits=fits,
        reason=reason,
        pipeline_parallel_size=pp,
        stages=stages,
        suggestions=fixes,
        max_num_seqs=ov.max_num_seqs,
        warmup_gib=round(graphs_out + sampler, 2),
        warmup_room_gib=round(room, 2),
    )


def _context_capacity(arch: Architecture, available_gib: float, tp: int, dtype_bytes: int) -> int:
    """The longest single context the KV cache holds (one request)."""
    if available_gib <= 0:
        return 0
    budget = available_gib * GIB
    if arch.kind == "hybrid":
        budget -= arch.state_bytes_per_seq
    if arch.kind == "sliding_window":
        sliding = arch.attention_layers - arch.full_attention_layers
        budget -= arch.kv_bytes_per_token(tp, dtype_bytes, sliding) * arch.sliding_window
        per_token = arch.kv_bytes_per_token(tp, dtype_bytes, arch.full_attention_layers)
    else:
        per_token = arch.kv_bytes_per_token(tp, dtype_bytes)
    return max(0, math.floor(budget / per_token / BLOCK) * BLOCK)


def suggestions(
    arch: Architecture,
    base: MemoryPlan,
    replan,
    *,
    gpu_count: int,
    kv_cache_dtype: str,
    fp8_alternative: str | None,
    fp8_supported: bool,
) -> list[str]:
    """What to change, cheapest first, each with what it would give. ``replan(**changes)`` re-plans."""
    if base.fits:
        return []
    if base.suggestions:  # the warm-up's fixes: the context fits, more memory would not help
        return list(base.suggestions)
    if base.max_model_len > arch.max_position_embeddings:
        return [f"set vllm_max_model_len to at most {min(base.max_model_len_fit, arch.max_position_embeddings)}"]
    out = []
    if base.max_model_len_fit >= 1024:
        out.append(f"set vllm_max_model_len to {base.max_model_len_fit} (the longest context that fits)")
    if kv_cache_dtype == "auto":
        alt = replan(kv_cache_dtype="fp8")
        if alt.max_model_len_fit > base.max_model_len_fit:
            out.append(
                f"set vllm_kv_cache_dtype='fp8': {alt.max_model_len_fit} tokens of context fit"
                + (" (enough)" if alt.fits else "")
            )
    if fp8_alternative:
        if fp8_supported:
            alt = replan(use_fp8_checkpoint=True)
            if alt.max_model_len_fit > base.max_model_len_fit:
                out.append(
                    f"serve the FP8 checkpoint {fp8_alternative}: {alt.max_model_len_fit} tokens of context fit"
                    + (" (enough)" if alt.fits else "")
                )
        else:
            out.append(f"{fp8_alternative} exists but these GPUs lack FP8 support (compute capability 8.9+)")
    for tp in (2, 4, 8):
        if tp > (arch.num_attention_heads or 1) or arch.num_attention_heads % tp:
            continue
        try:
            alt = replan(gpu_count=max(tp, gpu_count), tensor_parallel_size=tp)
        except PlanError:  # a TP that the pipeline's stages leave no GPUs for
            continue
        if alt.fits:
            out.append(f"use {tp} GPUs with vllm_tensor_parallel_size={tp}: {alt.kv_cache_tokens} KV cache tokens")
            break
    return out
