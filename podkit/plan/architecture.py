"""What memory planning reads from a model's config.json: layers, heads, attention kind, state."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: The config.json keys :meth:`Architecture.from_config` reads (a model's ``text_config`` is read too):
#: what a start kept as a reference case keeps of its config, so it is planned again the same way.
CONFIG_KEYS = (
    "model_type",
    "quantization_config",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "full_attention_interval",
    "hybrid_override_pattern",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "conv_kernel",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "text_config",
)


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
    # mixture of experts (0 for a dense model): what vLLM's fused-MoE kernel sizes its caches by
    num_experts: int = 0
    experts_per_token: int = 0  # top-k
    moe_intermediate_size: int = 0  # one expert's
    shared_intermediate_size: int = 0  # shared experts, run densely on every token
    dense_layers: int = 0  # MoE models whose first layers have a dense MLP (DeepSeek's first_k_dense_replace)
    dense_intermediate_size: int = 0  # those layers' MLP width
    tied_embeddings: bool = False  # the LM head is the embedding matrix (one copy in the checkpoint)
    model_type: str = ""  # config.json's model_type (vLLM sets some things per model type)
    quant_method: str = ""  # config.json's quantization_config.quant_method ("mxfp4", "fp8", ...)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1 and self.experts_per_token > 0

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Architecture:
        c = {**config, **(config.get("text_config") or {})}
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        hidden = int(c["hidden_size"])
        head_dim = int(c.get("head_dim") or hidden // heads)
        experts = int(c.get("num_experts_per_tok") or c.get("experts_per_token") or 0)
        moe_inter = int(c.get("moe_intermediate_size") or 0)
        inter = (
            moe_inter * experts + int(c.get("shared_expert_intermediate_size") or 0)
            if experts and moe_inter
            else int(c.get("intermediate_size") or 4 * hidden)
        )
        routed = int(c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts") or 0)
        shared = int(c.get("shared_expert_intermediate_size") or 0) or moe_inter * int(c.get("n_shared_experts") or 0)
        common: dict[str, Any] = dict(
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            hidden_size=hidden,
            intermediate_size=inter,
            vocab_size=int(c.get("vocab_size") or 32000),
            # unknown: no limit from the model (vLLM then takes the tokenizer's or the user's)
            max_position_embeddings=int(c.get("max_position_embeddings") or 1 << 30),
            tied_embeddings=bool(c.get("tie_word_embeddings", False)),
            model_type=str(config.get("model_type") or ""),
            quant_method=str((config.get("quantization_config") or {}).get("quant_method") or ""),
        )
        if routed > 1 and experts:  # gpt-oss names one expert's width intermediate_size
            common.update(
                num_experts=routed,
                experts_per_token=experts,
                moe_intermediate_size=moe_inter or int(c.get("intermediate_size") or 0),
                shared_intermediate_size=shared,
                dense_layers=min(layers, int(c.get("first_k_dense_replace") or 0)),
                dense_intermediate_size=int(c.get("intermediate_size") or 0),
            )
        if c.get("kv_lora_rank"):
            return cls(
                "mla",
                attention_layers=layers,
                full_attention_layers=layers,
                kv_lora_rank=int(c["kv_lora_rank"]),
                qk_rope_head_dim=int(c.get("qk_rope_head_dim") or 64),
                **common,
            )
        layer_types = list(c.get("layer_types") or [])
        pattern = c.get("hybrid_override_pattern")
        if pattern:  # Nemotron-H: M = Mamba, * = attention, - = MLP
            attention = pattern.count("*")
            state = _mamba_state_bytes(c) * pattern.count("M")
            return cls(
                "hybrid",
                attention_layers=attention,
                full_attention_layers=attention,
                state_bytes_per_seq=state,
                **common,
            )
        if c.get("full_attention_interval") or any(t in ("linear_attention", "mamba") for t in layer_types):
            if layer_types:
                attention = sum(1 for t in layer_types if t in ("full_attention", "attention"))
            else:
                attention = layers // int(c["full_attention_interval"])
            linear = layers - attention
            state = linear * _linear_state_bytes(c)
            return cls(
                "hybrid",
                attention_layers=attention,
                full_attention_layers=attention,
                state_bytes_per_seq=state,
                **common,
            )
        window = int(c.get("sliding_window") or 0)
        sliding = sum(1 for t in layer_types if t == "sliding_attention")
        if window and not layer_types and c.get("use_sliding_window", True) and c.get("model_type") in ("gemma2",):
            sliding = layers // 2
        if window and sliding:
            return cls(
                "sliding_window",
                attention_layers=layers,
                full_attention_layers=layers - sliding,
                sliding_window=window,
                **common,
            )
        return cls("standard", attention_layers=layers, full_attention_layers=layers, **common)

    def layer_parameters(self) -> list[int]:
        """Each decoder layer's parameters, estimated from the config (attention as grouped-query
        attention; an MLP of three matrices; a MoE layer's every expert, shared experts and router):
        what a pipeline stage's share of the checkpoint is weighed by. A MoE model's first
        ``dense_layers`` are far lighter than the rest (DeepSeek-V2-Lite: 81M against 585M)."""
        hidden = self.hidden_size
        attention = hidden * self.head_dim * 2 * (self.num_attention_heads + self.num_kv_heads)
        if not self.is_moe:
            return [attention + 3 * hidden * self.intermediate_size] * self.num_layers
        experts = self.num_experts * (3 * hidden * self.moe_intermediate_size + hidden)
        moe = attention + experts + 3 * hidden * self.shared_intermediate_size
        dense = attention + 3 * hidden * self.dense_intermediate_size
        return [dense] * self.dense_layers + [moe] * (self.num_layers - self.dense_layers)

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
