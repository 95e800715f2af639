"""What vLLM keeps per GPU apart from weights and KV cache, by version: the profiling run's activation
peak (the forward pass, the fused-MoE caches, the sampler's logits), non-torch memory, CUDA graphs,
and what the warm-up after KV sizing needs outside the ``gpu_memory_utilization`` budget (and the
two ways to make it fit). Each figure is calibrated on public startup logs
(tests/fixtures/kv_reference_cases.json, each with its source); :mod:`podkit.plan.memory` deducts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from podkit.plan.architecture import Architecture

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
