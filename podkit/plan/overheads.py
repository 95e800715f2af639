"""What vLLM keeps per GPU apart from weights and KV cache, by version: the profiling run's activation
peak (the forward pass, the fused-MoE caches, the sampler's logits), non-torch memory, CUDA graphs,
and what the warm-up after KV sizing needs outside the ``gpu_memory_utilization`` budget (and the
two ways to make it fit). Each figure is calibrated on public startup logs
(tests/fixtures/kv_reference_cases.json, each with its source); :mod:`podkit.plan.memory` deducts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from podkit.plan.architecture import Architecture

GIB = 1024**3
BLOCK = 16
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


#: vLLM's fused-MoE kernel runs at most this many tokens per call (``CHUNK_SIZE`` in fused_moe.py).
FUSED_MOE_CHUNK = 32768
#: The oldest vLLM the plan is checked on: the reference set's starts run from 0.8.3 to 0.29.1
#: (tests/fixtures/kv_reference_cases.json). Before 0.8 the V0 engine profiled and sized its cache
#: another way, and no log here shows it: :func:`version_problem` refuses to plan those.
OLDEST_PLANNED = (0, 8)
#: vLLM versions from this one deduct the CUDA-graph estimate from the budget before sizing KV;
#: older ones capture the graphs after, in the memory outside the budget.
GRAPHS_IN_BUDGET = (0, 21)
#: From 0.14 until :data:`SAMPLER_IN_PROFILE` the profiling run computed the logits of the whole
#: batch (``max_num_batched_tokens`` x vocabulary, fp32) beside the forward pass: llm-d-planner's
#: version sweep logged a 5.64 GiB torch peak for Qwen3-14B on vLLM 0.15.0 and 0.16.0 and 2.23 GiB on
#: 0.17.0 and 0.18.0 (tests/fixtures/kv_reference_cases.json), and 0.92 GiB of forward pass, 4.64 of
#: batch logits and 0.08 of the batch's hidden states make 5.64. The 0.10-0.13 launches there fit
#: without the term; 0.14 is taken with the later versions (no log of it: more activation, fewer
#: KV tokens, the safe side).
BATCH_LOGITS_IN_PROFILE = (0, 14)
#: From this version the profiling run ends with the sampler over ``max_num_seqs`` dummy requests
#: (:data:`SAMPLER_PROFILE_BYTES` a logit), which sets the peak unless the forward pass is larger:
#: the same sweep's 2.23 GiB on 0.17 and 0.18, and the 0.19.0 launches of llm-d-planner PR 205, whose
#: torch peak is the same at TP 1, 2 and 4 (Llama-3.1-8B 1.89 GiB, Qwen2.5-7B 2.21, Kimi-Dev-72B
#: 2.29 at TP 2 and 4). The warm-up then follows :data:`SAMPLER_WARMUP_BYTES_FREED`. Until
#: :data:`GRAPHS_IN_BUDGET`: the Qwen3-32B TP 2 launch of vLLM 0.27.1 left 1.66 GiB of overheads in
#: all, less than the sampler term alone.
SAMPLER_IN_PROFILE = (0, 17)
#: From this version tensor parallelism's non-torch memory is ~2.1 GiB a GPU (custom all-reduce and
#: NCCL buffers: 2.06-2.21 GiB in the 0.19.0 logs; 0.4 in 0.10's).
TP_BUFFERS_GROWN = (0, 19)
#: What a logit of the profiling run's sampler holds from :data:`SAMPLER_IN_PROFILE`: the bf16
#: logits, an fp32 copy and the fp32 working tensors of temperature, top-k and top-p. Fitted on
#: two dense vLLM 0.19.0 H100 launches with 1024 sequences (Llama-3.1-8B, 1.89 GiB peak: 14.9 B
#: a logit after the batch's hidden states; Qwen2.5-7B, 2.21 GiB: 14.9 B); the other 0.19 launches
#: in tests/fixtures/kv_reference_cases.json are checked with it (phi-4 15.1, Gemma-2 14.7).
SAMPLER_PROFILE_BYTES = 15
#: Held on each GPU before vLLM takes its budget, outside it (CUDA context, driver; with more than
#: one GPU, NCCL's): the 0.19.0 logs' "worker init memory snapshot" gives non_torch_memory 0.51 GiB
#: on one H100 and 1.43-2.05 GiB a GPU with TP or PP 2 and 4 (llm-d-benchmark PR 1791 found 78.66 of
#: 79.18 GiB free at start).
CUDA_CONTEXT_GIB = 0.5
CUDA_CONTEXT_MULTI_GPU_GIB = 1.4
#: A mixture-of-experts model's GPUs hold one more NCCL communicator there: vLLM creates the
#: expert-parallel group only for MoE models ("Don't create EP group for dense models",
#: ``initialize_model_parallel``), even without expert parallelism. The same 0.19.0 logs give 1.99-2.05
#: GiB a GPU for the four MoE launches at TP 2 and 4 (Mixtral-8x7B, Kimi-VL-A3B, gpt-oss-20b,
#: Llama-4-Scout) and 1.43-1.53 for the six dense ones.
CUDA_CONTEXT_MOE_MULTI_GPU_GIB = 2.0
#: A pipeline without tensor parallelism keeps 0.07 GiB of non-torch memory a stage (no all-reduce
#: buffers): every stage of the vLLM 0.19.0 Llama-3.1-8B PP 2 and PP 4 launches logged it.
PIPELINE_NON_TORCH_GIB = 0.07
#: The CUDA graphs vLLM captures (piecewise, 51 sizes up to 512 tokens), on a card of 70 GiB or more:
#: a base and a share a decoder layer, fitted on the 0.19.0 launches of llm-d-planner PR 205 (Llama-3.1-8B
#: 32 layers 0.91 GiB, Qwen2.5-7B 28 layers 0.87, Llama-3.3-70B 80 layers 1.66-1.85, Qwen2.5-72B 1.54-1.61;
#: vLLM's own estimate there is within 0.3 of the capture). MoE models capture more (gpt-oss-20b: 1.84
#: GiB for 24 layers, with 83 sizes up to 1024): their figure is a floor. Half of it on smaller cards.
GRAPH_BASE_GIB = 0.45
GRAPH_LAYER_GIB = 0.015
#: Quantization methods whose MoE kernels allocate their working tensors inside the call and free
#: them, so that no fused-MoE cache stays beside the profiling run's sampler: vLLM runs MXFP4 experts
#: (gpt-oss) on Hopper with OpenAI's Triton kernels ("workspace are allocated inside the kernel").
#: gpt-oss-20b's 0.19.0 logs give a 2.87 GiB torch peak at TP 1 and TP 2, at utilization 0.9 and 0.95:
#: the sampler's 15 B a logit and the batch's hidden states (2.90), where the caches beside them would
#: make 3.62 and 3.36.
MOE_CACHES_FREED_IN_KERNEL = ("mxfp4",)
#: What the warm-up's forward leaves reserved but unusable, a dummy request (MiB), by quantization
#: method. vLLM runs ``max_num_seqs`` dummy requests through an eager forward and then warms the
#: sampler up without emptying the allocator's cache in between (on purpose, so the sampler's buffers
#: stay: ``compile_or_warm_up_model``); blocks the forward freed stay reserved, and the sampler's
#: large tensors cannot use them. The sampler warm-up's out-of-memory lines measure them: gpt-oss-20b,
#: whose MXFP4 experts allocate inside each call (:data:`MOE_CACHES_FREED_IN_KERNEL`), 1.78 GiB at TP 1
#: and 1.62 at TP 2 with 1024 requests (llm-d-planner PR 205); Qwen3-32B, dense, 0.04 GiB (llm-d-benchmark
#: PR 1791). Taken in proportion to the forward's tokens: gpt-oss-120b started with 6 requests and
#: 0.67 GiB spare (tests/fixtures/kv_reference_cases.json).
WARMUP_HELD_MIB_PER_SEQ = {"mxfp4": 1.6}
#: Bytes per logit the sampler warm-up holds beyond the fp32 logits profiling reserved: the LM
#: head's bf16 logits (2), then top-k/top-p's sort, fp32 values (4) and int64 indices (8), and the
#: fp32 probabilities (4). Bounded by two public H100 launches at utilization 0.95 with 1024
#: dummy requests (tests/fixtures/kv_reference_cases.json): Qwen3-32B (vocabulary 151,936) ran out
#: of memory in the warm-up, Mistral-Small-3.2-24B (131,072) did not.
SAMPLER_WARMUP_BYTES = 18
#: From :data:`BATCH_LOGITS_IN_PROFILE` until :data:`GRAPHS_IN_BUDGET`: what a logit of the sampler
#: warm-up holds in all, in the memory outside the budget plus the profiling peak, which is free
#: again by then. Set on the vLLM 0.17-0.19 launches at utilization 0.95 with 1024 dummy requests on
#: H100s in tests/fixtures/kv_reference_cases.json (llm-d-planner PR 205 and its version sweep), with
#: the plan's own peak, graph and context figures, which match those logs' own for the room: every one
#: that started is let through, the tightest Llama-4-Scout at TP 4 (vocabulary 202,048, 5.10 GiB of room
#: by the plan and by its log: it would refuse above 20.4 B; 20 leaves it 0.08 GiB) and Qwen2.5-72B and
#: Kimi-Dev-72B at TP 2 (22.1 B). The warm-up itself holds at least the profile's 15 B and one more fp32
#: copy (19): gpt-oss-20b's out-of-memory line at TP 1 shows 2.17 GiB live and 786 MiB asked. Its TP 1
#: failure at 0.95 had more room after its graphs (4.48 GiB, its log's figures) than Llama-4-Scout
#: started with (3.97), at the same vocabulary: what it lacked is the blocks its forward left
#: reserved (:data:`WARMUP_HELD_MIB_PER_SEQ`), which its out-of-memory line measures.
SAMPLER_WARMUP_BYTES_FREED = 20


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def version_problem(version: str) -> str | None:
    """Why the plan cannot answer for this vLLM (None when it can): a version older than every
    start it is checked on (:data:`OLDEST_PLANNED`). Newer versions are planned as the newest known."""
    major_minor = _major_minor(version)
    if len(major_minor) == 2 and major_minor < OLDEST_PLANNED:
        oldest = ".".join(map(str, OLDEST_PLANNED))
        return (
            f"vLLM {version} is older than any start the plan is checked on (from {oldest}): its memory "
            f"overheads are unknown; serve vLLM {oldest} or newer (podkit_vllm_package)"
        )
    return None


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


#: Model types whose vLLM config raises the largest captured batch from 512 to 1024 tokens
#: (vllm/model_executor/models/config.py: "Overriding max cuda graph capture size to 1024 for
#: performance", logged for gpt-oss-20b), which doubles the graphs' figure: gpt-oss-20b's 83 graphs
#: took 1.84 GiB at TP 1 and 1.55 at TP 2, where 51 graphs of its 24 layers would be 0.81.
LARGE_CAPTURE_MODEL_TYPES = ("gpt_oss",)


def graph_gib(arch: Architecture, gpu_memory_gib: float) -> float:
    """The CUDA graphs' memory for this model: :data:`GRAPH_BASE_GIB` and :data:`GRAPH_LAYER_GIB` a
    decoder layer on a card of 70 GiB or more, half of it on a smaller one, twice it where vLLM
    captures batches of up to 1024 tokens (:data:`LARGE_CAPTURE_MODEL_TYPES`)."""
    full = GRAPH_BASE_GIB + GRAPH_LAYER_GIB * arch.num_layers
    full *= 2 if arch.model_type in LARGE_CAPTURE_MODEL_TYPES else 1
    return round(full if gpu_memory_gib >= 70 else full / 2, 2)


@dataclass(frozen=True)
class Overheads:
    """Per-GPU memory vLLM V1 keeps apart from weights and KV cache, for one vLLM version.

    Calibrated on tests/fixtures/kv_reference_cases.json: the forward pass of the profiling run
    grows with ``max_num_batched_tokens`` by about 10 x hidden + 4 x (active) intermediate bytes per
    token (Qwen3-8B: 2048 -> 8192 batched tokens cost 0.51 GiB); a mixture-of-experts layer holds the
    fused-MoE kernel's caches instead (:func:`fused_moe_gib`). What follows it depends on the version
    (``profile``): before 0.14 the sampler's fp32 logits for ``max_num_seqs`` dummy requests, added
    (``"forward"``); 0.14-0.16 the whole batch's logits, added (``"batch_logits"``); 0.17-0.20 the
    sampler's working tensors, which set the peak unless the forward pass is larger, the fused-MoE
    caches staying beside them unless the experts' kernels free theirs
    (:data:`MOE_CACHES_FREED_IN_KERNEL`) (``"sampler"``). Non-torch memory is ~0.15-0.25 GiB on one GPU and
    grows with tensor parallelism (NCCL / custom all-reduce buffers: ~0.4 GiB in 0.10, ~2.1 GiB in
    0.19+ on H100); from about 0.21 the CUDA-graph estimate is deducted too, before that the graphs
    are captured outside the budget (``graph_capture``).
    """

    non_torch_tp1: float = 0.25
    non_torch_tp_many: float = 2.1
    cuda_graphs: float = 1.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    graph_capture: float = 1.0  # what capturing the graphs takes, deducted from the budget or not
    #: a pipeline's last stage holds the whole batch's logits while profiling (seen in ~0.9.2, not in 0.19)
    last_stage_batch_logits: bool = False
    #: bytes a logit of the profiling run's sampler holds (``max_num_seqs`` x vocabulary logits)
    sampler_bytes: int = 4
    profile: str = "forward"  # forward | batch_logits | sampler: what the profiling peak holds
    #: the graphs' figure scales with the model's layers (:func:`graph_gib`) unless given
    graphs_per_model: bool = True

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
        grown = major_minor >= TP_BUFFERS_GROWN
        if major_minor < GRAPHS_IN_BUDGET:
            large = big and major_minor >= (0, 11)
            profile = "forward"
            if major_minor >= SAMPLER_IN_PROFILE:
                profile = "sampler"
            elif major_minor >= BATCH_LOGITS_IN_PROFILE:
                profile = "batch_logits"
            return cls(
                0.25 if grown else 0.15,
                2.1 if grown else 0.4,
                0.0,
                max_num_batched_tokens or (8192 if large else 2048),
                max_num_seqs or (1024 if large else 256),
                graphs,
                last_stage_batch_logits=major_minor < BATCH_LOGITS_IN_PROFILE,
                sampler_bytes=SAMPLER_PROFILE_BYTES if profile == "sampler" else 4,
                profile=profile,
            )
        return cls(
            0.25,
            2.1,
            graphs,
            max_num_batched_tokens or (8192 if big else 2048),
            max_num_seqs or (1024 if big else 256),
            graphs,
        )

    def for_model(self, arch: Architecture, gpu_memory_gib: float) -> Overheads:
        """These overheads with the CUDA graphs of this model (:func:`graph_gib`) in place of the
        flat figure: in the budget from :data:`GRAPHS_IN_BUDGET`, captured after it before."""
        if not self.graphs_per_model:
            return self
        graphs = graph_gib(arch, gpu_memory_gib)
        return replace(self, cuda_graphs=graphs if self.cuda_graphs else 0.0, graph_capture=graphs)

    def _layers_gib(self, arch: Architecture, tp: int) -> float:
        """The forward pass over ``max_num_batched_tokens``: the residual stream and attention
        (10 x hidden bytes a token), then the MLP: a dense one's 4 x intermediate bytes, or a
        MoE layer's shared experts (dense) and the fused-MoE caches."""
        tokens = self.max_num_batched_tokens
        if arch.is_moe:
            dense = 10 * arch.hidden_size + 4 * arch.shared_intermediate_size / tp
            return tokens * dense / GIB + fused_moe_gib(arch, tp, tokens)
        return tokens * (10 * arch.hidden_size + 4 * arch.intermediate_size / tp) / GIB

    def activation_gib(self, arch: Architecture, tp: int, last: bool = True) -> float:
        """The profiling run's torch peak on a GPU of the last (or only) pipeline stage, or with
        ``last=False`` of an earlier one, which runs its layers and sends the hidden states on: the
        0.19.0 PP 2 and PP 4 launches of Llama-3.1-8B logged 1.05-1.1 GiB there and 2.01 on the last."""
        forward = self._layers_gib(arch, tp)
        if not last:
            return forward
        tokens, seqs = self.max_num_batched_tokens, self.max_num_seqs
        hidden_states = tokens * arch.hidden_size * 2 / GIB  # the batch's last hidden states, bf16
        if self.profile == "sampler":
            moe = 0.0 if arch.quant_method in MOE_CACHES_FREED_IN_KERNEL else fused_moe_gib(arch, tp, tokens)
            sampler = hidden_states + seqs * arch.vocab_size * self.sampler_bytes / GIB
            return moe + max(forward - moe, sampler)
        if self.profile == "batch_logits":
            return forward + hidden_states + tokens * arch.vocab_size * 4 / GIB
        return forward + seqs * arch.vocab_size * self.sampler_bytes / GIB

    def stage_activation_gib(self, arch: Architecture, tp: int, last: bool) -> float:
        """One pipeline stage's activation peak (:meth:`activation_gib`). Before 0.14 a last
        stage's profiling run held the whole batch's logits too (``max_num_batched_tokens`` x
        vocabulary in fp32): fitted on the PP 2 launch of DeepSeek-V2-Lite (vLLM ~0.9.2) in
        tests/fixtures/kv_reference_cases.json, whose last stage logged 0.8 GiB less KV memory than
        the first while holding fewer layers. From 0.14 every last stage holds what a single GPU's
        profile holds: the 0.19.0 Llama-3.1-8B PP 2 launch's last stage logged 2.01 GiB, where the
        batch's logits alone would be 3.9."""
        batch = self.max_num_batched_tokens * 4 * arch.vocab_size if last and self.last_stage_batch_logits else 0
        return self.activation_gib(arch, tp, last) + batch / GIB

    def non_torch_gib(self, tp: int, pp: int = 1) -> float:
        if tp == 1:
            return self.non_torch_tp1 if pp == 1 else PIPELINE_NON_TORCH_GIB
        return self.non_torch_tp_many


def context_gib(tp: int, pp: int = 1, version: str = "0.19.0", moe: bool = False) -> float:
    """What the CUDA context (and NCCL's, with more than one GPU; one more communicator for a
    mixture of experts, ``moe``) holds outside the budget. The multi-GPU figures are measured on 0.19
    only (H100s); older launches on smaller cards started with less room than they leave
    (DeepSeek-V2-Lite TP 2 x PP 2 on L4s, ~0.9.2), so before :data:`TP_BUFFERS_GROWN` one GPU's is
    taken."""
    if tp * pp == 1 or _major_minor(version) < TP_BUFFERS_GROWN:
        return CUDA_CONTEXT_GIB
    return CUDA_CONTEXT_MOE_MULTI_GPU_GIB if moe else CUDA_CONTEXT_MULTI_GPU_GIB


def start_refusal(gpu_memory_gib: float, gpu_memory_utilization: float, context: float) -> tuple[str, str] | None:
    """(why, fix) when vLLM would refuse to start, None when it starts: its first check
    (``request_memory`` in vllm/v1/worker/utils.py) wants ``gpu_memory_utilization`` of the card free
    when it starts, where the CUDA context (and NCCL's communicators) already hold ``context``
    (:func:`context_gib`): "Free memory on device ... is less than desired GPU memory utilization".
    The Qwen3-8B launch at 0.9764 on an RTX A5000 in tests/fixtures/kv_reference_cases.json started
    with about 0.06 GiB to spare (the card's 23.55 GiB as the case infers it)."""
    free = gpu_memory_gib - context
    wanted = gpu_memory_gib * gpu_memory_utilization
    if wanted <= free:
        return None
    share = math.floor(free / gpu_memory_gib * 100) / 100
    return (
        f"vLLM would refuse to start: it wants {wanted:.2f} GiB of each GPU (utilization "
        f"{gpu_memory_utilization}), but about {context:.1f} GiB is held before it starts (the CUDA context"
        f"{' and NCCL' if context > CUDA_CONTEXT_GIB else ''}), which leaves {free:.2f} of {gpu_memory_gib:.2f} GiB",
        f"set vllm_gpu_memory_utilization to {share} or lower",
    )


def warmup_need_gib(arch: Architecture, overheads: Overheads, version: str) -> tuple[float, float]:
    """(CUDA graphs, requests): what the warm-up after KV sizing needs outside the budget.

    Before 0.21 vLLM sizes the KV cache without the CUDA graphs, captures them afterwards, then
    runs ``max_num_seqs`` dummy requests through an eager forward and the sampler, whose working
    tensors (:data:`SAMPLER_WARMUP_BYTES` a logit, :data:`SAMPLER_WARMUP_BYTES_FREED` where the
    profiling peak is free again) and the blocks the forward leaves reserved
    (:data:`WARMUP_HELD_MIB_PER_SEQ`) must fit in the memory the budget leaves. From 0.21 the graphs
    are deducted inside the budget and the warm-up needs nothing outside it: the Qwen3-8B launch at
    utilization 0.9764 on an RTX A5000 in tests/fixtures/kv_reference_cases.json had 0.06 GiB outside
    and started."""
    if _major_minor(version) >= GRAPHS_IN_BUDGET:
        return 0.0, 0.0
    per_logit = SAMPLER_WARMUP_BYTES_FREED if overheads.profile != "forward" else SAMPLER_WARMUP_BYTES
    sampler = overheads.max_num_seqs * arch.vocab_size * per_logit / GIB
    forward_tokens = min(overheads.max_num_seqs, overheads.max_num_batched_tokens)
    held = forward_tokens * WARMUP_HELD_MIB_PER_SEQ.get(arch.quant_method, 0.0) / 1024
    return overheads.graph_capture, sampler + held


def warmup_room_gib(
    gpu_memory_gib: float, gpu_memory_utilization: float, freed_gib: float = 0.0, context: float = CUDA_CONTEXT_GIB
) -> float:
    """The memory outside the ``gpu_memory_utilization`` budget, less what the CUDA context holds
    (``context``: :func:`context_gib`), plus ``freed_gib``: the profiling peak, free again when the
    warm-up runs, counted where it held logits (:func:`warmup_freed_gib`)."""
    return gpu_memory_gib * (1 - gpu_memory_utilization) - context + freed_gib


def warmup_freed_gib(overheads: Overheads, arch: Architecture, tp: int, version: str) -> float:
    """The profiling peak the warm-up may use again: counted where it held logits (from 0.14) and
    the warm-up follows :data:`SAMPLER_WARMUP_BYTES_FREED`."""
    if overheads.profile != "forward" and _major_minor(version) < GRAPHS_IN_BUDGET:
        return overheads.activation_gib(arch, tp)
    return 0.0


#: What a warm-up fix leaves spare: the CUDA graphs took up to this much more than the plan's
#: :func:`graph_gib` in the public logs that ran out of memory in the warm-up (Qwen3-32B: 1.86 GiB
#: against 1.41, llm-d-benchmark PR 1791; gpt-oss-20b TP 1: 1.84 against 1.62, llm-d-planner PR 205),
#: so a fix that only just fits the plan's figures would fail there again.
WARMUP_FIX_MARGIN_GIB = 0.45


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
    context: float = CUDA_CONTEXT_GIB,
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
            f"set vllm_extra_args ['--max-num-seqs', '{seqs}']: the warm-up's dummy requests then need "
            f"{seqs * per_seq:.2f} GiB and the KV cache keeps its size"
        )
    need = graphs + sampler + context + WARMUP_FIX_MARGIN_GIB - freed
    share = math.floor((1 - need / gpu_memory_gib) * 100) / 100
    left = available_gib - (gpu_memory_utilization - share) * gpu_memory_gib
    if 0 < share < gpu_memory_utilization and left > 0:
        tokens = math.floor(left * GIB / kv_bytes_per_token / BLOCK) * BLOCK
        out.append(f"set vllm_gpu_memory_utilization to {share}: the warm-up fits, {tokens} KV cache tokens remain")
    return out
