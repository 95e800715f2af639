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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1024**3
BLOCK = 16
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}

#: Card name -> (memory per GPU as torch reports it, GiB; compute capability).
GPUS: dict[str, tuple[float, str]] = {
    "H200": (139.8, "9.0"),
    "H100 80GB": (79.19, "9.0"),
    "H100 NVL": (93.1, "9.0"),
    "A100 80GB": (79.15, "8.0"),
    "A100 40GB": (39.39, "8.0"),
    "L40S": (44.39, "8.9"),
    "L40": (44.39, "8.9"),
    "L4": (22.05, "8.9"),
    "A10": (22.07, "8.6"),
    "A6000": (47.54, "8.6"),
    "RTX 6000 Ada": (47.5, "8.9"),
    "RTX PRO 6000 96GB": (94.97, "12.0"),
    "RTX 5090": (31.36, "12.0"),
    "RTX 4090": (23.64, "8.9"),
    "RTX 3090": (23.69, "8.6"),
}


def supports_fp8(compute_capability: str | None) -> bool:
    """FP8 runs fast from compute capability 8.9 (Ada, Hopper, Blackwell)."""
    if not compute_capability:
        return False
    major, _, minor = compute_capability.partition(".")
    return (int(major), int(minor or 0)) >= (8, 9)


class PlanError(ValueError):
    """Inputs that cannot be planned; the message names the fix."""


def gpu_by_name(name: str) -> tuple[str, float, str]:
    """Match a card name loosely (``h100``, ``NVIDIA H100 80GB HBM3``, ``rtx pro 6000``)."""
    wanted = _norm(name)
    for card, (memory, capability) in GPUS.items():
        if _norm(card) in wanted or wanted in _norm(card):
            return card, memory, capability
    raise PlanError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}; or give --gpu-memory-gib")


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum()).replace("nvidia", "").replace("geforce", "")


@dataclass(frozen=True)
class Architecture:
    """What memory planning needs from a config.json."""

    kind: str  # standard | mla | sliding_window | hybrid
    num_layers: int
    attention_layers: int  # layers that keep KV (all but Mamba / linear-attention layers)
    full_attention_layers: int  # attention layers without a sliding window
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int  # per token: MoE counts the active experts
    vocab_size: int
    max_position_embeddings: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    sliding_window: int = 0
    state_bytes_per_seq: int = 0  # hybrid models: Mamba / linear-attention state

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Architecture":
        c = {**config, **(config.get("text_config") or {})}
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        hidden = int(c["hidden_size"])
        head_dim = int(c.get("head_dim") or hidden // heads)
        experts = int(c.get("num_experts_per_tok") or 0)
        moe_inter = int(c.get("moe_intermediate_size") or 0)
        inter = moe_inter * experts + int(c.get("shared_expert_intermediate_size") or 0) if experts and moe_inter else int(c.get("intermediate_size") or 4 * hidden)
        common = dict(
            num_layers=layers, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
            hidden_size=hidden, intermediate_size=inter, vocab_size=int(c.get("vocab_size") or 32000),
            # unknown: no limit from the model (vLLM then takes the tokenizer's or the user's)
            max_position_embeddings=int(c.get("max_position_embeddings") or 1 << 30),
        )
        if c.get("kv_lora_rank"):
            return cls("mla", attention_layers=layers, full_attention_layers=layers,
                       kv_lora_rank=int(c["kv_lora_rank"]), qk_rope_head_dim=int(c.get("qk_rope_head_dim") or 64), **common)
        layer_types = list(c.get("layer_types") or [])
        pattern = c.get("hybrid_override_pattern")
        if pattern:  # Nemotron-H: M = Mamba, * = attention, - = MLP
            attention = pattern.count("*")
            state = _mamba_state_bytes(c) * pattern.count("M")
            return cls("hybrid", attention_layers=attention, full_attention_layers=attention, state_bytes_per_seq=state, **common)
        if c.get("full_attention_interval") or any(t in ("linear_attention", "mamba") for t in layer_types):
            if layer_types:
                attention = sum(1 for t in layer_types if t in ("full_attention", "attention"))
            else:
                attention = layers // int(c["full_attention_interval"])
            linear = layers - attention
            state = linear * _linear_state_bytes(c)
            return cls("hybrid", attention_layers=attention, full_attention_layers=attention, state_bytes_per_seq=state, **common)
        window = int(c.get("sliding_window") or 0)
        sliding = sum(1 for t in layer_types if t == "sliding_attention")
        if window and not layer_types and c.get("use_sliding_window", True) and c.get("model_type") in ("gemma2",):
            sliding = layers // 2
        if window and sliding:
            return cls("sliding_window", attention_layers=layers, full_attention_layers=layers - sliding, sliding_window=window, **common)
        return cls("standard", attention_layers=layers, full_attention_layers=layers, **common)

    def kv_bytes_per_token(self, tp: int, kv_dtype_bytes: int, layers: int | None = None) -> int:
        """KV bytes one token costs on one GPU, over ``layers`` (default: every attention layer)."""
        layers = self.attention_layers if layers is None else layers
        if self.kind == "mla":
            return layers * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * layers * math.ceil(self.num_kv_heads / tp) * self.head_dim * kv_dtype_bytes


def _mamba_state_bytes(c: dict[str, Any]) -> int:
    heads = int(c.get("mamba_num_heads") or 0)
    head_dim = int(c.get("mamba_head_dim") or 0)
    state = int(c.get("ssm_state_size") or 128)
    conv = int(c.get("conv_kernel") or 4)
    inner = heads * head_dim or 2 * int(c["hidden_size"])
    return inner * state * 4 + inner * conv * 2


def _linear_state_bytes(c: dict[str, Any]) -> int:
    heads = int(c.get("linear_num_value_heads") or c["num_attention_heads"])
    k_dim = int(c.get("linear_key_head_dim") or 128)
    v_dim = int(c.get("linear_value_head_dim") or 128)
    return heads * k_dim * v_dim * 4


@dataclass(frozen=True)
class Overheads:
    """Per-GPU memory vLLM V1 keeps apart from weights and KV cache, for one vLLM version.

    Calibrated on tests/fixtures/kv_reference_cases.json: the activation peak of
    the profiling run grows with ``max_num_batched_tokens`` by about
    10 x hidden + 4 x (active) intermediate bytes per token (Qwen3-8B: 2048 -> 8192
    batched tokens cost 0.51 GiB), plus the sampler's logits for ``max_num_seqs``
    dummy requests; non-torch memory is ~0.15-0.25 GiB on one GPU and grows with
    tensor parallelism (NCCL / custom all-reduce buffers: ~0.4 GiB in 0.10, ~2.1 GiB
    in 0.19+ on H100); from about 0.21 the CUDA-graph estimate is deducted too.
    """

    non_torch_tp1: float = 0.25
    non_torch_tp_many: float = 2.1
    cuda_graphs: float = 1.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256

    @classmethod
    def for_version(cls, version: str, gpu_memory_gib: float = 80.0, max_num_batched_tokens: int | None = None) -> "Overheads":
        major_minor = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
        big = gpu_memory_gib >= 70
        if major_minor < (0, 21):
            default_mnbt = 8192 if big and major_minor >= (0, 11) else 2048
            return cls(0.15, 0.4, 0.0, max_num_batched_tokens or default_mnbt)
        return cls(0.25, 2.1, 1.0 if big else 0.5, max_num_batched_tokens or (8192 if big else 2048))

    def activation_gib(self, arch: Architecture, tp: int) -> float:
        per_token = 10 * arch.hidden_size + 4 * arch.intermediate_size / tp
        logits = self.max_num_seqs * arch.vocab_size * 4
        return (self.max_num_batched_tokens * per_token + logits) / GIB

    def non_torch_gib(self, tp: int) -> float:
        return self.non_torch_tp1 if tp == 1 else self.non_torch_tp_many


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def valid_tp_sizes(arch: Architecture, gpus: int) -> list[int]:
    return [tp for tp in range(1, gpus + 1) if arch.num_attention_heads % tp == 0]


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
) -> MemoryPlan:
    """Plan one server; ``weight_bytes`` is the checkpoint's total (the FP8 one's if chosen)."""
    tp = tensor_parallel_size or gpu_count
    if tp > gpu_count:
        raise PlanError(f"tensor_parallel_size {tp} exceeds the {gpu_count} GPU(s); use at most {gpu_count}")
    if arch.num_attention_heads % tp:
        raise PlanError(
            f"tensor_parallel_size {tp} does not divide the {arch.num_attention_heads} attention heads; "
            f"valid sizes here: {valid_tp_sizes(arch, gpu_count)}"
        )
    if kv_cache_dtype not in DTYPE_BYTES:
        raise PlanError(f"kv_cache_dtype must be one of {', '.join(DTYPE_BYTES)}")
    ov = overheads or Overheads.for_version(vllm_version, gpu_memory_gib)
    weights = weight_bytes / tp
    if runtime_fp8:
        weights = weights / 2  # linear layers go to 8 bit; the download does not shrink
    kv_bytes = arch.kv_bytes_per_token(tp, DTYPE_BYTES[kv_cache_dtype])
    activation = ov.activation_gib(arch, tp)
    non_torch = ov.non_torch_gib(tp)
    graphs = ov.cuda_graphs
    available = gpu_memory_gib * gpu_memory_utilization - weights / GIB - activation - non_torch - graphs
    tokens = max(0, math.floor(available * GIB / kv_bytes / BLOCK) * BLOCK) if available > 0 else 0
    capacity = _context_capacity(arch, available, tp, DTYPE_BYTES[kv_cache_dtype])
    fit_len = min(capacity, arch.max_position_embeddings)
    wanted = fit_len if max_model_len == "auto" else int(max_model_len)
    if available <= 0:
        fits, reason = False, (
            f"the weights ({weights / GIB:.1f} GiB per GPU) and vLLM's overheads "
            f"({activation + non_torch + graphs:.1f} GiB) leave no memory for the KV cache"
        )
    elif wanted > arch.max_position_embeddings:
        fits, reason = False, f"max_model_len {wanted} exceeds the model's {arch.max_position_embeddings} positions"
    elif wanted > capacity:
        fits, reason = False, f"the KV cache holds {capacity} tokens of context, fewer than max_model_len {wanted}"
    elif wanted < BLOCK:
        fits, reason = False, "the KV cache cannot hold a single block"
    else:
        fits, reason = True, f"{tokens} KV cache tokens, {tokens / wanted:.1f} requests of {wanted} at once"
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
    if base.max_model_len > arch.max_position_embeddings:
        return [f"set vllm_max_model_len to at most {min(base.max_model_len_fit, arch.max_position_embeddings)}"]
    out = []
    if base.max_model_len_fit >= 1024:
        out.append(f"set vllm_max_model_len to {base.max_model_len_fit} (the longest context that fits)")
    if kv_cache_dtype == "auto":
        alt = replan(kv_cache_dtype="fp8")
        if alt.max_model_len_fit > base.max_model_len_fit:
            out.append(f"set vllm_kv_cache_dtype='fp8': {alt.max_model_len_fit} tokens of context fit" + (" (enough)" if alt.fits else ""))
    if fp8_alternative:
        if fp8_supported:
            alt = replan(use_fp8_checkpoint=True)
            if alt.max_model_len_fit > base.max_model_len_fit:
                out.append(f"serve the FP8 checkpoint {fp8_alternative}: {alt.max_model_len_fit} tokens of context fit" + (" (enough)" if alt.fits else ""))
        else:
            out.append(f"{fp8_alternative} exists but these GPUs lack FP8 support (compute capability 8.9+)")
    for tp in (2, 4, 8):
        if tp > (arch.num_attention_heads or 1) or arch.num_attention_heads % tp:
            continue
        alt = replan(gpu_count=max(tp, gpu_count), tensor_parallel_size=tp)
        if alt.fits:
            out.append(f"use {tp} GPUs with vllm_tensor_parallel_size={tp}: {alt.kv_cache_tokens} KV cache tokens")
            break
    return out


#: Kept free on the volume beyond the download itself.
DISK_HEADROOM_BYTES = 2 * GIB


@dataclass
class Hardware:
    gpu_name: str | None
    gpu_memory_gib: float  # per GPU, as torch reports it
    gpu_count: int
    compute_capability: str | None

    @property
    def fp8_supported(self) -> bool:
        return supports_fp8(self.compute_capability)


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
) -> dict[str, Any]:
    """The whole plan as one dict (the ``cli.py plan --json`` object and the deploy's preflight)."""
    chosen = checkpoint
    if fp8_alternative is not None and prefer_fp8 and hardware and hardware.fp8_supported and not checkpoint.is_fp8:
        chosen = fp8_alternative
    memory = None
    if hardware is not None and hardware.gpu_count > 0:
        arch = Architecture.from_config(chosen.config)

        def replan(use_fp8_checkpoint=False, **changes):
            ckpt = fp8_alternative if use_fp8_checkpoint and fp8_alternative else chosen
            args = dict(
                weight_bytes=ckpt.weight_bytes, gpu_memory_gib=hardware.gpu_memory_gib, gpu_count=hardware.gpu_count,
                tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, runtime_fp8=runtime_fp8,
                vllm_version=vllm_version,
            )
            args.update(changes)
            return plan_memory(arch, **args)

        memory = replan()
        memory.suggestions = suggestions(
            arch, memory, replan, gpu_count=hardware.gpu_count, kv_cache_dtype=kv_cache_dtype,
            fp8_alternative=None if chosen is fp8_alternative else (fp8_alternative.repo if fp8_alternative else None),
            fp8_supported=hardware.fp8_supported,
        )
        if runtime_fp8 is False and not chosen.is_fp8 and fp8_alternative is None and not memory.fits and hardware.fp8_supported:
            memory.suggestions.append(
                "no FP8 checkpoint was found; vllm_extra_args ['--quantization', 'fp8'] quantizes at load "
                "(halves weight memory, not the download)"
            )
    download = chosen.download_bytes
    cached = cached_bytes.get(chosen.repo, 0) if isinstance(cached_bytes, dict) else cached_bytes
    missing = 0 if chosen.local else max(0, download - cached)
    disk_fits = None if disk_free_bytes is None else missing + DISK_HEADROOM_BYTES <= disk_free_bytes
    result = {
        "vllm_version": vllm_version,
        "checkpoint": {
            "repo": chosen.repo, "revision": chosen.revision, "is_fp8": chosen.is_fp8,
            "quantization": chosen.quantization, "local": chosen.local,
        },
        "fp8_alternative": fp8_alternative.repo if fp8_alternative is not None else None,
        "hardware": asdict(hardware) if hardware else None,
        "download_bytes": download,
        "download_files": chosen.download,
        "missing_bytes": missing,
        "disk_free_bytes": disk_free_bytes,
        "disk_fits": disk_fits,
        "tool_call_parser": family[1].tool_call_parser if family else None,
        "reasoning_parser": family[1].reasoning_parser if family else None,
        "family": family[0] if family else None,
        "chat_template": family[1].chat_template if family else None,
    }
    if memory is not None:
        result.update(memory.as_dict())
        result["tensor_parallel_size"] = tensor_parallel_size or hardware.gpu_count
    else:
        result.update({
            "fits": True, "reason": "no GPU: the CPU build serves from host memory (no VRAM plan)",
            "weights_gib_per_gpu": None, "kv_bytes_per_token": None, "available_kv_cache_gib": None,
            "kv_cache_tokens": None, "max_model_len": None if max_model_len == "auto" else max_model_len,
            "max_concurrency": None, "max_model_len_fit": None, "suggestions": [], "tensor_parallel_size": 1,
        })
    if disk_fits is False:
        result["fits"] = False
        need = (missing + DISK_HEADROOM_BYTES) / 1e9
        result["reason"] = (
            f"{chosen.repo} needs {missing / 1e9:.1f} GB to download (+{DISK_HEADROOM_BYTES / 1e9:.1f} GB headroom) "
            f"but the volume has {disk_free_bytes / 1e9:.1f} GB free"
        )
        fix = []
        if fp8_alternative is not None and chosen is not fp8_alternative:
            fix.append(f"use the FP8 checkpoint {fp8_alternative.repo} ({fp8_alternative.download_bytes / 1e9:.1f} GB)")
        fix += [f"grow the volume to at least {need:.0f} GB free", "remove other cached models (python cli.py cache clean)"]
        result["suggestions"] = fix + list(result["suggestions"])
    return result
