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
:func:`make_plan` puts the memory verdict, the checkpoint choice and the disk check into one
:class:`Plan`. The GPU table is in :mod:`podkit.plan.gpus`, what is read from a config.json in
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

GIB = 1024**3
BLOCK = 16
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


#: vLLM's fused-MoE kernel runs at most this many tokens per call (``CHUNK_SIZE`` in fused_moe.py).
FUSED_MOE_CHUNK = 32768
#: vLLM versions from this one deduct the CUDA-graph estimate from the budget before sizing KV;
#: older ones capture the graphs after, in the memory outside the budget.
GRAPHS_IN_BUDGET = (0, 21)
#: From this version the profiling run's sampler holds :data:`SAMPLER_PROFILE_BYTES` a logit (until
#: :data:`GRAPHS_IN_BUDGET`: the Qwen3-32B TP 2 launch of vLLM 0.27.1 left 1.66 GiB of overheads in
#: all, less than 12 B a logit alone), tensor parallelism's non-torch memory is ~2.1 GiB, and the
#: warm-up follows :data:`SAMPLER_WARMUP_BYTES_FREED` (all measured on vLLM 0.19.0 DEBUG logs).
SAMPLER_IN_PROFILE = (0, 19)
#: What a logit of the profiling run's sampler holds from :data:`SAMPLER_IN_PROFILE`: the fp32
#: logits and two more fp32 copies as it applies temperature, top-k and top-p. Fitted on the nine
#: vLLM 0.19.0 H100 launches of llm-d-planner PR 205 (tests/fixtures/kv_reference_cases.json), whose
#: DEBUG lines log the torch peak apart: gpt-oss-20b's is 2.87 GiB at TP 1 and at TP 2 alike, so
#: most of it is split by no TP, and the peak less the forward pass is 2.5 to 3.4 fp32 logits
#: for the text-only models.
SAMPLER_PROFILE_BYTES = 12
#: Held on each GPU before vLLM takes its budget (CUDA context, driver): the H100 launch of
#: llm-d-benchmark PR 1791 found 78.66 of 79.18 GiB free at start.
CUDA_CONTEXT_GIB = 0.5
#: Bytes per logit the sampler warm-up holds beyond the fp32 logits profiling reserved: the LM
#: head's bf16 logits (2), then top-k/top-p's sort, fp32 values (4) and int64 indices (8), and the
#: fp32 probabilities (4). Bounded by two public H100 launches at utilization 0.95 with 1024
#: dummy requests (tests/fixtures/kv_reference_cases.json): Qwen3-32B (vocabulary 151,936) ran out
#: of memory in the warm-up, Mistral-Small-3.2-24B (131,072) did not.
SAMPLER_WARMUP_BYTES = 18
#: From :data:`SAMPLER_IN_PROFILE` until :data:`GRAPHS_IN_BUDGET`: what a logit of the sampler
#: warm-up holds in all, in the memory outside the budget plus the profiling peak, which is free
#: again by then. Set on llm-d-planner PR 205's vLLM 0.19.0 launches at utilization 0.95 with 1024
#: dummy requests on H100s (tests/fixtures/kv_reference_cases.json), with the plan's own peak and
#: graph figures: 22 B refuses none of the launches that started (Gemma's 256,000-token vocabulary
#: is the tightest). The two gpt-oss-20b launches whose warm-up ran out of memory lacked 0.1 to
#: 0.3 GiB by their logged figures, less than the plan's graph estimate can tell (their graphs took
#: up to 0.84 GiB more than it counts): the plan lets them through (known misses in the test).
#: 30 B would catch them and refuse eight launches that started.
SAMPLER_WARMUP_BYTES_FREED = 22


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def fused_moe_gib(arch: Architecture, tp: int, tokens: int) -> float:
    """The caches one fused-MoE call allocates (``fused_experts_impl`` in vLLM's fused_moe.py):
    ``(M, top_k, 2N)`` for gate and up, ``(M * top_k, N)`` after the activation and
    ``(M, top_k, hidden)`` for down, in the activation dtype (2 bytes), with N one expert's
    intermediate size over TP and M the batch (at most :data:`FUSED_MOE_CHUNK`). Profiling runs
    ``max_num_batched_tokens`` through it, so the peak holds them; 0 for a dense model."""
    if not arch.is_moe:
        return 0.0
    per_token = arch.experts_per_token * (3 * arch.moe_intermediate_size / tp + arch.hidden_size) * 2
    return min(tokens, FUSED_MOE_CHUNK) * per_token / GIB


@dataclass(frozen=True)
class Overheads:
    """Per-GPU memory vLLM V1 keeps apart from weights and KV cache, for one vLLM version.

    Calibrated on tests/fixtures/kv_reference_cases.json: the activation peak of
    the profiling run grows with ``max_num_batched_tokens`` by about
    10 x hidden + 4 x (active) intermediate bytes per token (Qwen3-8B: 2048 -> 8192
    batched tokens cost 0.51 GiB); a mixture-of-experts layer holds the fused-MoE
    kernel's caches instead (:func:`fused_moe_gib`), plus the sampler's logits for
    ``max_num_seqs`` dummy requests (``sampler_bytes`` a logit: fp32 alone, or three fp32 copies
    in 0.19-0.20, :data:`SAMPLER_PROFILE_BYTES`); non-torch memory is ~0.15-0.25 GiB on one GPU and grows with
    tensor parallelism (NCCL / custom all-reduce buffers: ~0.4 GiB in 0.10, ~2.1 GiB
    in 0.19+ on H100); from about 0.21 the CUDA-graph estimate is deducted too, before
    that the graphs are captured outside the budget (``graph_capture``).
    """

    non_torch_tp1: float = 0.25
    non_torch_tp_many: float = 2.1
    cuda_graphs: float = 1.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    graph_capture: float = 1.0  # what capturing the graphs takes, deducted from the budget or not
    #: a pipeline's last stage holds the whole batch's logits while profiling (seen in ~0.9.2, not in 0.27.1)
    last_stage_batch_logits: bool = False
    #: bytes a logit of the profiling run's sampler holds (``max_num_seqs`` x vocabulary logits)
    sampler_bytes: int = 4

    @classmethod
    def for_version(
        cls,
        version: str,
        gpu_memory_gib: float = 80.0,
        max_num_batched_tokens: int | None = None,
        max_num_seqs: int | None = None,
    ) -> Overheads:
        """vLLM's defaults for the card: from 0.11 a card of 70 GiB or more gets 8192 batched
        tokens and 1024 sequences (``get_batch_defaults``; vLLM keeps the A100 at 2048 and 256,
        pass them for it), a smaller one 2048 and 256."""
        major_minor = _major_minor(version)
        big = gpu_memory_gib >= 70
        graphs = 1.0 if big else 0.5
        recent = major_minor >= SAMPLER_IN_PROFILE
        if major_minor < GRAPHS_IN_BUDGET:
            large = big and major_minor >= (0, 11)
            return cls(
                0.25 if recent else 0.15,
                2.1 if recent else 0.4,
                0.0,
                max_num_batched_tokens or (8192 if large else 2048),
                max_num_seqs or (1024 if large else 256),
                graphs,
                last_stage_batch_logits=True,
                sampler_bytes=SAMPLER_PROFILE_BYTES if recent else 4,
            )
        return cls(
            0.25,
            2.1,
            graphs,
            max_num_batched_tokens or (8192 if big else 2048),
            max_num_seqs or (1024 if big else 256),
            graphs,
        )

    def _layers_gib(self, arch: Architecture, tp: int) -> float:
        """The forward pass over ``max_num_batched_tokens``: the residual stream and attention
        (10 x hidden bytes a token), then the MLP: a dense one's 4 x intermediate bytes, or a
        MoE layer's shared experts (dense) and the fused-MoE caches."""
        tokens = self.max_num_batched_tokens
        if arch.is_moe:
            dense = 10 * arch.hidden_size + 4 * arch.shared_intermediate_size / tp
            return tokens * dense / GIB + fused_moe_gib(arch, tp, tokens)
        return tokens * (10 * arch.hidden_size + 4 * arch.intermediate_size / tp) / GIB

    def activation_gib(self, arch: Architecture, tp: int) -> float:
        logits = self.max_num_seqs * arch.vocab_size * self.sampler_bytes
        return self._layers_gib(arch, tp) + logits / GIB

    def stage_activation_gib(self, arch: Architecture, tp: int, last: bool) -> float:
        """One pipeline stage's activation peak. Every stage runs its layers over the batch; only
        the last computes logits. Before 0.21 its profiling run held them for the whole batch too
        (``max_num_batched_tokens`` x vocabulary in fp32): fitted on the PP 2 launch of
        DeepSeek-V2-Lite (vLLM ~0.9.2) in tests/fixtures/kv_reference_cases.json, whose last stage
        logged 0.8 GiB less KV memory than the first while holding fewer layers. The PP 2 launch of
        Qwen3-32B there (vLLM 0.27.1) rules that term out for recent versions: its pool needs at
        least 6.91 GiB on the last stage, where the term would leave 0.47. The change lies between
        the two; it is taken at 0.21, where podkit's model of the profile changes anyway."""
        batch = self.max_num_batched_tokens if self.last_stage_batch_logits else 0
        logits = (batch * 4 + self.max_num_seqs * self.sampler_bytes) * arch.vocab_size if last else 0
        return self._layers_gib(arch, tp) + logits / GIB

    def non_torch_gib(self, tp: int) -> float:
        return self.non_torch_tp1 if tp == 1 else self.non_torch_tp_many


def warmup_need_gib(arch: Architecture, overheads: Overheads, version: str) -> tuple[float, float]:
    """(CUDA graphs, sampler): what the warm-up after KV sizing needs outside the budget.

    Before 0.21 vLLM sizes the KV cache without the CUDA graphs, captures them afterwards, then
    warms the sampler up with ``max_num_seqs`` dummy requests, whose working tensors
    (:data:`SAMPLER_WARMUP_BYTES` a logit) exceed what profiling reserved; all of it must fit in
    the memory the budget leaves. From 0.21 the graphs are deducted inside the budget and the
    warm-up needs nothing outside it: the Qwen3-8B launch at utilization 0.9764 on an RTX A5000
    in tests/fixtures/kv_reference_cases.json had 0.06 GiB outside and started."""
    if _major_minor(version) >= GRAPHS_IN_BUDGET:
        return 0.0, 0.0
    per_logit = SAMPLER_WARMUP_BYTES_FREED if _major_minor(version) >= SAMPLER_IN_PROFILE else SAMPLER_WARMUP_BYTES
    return overheads.graph_capture, overheads.max_num_seqs * arch.vocab_size * per_logit / GIB


def warmup_room_gib(gpu_memory_gib: float, gpu_memory_utilization: float, freed_gib: float = 0.0) -> float:
    """The memory outside the ``gpu_memory_utilization`` budget, less what the CUDA context holds,
    plus ``freed_gib``: the profiling peak, free again when the warm-up runs, which from
    :data:`SAMPLER_IN_PROFILE` is counted (:data:`SAMPLER_WARMUP_BYTES_FREED`)."""
    return gpu_memory_gib * (1 - gpu_memory_utilization) - CUDA_CONTEXT_GIB + freed_gib


def warmup_freed_gib(overheads: Overheads, arch: Architecture, tp: int, version: str) -> float:
    """The profiling peak the warm-up may use again: counted from :data:`SAMPLER_IN_PROFILE` only."""
    if _major_minor(version) >= SAMPLER_IN_PROFILE:
        return overheads.activation_gib(arch, tp)
    return 0.0


#: What a warm-up fix leaves spare: the CUDA graphs took up to this much more than the plan's
#: 1.0 GiB in the public logs that ran out of memory in the warm-up (Qwen3-32B: 1.86 GiB,
#: llm-d-benchmark PR 1791; gpt-oss-20b TP 1: 1.84, llm-d-planner PR 205), so a fix that only just
#: fits the plan's figures would fail there again.
WARMUP_FIX_MARGIN_GIB = 0.86


def warmup_fixes(
    *,
    max_num_seqs: int,
    graphs: float,
    sampler: float,
    room: float,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
    available_gib: float,
    kv_bytes_per_token: int,
    freed: float = 0.0,
    freed_per_seq: float = 0.0,
) -> list[str]:
    """The two ways to make the warm-up fit, the one that keeps the KV cache first: fewer dummy
    requests (``--max-num-seqs``, which also caps the requests served at once), or a lower
    utilization (more memory outside the budget, less KV cache). ``room`` counts ``freed``, the
    profiling peak, of which ``freed_per_seq`` a request shrinks with fewer requests."""
    out = []
    per_seq = sampler / max_num_seqs
    net = per_seq - freed_per_seq
    fixed = room - freed_per_seq * max_num_seqs  # what the room would be with no request at all
    seqs = int((fixed - graphs - WARMUP_FIX_MARGIN_GIB) / net) // 8 * 8 if net > 0 else 0
    if seqs >= 8:
        out.append(
            f"set vllm_extra_args ['--max-num-seqs', '{seqs}']: the sampler warm-up then needs "
            f"{seqs * per_seq:.2f} GiB and the KV cache keeps its size"
        )
    need = graphs + sampler + CUDA_CONTEXT_GIB + WARMUP_FIX_MARGIN_GIB - freed
    share = math.floor((1 - need / gpu_memory_gib) * 100) / 100
    left = available_gib - (gpu_memory_utilization - share) * gpu_memory_gib
    if 0 < share < gpu_memory_utilization and left > 0:
        tokens = math.floor(left * GIB / kv_bytes_per_token / BLOCK) * BLOCK
        out.append(f"set vllm_gpu_memory_utilization to {share}: the warm-up fits, {tokens} KV cache tokens remain")
    return out


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
    fp8_weight_bytes: int | None = None,
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
    ov = overheads or Overheads.for_version(vllm_version, gpu_memory_gib, max_num_batched_tokens, max_num_seqs)
    weights = weight_bytes / tp
    if runtime_fp8:
        weights = weights / 2  # linear layers go to 8 bit; the download does not shrink
    kv_bytes = arch.kv_bytes_per_token(tp, DTYPE_BYTES[kv_cache_dtype])
    activation = ov.activation_gib(arch, tp)
    non_torch = ov.non_torch_gib(tp)
    graphs = ov.cuda_graphs
    if pp > 1:
        non_torch = ov.non_torch_tp_many  # stages talk over NCCL as TP ranks do
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
    graphs_out, sampler = warmup_need_gib(arch, ov, vllm_version)
    freed = warmup_freed_gib(ov, arch, tp, vllm_version)
    room = warmup_room_gib(gpu_memory_gib, gpu_memory_utilization, freed)
    fixes: list[str] = []
    need = graphs_out + sampler
    short = fits and need > room
    if short:
        fits = False
        reason = (
            f"the KV cache fits ({tokens} tokens), but the warm-up after it needs "
            f"{need:.2f} GiB outside the gpu_memory_utilization budget (CUDA graphs "
            f"{graphs_out:.2f} GiB, the sampler's {ov.max_num_seqs} dummy requests {sampler:.2f} GiB) "
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


#: Kept free on the volume beyond the download itself.
DISK_HEADROOM_BYTES = 2 * GIB


@dataclass(frozen=True)
class ChosenCheckpoint:
    """The checkpoint a plan serves (the FP8 sibling when it was chosen)."""

    repo: str
    revision: str | None
    is_fp8: bool
    quantization: str | None
    local: bool


#: Only a plan for GPUs has these; a host without GPUs has no VRAM overheads, and its dict leaves them out.
_GPU_ONLY = ("activation_gib", "non_torch_gib", "cuda_graph_gib", "max_num_seqs", "warmup_gib", "warmup_room_gib")


@dataclass(frozen=True)
class Plan:
    """The whole plan for one server: what it serves and downloads, and whether that fits.

    On a host without GPUs the memory fields are None (the CPU build serves from host
    memory). :meth:`as_dict` is the ``plan --json`` object.
    """

    vllm_version: str
    checkpoint: ChosenCheckpoint
    fp8_alternative: str | None  # its repo
    hardware: Hardware | None
    download_bytes: int
    download_files: tuple[str, ...]
    missing_bytes: int  # what the hub cache does not hold yet
    disk_free_bytes: int | None
    disk_fits: bool | None  # None: the free space is unknown
    tool_call_parser: str | None
    reasoning_parser: str | None
    family: str | None
    chat_template: str | None
    weights_gib_per_gpu: float | None
    kv_bytes_per_token: int | None
    activation_gib: float | None
    non_torch_gib: float | None
    cuda_graph_gib: float | None
    available_kv_cache_gib: float | None
    kv_cache_tokens: int | None
    max_model_len: int | str | None
    max_concurrency: float | None
    max_model_len_fit: int | None
    fits: bool
    reason: str
    suggestions: tuple[str, ...]
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    stages: tuple[Stage, ...] = ()  # per pipeline stage (the KV pool is the smallest's)
    max_num_seqs: int | None = None
    warmup_gib: float | None = None  # needed outside the budget after KV sizing
    warmup_room_gib: float | None = None  # left there

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: nested dicts, lists; no overheads on a host without GPUs."""
        out = asdict(self)
        out["download_files"], out["suggestions"] = list(self.download_files), list(self.suggestions)
        out["stages"] = list(out["stages"])
        if self.activation_gib is None:
            for key in _GPU_ONLY:
                del out[key]
        return out


def make_plan(
    checkpoint,
    hardware: Hardware | None,
    *,
    fp8_alternative=None,
    prefer_fp8: bool = True,
    tensor_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | str = "auto",
    kv_cache_dtype: str = "auto",
    runtime_fp8: bool = False,
    disk_free_bytes: int | None = None,
    cached_bytes: int | dict[str, int] = 0,
    family=None,
    vllm_version: str = "0.33.0",
    pipeline_parallel_size: int = 1,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Plan:
    """The whole plan (the ``cli.py plan --json`` object and the deploy's preflight)."""
    chosen = checkpoint
    if fp8_alternative is not None and prefer_fp8 and hardware and hardware.fp8_supported and not checkpoint.is_fp8:
        chosen = fp8_alternative
    memory = None
    if hardware is not None and hardware.gpu_count > 0:
        arch = Architecture.from_config(chosen.config)

        def replan(use_fp8_checkpoint=False, **changes):
            ckpt = fp8_alternative if use_fp8_checkpoint and fp8_alternative else chosen
            args = dict(
                weight_bytes=ckpt.weight_bytes,
                gpu_memory_gib=hardware.gpu_memory_gib,
                gpu_count=hardware.gpu_count,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                kv_cache_dtype=kv_cache_dtype,
                runtime_fp8=runtime_fp8,
                vllm_version=vllm_version,
                pipeline_parallel_size=pipeline_parallel_size,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
            )
            args.update(changes)
            return plan_memory(arch, **args)

        memory = replan()
        memory.suggestions = suggestions(
            arch,
            memory,
            replan,
            gpu_count=hardware.gpu_count,
            kv_cache_dtype=kv_cache_dtype,
            fp8_alternative=None if chosen is fp8_alternative else (fp8_alternative.repo if fp8_alternative else None),
            fp8_supported=hardware.fp8_supported,
        )
        if (
            runtime_fp8 is False
            and not chosen.is_fp8
            and fp8_alternative is None
            and not memory.fits
            and hardware.fp8_supported
        ):
            memory.suggestions.append(
                "no FP8 checkpoint was found; vllm_extra_args ['--quantization', 'fp8'] quantizes at load "
                "(halves weight memory, not the download)"
            )
    download = chosen.download_bytes
    cached = cached_bytes.get(chosen.repo, 0) if isinstance(cached_bytes, dict) else cached_bytes
    missing = 0 if chosen.local else max(0, download - cached)
    disk_fits = None if disk_free_bytes is None else missing + DISK_HEADROOM_BYTES <= disk_free_bytes
    if memory is not None and hardware is not None:  # a memory plan is made for GPUs only
        verdict = dict(
            memory.as_dict(),
            stages=tuple(memory.stages),
            tensor_parallel_size=tensor_parallel_size or max(1, hardware.gpu_count // pipeline_parallel_size),
        )
    else:
        verdict = dict.fromkeys(
            (
                "weights_gib_per_gpu",
                "kv_bytes_per_token",
                *_GPU_ONLY,
                "available_kv_cache_gib",
                "kv_cache_tokens",
                "max_concurrency",
                "max_model_len_fit",
            )
        )
        verdict.update(
            fits=True,
            reason="no GPU: the CPU build serves from host memory (no VRAM plan)",
            suggestions=[],
            max_model_len=None if max_model_len == "auto" else max_model_len,
            tensor_parallel_size=1,
            pipeline_parallel_size=pipeline_parallel_size,
        )
    if disk_fits is False and disk_free_bytes is not None:  # no free space known: no verdict
        need = (missing + DISK_HEADROOM_BYTES) / 1e9
        fix = []
        if fp8_alternative is not None and chosen is not fp8_alternative:
            fix.append(f"use the FP8 checkpoint {fp8_alternative.repo} ({fp8_alternative.download_bytes / 1e9:.1f} GB)")
        fix += [f"grow the volume to at least {need:.0f} GB free", "remove other cached models (podkit cache clean)"]
        verdict.update(
            fits=False,
            suggestions=fix + verdict["suggestions"],
            reason=f"{chosen.repo} needs {missing / 1e9:.1f} GB to download (+{DISK_HEADROOM_BYTES / 1e9:.1f} GB "
            f"headroom) but the volume has {disk_free_bytes / 1e9:.1f} GB free",
        )
    verdict["suggestions"] = tuple(verdict["suggestions"])
    return Plan(
        vllm_version=vllm_version,
        checkpoint=ChosenCheckpoint(chosen.repo, chosen.revision, chosen.is_fp8, chosen.quantization, chosen.local),
        fp8_alternative=fp8_alternative.repo if fp8_alternative is not None else None,
        hardware=hardware,
        download_bytes=download,
        download_files=tuple(chosen.download),
        missing_bytes=missing,
        disk_free_bytes=disk_free_bytes,
        disk_fits=disk_fits,
        tool_call_parser=family[1].tool_call_parser if family else None,
        reasoning_parser=family[1].reasoning_parser if family else None,
        family=family[0] if family else None,
        chat_template=family[1].chat_template if family else None,
        **verdict,
    )
