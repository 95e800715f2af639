"""A checkpoint's own files are data: every number and type podkit reads from them, checked where read.

A hub repo is anyone's to publish, and a folder anyone's to fill, so ``config.json`` (and its
``text_config`` and ``vision_config``), ``generation_config.json``, ``hf_quant_config.json``, the
safetensors index and each safetensors header are read here, once, with the rules settings follow
(``podkit/checks.py``): strict JSON (no NaN, no Infinity, no number past what a float holds), the
right type, finite and in range. A file that breaks one is refused in one line that names the
model, the file, the field, the value and the fix (another model or revision), before anything is
downloaded or restarted: ``podkit plan``, ``plan --measure`` and the deploy's preflight all read
checkpoints through :mod:`podkit.plan.checkpoints`, which calls this module, so no hostile file
reaches the memory plan, vLLM or a traceback.

Only what podkit reads is bounded (:data:`CONFIG_FIELDS`); the rest of a config is vLLM's, and is
only held to finite numbers. A field that is absent or ``null`` is absent: the plan's defaults
apply, and a size the plan cannot do without is said where it is needed (``lacks 'hidden_size'``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from podkit.checks import SettingsError, whole
from podkit.plan.architecture import Architecture
from podkit.text import clean

#: The fix every refusal here ends with: the files are the checkpoint's, not the user's settings.
FIX = "use another model or revision"
#: How much of a refused value a line shows.
SHOWN = 60
#: What a safetensors header may hold: its dtype names (as the format writes them), dimensions.
_DTYPE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")
MAX_DIMENSION = 1 << 40
MAX_TENSOR = 1 << 50  # elements of one tensor: far above any checkpoint's, far below a float's limit
MAX_FILE_BYTES = 1 << 50  # a petabyte
MAX_JSON_BYTES = 16 * 1024 * 1024  # a config, an index: kilobytes; one past this is no checkpoint's


class ModelError(LookupError):
    """The model cannot be read or served; the message says why and what to do."""


def shown(value: Any) -> str:
    """``value`` as a refusal shows it: its repr, clipped, safe on a terminal."""
    text = repr(value)
    return clean(text if len(text) <= SHOWN else text[: SHOWN - 3] + "...")


def refuse(model: str, name: str, field: str, value: Any, what: str) -> ModelError:
    """The one line: ``MODEL: FILE FIELD is VALUE, which must be WHAT: the fix``."""
    at = f" {field}" if field else ""
    return ModelError(f"{clean(model)}: {name}{at} is {shown(value)}, which must be {what}: {FIX}")


# --- strict JSON


def _no_constant(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON number (JSON has no NaN or Infinity)")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"{literal[:SHOWN]} is past what a number can hold")
    return number


def load_json(model: str, name: str, raw: bytes | str) -> Any:
    """The JSON value of file ``name`` of ``model``, read as JSON is written: no NaN, no Infinity,
    no number a float cannot hold (``1e400``), no integer of thousands of digits; else ModelError."""
    if len(raw) > MAX_JSON_BYTES:
        raise ModelError(f"{clean(model)}: {name} is {len(raw)} bytes (at most {MAX_JSON_BYTES}): {FIX}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        said = exc.args[0] if isinstance(exc, ValueError) and exc.args else type(exc).__name__
        raise ModelError(f"{clean(model)}: {name} is not valid JSON ({clean(str(said))[:120]}): {FIX}") from None


def finite(model: str, name: str, value: Any, where: str = "") -> None:
    """Refuse NaN and Infinity anywhere in ``value`` (a file as another reader parsed it: a host's
    podctl, the hub client)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise refuse(model, name, where.lstrip("."), value, "a finite number")
    if isinstance(value, Mapping):
        for key, item in value.items():
            finite(model, name, item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            finite(model, name, item, f"{where}[{index}]")


def an_object(model: str, name: str, value: Any, field: str = "") -> dict[str, Any]:
    if not isinstance(value, Mapping):
        kind = "a JSON list" if isinstance(value, list) else f"{type(value).__name__} {shown(value)}"
        at = f" {field}" if field else ""
        raise ModelError(f"{clean(model)}: {name}{at} is {kind}, which must be a JSON object: {FIX}")
    return dict(value)


# --- the fields podkit reads, each with its rule

Rule = Callable[[Any], Any]  # the value as podkit uses it, or ValueError saying what it must be


def count(low: int, high: int, unit: str) -> Rule:
    """A whole number from ``low`` to ``high`` (settings' rule: 30.0 is 30; a bool, a string, NaN are not)."""
    check = whole(low, high, unit)

    def rule(value: Any) -> int:
        try:
            return check(value, "")
        except SettingsError:
            raise ValueError(f"a whole number from {low} to {high} ({unit})") from None

    return rule


def factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e6:
        raise ValueError("a number above 0, at most 1e6")
    return float(value)


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("a string")
    return value


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def words(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("a list of strings")
    return value


def mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError("a JSON object")
    return dict(value)


LAYERS, WIDTH, HEADS, DIM = 4096, 1 << 20, 65536, 1 << 16
#: A context or position count: any a real config writes (``model_max_length`` can be 1e30).
POSITIONS = count(1, 10**30, "positions")

#: Every config.json field the plan reads (``podkit/plan/architecture.py``, ``max_positions``, the
#: family table), in the top level and in ``text_config`` alike.
CONFIG_FIELDS: dict[str, Rule] = {
    "model_type": text,
    "architectures": words,
    "num_hidden_layers": count(1, LAYERS, "layers"),
    "num_attention_heads": count(1, HEADS, "attention heads"),
    "num_key_value_heads": count(1, HEADS, "KV heads"),
    "hidden_size": count(1, WIDTH, "the hidden width"),
    "head_dim": count(1, DIM, "one head's width"),
    "intermediate_size": count(0, 1 << 24, "the MLP width"),
    "vocab_size": count(1, 1 << 24, "tokens"),
    "tie_word_embeddings": flag,
    "kv_lora_rank": count(0, DIM, "MLA's KV rank"),
    "qk_rope_head_dim": count(0, DIM, "MLA's RoPE head width"),
    "sliding_window": count(0, 10**30, "tokens"),
    "use_sliding_window": flag,
    "layer_types": words,
    "full_attention_interval": count(1, LAYERS, "layers"),
    "hybrid_override_pattern": text,
    "mamba_num_heads": count(0, HEADS, "Mamba heads"),
    "mamba_head_dim": count(0, DIM, "one Mamba head's width"),
    "ssm_state_size": count(0, DIM, "the SSM state"),
    "conv_kernel": count(0, 1024, "the convolution's width"),
    "linear_num_value_heads": count(0, HEADS, "linear-attention heads"),
    "linear_key_head_dim": count(0, DIM, "one linear-attention key's width"),
    "linear_value_head_dim": count(0, DIM, "one linear-attention value's width"),
    "num_experts": count(0, HEADS, "experts"),
    "num_local_experts": count(0, HEADS, "experts"),
    "n_routed_experts": count(0, HEADS, "experts"),
    "num_experts_per_tok": count(0, HEADS, "experts per token"),
    "experts_per_token": count(0, HEADS, "experts per token"),
    "moe_intermediate_size": count(0, 1 << 24, "one expert's width"),
    "shared_expert_intermediate_size": count(0, 1 << 24, "the shared experts' width"),
    "n_shared_experts": count(0, HEADS, "shared experts"),
    "first_k_dense_replace": count(0, LAYERS, "layers"),
    "max_position_embeddings": POSITIONS,
    "n_positions": POSITIONS,
    "max_seq_len": POSITIONS,
    "seq_length": POSITIONS,
    "model_max_length": POSITIONS,
    "max_sequence_length": POSITIONS,
    "max_seq_length": POSITIONS,
    "seq_len": POSITIONS,
    "rope_scaling": mapping,
    "rope_parameters": mapping,
    "quantization_config": mapping,
    "compression_config": mapping,
    "text_config": mapping,
    "vision_config": mapping,
}
#: What a RoPE scaling object gives ``max_positions``.
ROPE_FIELDS: dict[str, Rule] = {
    "factor": factor,
    "original_max_position_embeddings": POSITIONS,
    "rope_type": text,
    "type": text,
}
#: What the plan reads of a quantization config (config.json's ``quantization_config``, or
#: ``hf_quant_config.json``): how it is quantized.
QUANT_FIELDS: dict[str, Rule] = {"quant_method": text, "quant_algo": text, "quantization": mapping}
#: generation_config.json: the sampling defaults vLLM gives every request and podkit's eval reads,
#: and the token ids vLLM stops at.
TOKEN_ID = count(0, 1 << 24, "a token id")
GENERATION_FIELDS: dict[str, Rule] = {
    "temperature": lambda v: _between(v, 0, 100),
    "top_p": lambda v: _between(v, 0, 1),
    "min_p": lambda v: _between(v, 0, 1),
    "top_k": count(-1, 1 << 24, "tokens, -1 or 0 for all"),
    "repetition_penalty": lambda v: _between(v, 0, 100),
    "presence_penalty": lambda v: _between(v, -2, 2),
    "frequency_penalty": lambda v: _between(v, -2, 2),
    "max_new_tokens": count(1, 1 << 30, "tokens"),
    "bos_token_id": TOKEN_ID,
    "pad_token_id": TOKEN_ID,
    "eos_token_id": lambda v: [TOKEN_ID(item) for item in v] if isinstance(v, list) else TOKEN_ID(v),
}


def _between(value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"a number from {low:g} to {high:g}")
    return float(value)


def fields(model: str, name: str, data: Mapping[str, Any], rules: Mapping[str, Rule], where: str = "") -> None:
    """Each of ``rules``' fields that ``data`` holds (not null) is what its rule says, else ModelError."""
    for key, rule in rules.items():
        value = data.get(key)
        if value is None:
            continue
        try:
            rule(value)
        except ValueError as exc:
            raise refuse(model, name, where + key, value, str(exc)) from None


# --- the files


def config(model: str, data: Any, name: str = "config.json") -> dict[str, Any]:
    """config.json as the plan reads it: an object whose fields (and ``text_config``'s) hold what
    :data:`CONFIG_FIELDS` says, whose RoPE and quantization objects hold theirs, every number finite,
    and whose sizes leave the plan something to divide by."""
    found = an_object(model, name, data)
    finite(model, name, found)
    fields(model, name, found, CONFIG_FIELDS)
    text_config = found.get("text_config") or {}
    fields(model, name, text_config, CONFIG_FIELDS, "text_config.")
    for holder, prefix in ((found, ""), (text_config, "text_config.")):
        for key in ("rope_scaling", "rope_parameters"):
            fields(model, name, holder.get(key) or {}, ROPE_FIELDS, f"{prefix}{key}.")
    for key in ("quantization_config", "compression_config"):
        quant(model, found.get(key) or {}, name, f"{key}.")
    _derived(model, name, {**found, **text_config})
    return found


def _derived(model: str, name: str, merged: dict[str, Any]) -> None:
    """What the fields make together: a head of at least one, an attention layer to keep KV for."""
    if not all(merged.get(key) for key in ("num_hidden_layers", "num_attention_heads", "hidden_size")):
        return  # a size the memory plan needs is missing: said where the plan needs it
    if not merged.get("head_dim") and merged["hidden_size"] < merged["num_attention_heads"]:
        raise refuse(
            model,
            name,
            "hidden_size",
            merged["hidden_size"],
            f"at least num_attention_heads ({merged['num_attention_heads']}), or head_dim given",
        )
    arch = Architecture.from_config(merged)
    if arch.attention_layers < 1 or arch.attention_layers > arch.num_layers:
        what = next(
            (k for k in ("hybrid_override_pattern", "full_attention_interval", "layer_types") if merged.get(k)),
            "num_hidden_layers",
        )
        raise refuse(
            model,
            name,
            what,
            merged.get(what),
            f"a layout with 1 to {arch.num_layers} attention layers (it gives {arch.attention_layers})",
        )


def quant(model: str, data: Any, name: str = "hf_quant_config.json", where: str = "") -> dict[str, Any]:
    """A quantization config: what says how the weights are quantized, as strings."""
    found = an_object(model, name, data, where.rstrip("."))
    finite(model, name, found, where.rstrip("."))
    fields(model, name, found, QUANT_FIELDS, where)
    fields(model, name, found.get("quantization") or {}, {"quant_algo": text}, f"{where}quantization.")
    return found


def generation(model: str, data: Any) -> dict[str, Any]:
    """generation_config.json: the sampling defaults and token ids, each in vLLM's range."""
    name = "generation_config.json"
    found = an_object(model, name, data)
    finite(model, name, found)
    fields(model, name, found, GENERATION_FIELDS)
    return found


def index(model: str, data: Any, files: Mapping[str, int]) -> dict[str, str]:
    """model.safetensors.index.json: its ``weight_map`` (tensor -> shard), every shard one the
    checkpoint holds at its top level (vLLM loads exactly the shards it names)."""
    name = "model.safetensors.index.json"
    found = an_object(model, name, data)
    weight_map = found.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise refuse(model, name, "weight_map", weight_map, "a JSON object of tensor names to shard files")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or "/" in shard or shard not in files:
            raise refuse(model, name, f"weight_map[{tensor!r}]", shard, "a .safetensors file the checkpoint holds")
    return dict(weight_map)


def header(model: str, name: str, data: Any) -> dict[str, int]:
    """One safetensors header (the JSON before the weights): parameters per dtype, each tensor's
    dtype a name and its shape whole dimensions."""
    found = an_object(model, name, data, "header")
    counts: dict[str, int] = {}
    for tensor, info in found.items():
        if tensor == "__metadata__":
            continue
        info = an_object(model, name, info, f"header[{tensor!r}]")
        dtype, shape = info.get("dtype"), info.get("shape")
        if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
            raise refuse(model, name, f"header[{tensor!r}].dtype", dtype, "a dtype name such as 'BF16'")
        size = 1
        rule = count(0, MAX_DIMENSION, "elements")
        if not isinstance(shape, list):
            raise refuse(model, name, f"header[{tensor!r}].shape", shape, "a list of whole dimensions")
        for dim in shape:
            try:
                size *= rule(dim)
            except ValueError as exc:
                raise refuse(model, name, f"header[{tensor!r}].shape", shape, f"a list of {exc}") from None
        if size > MAX_TENSOR:
            raise refuse(model, name, f"header[{tensor!r}].shape", shape, f"at most {MAX_TENSOR} elements in all")
        counts[dtype] = counts.get(dtype, 0) + size
    return counts


def parameter_counts(model: str, counts: Any, name: str = "the safetensors headers") -> dict[str, int]:
    """Parameters per dtype, as the hub client or a host's podctl summed them from the headers."""
    found = an_object(model, name, counts)
    rule = count(0, MAX_TENSOR, "parameters")
    for dtype, number in found.items():
        if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
            raise refuse(model, name, "dtype", dtype, "a dtype name such as 'BF16'")
        try:
            found[dtype] = rule(number)
        except ValueError as exc:
            raise refuse(model, name, dtype, number, str(exc)) from None
    return found


def file_sizes(model: str, files: Any, name: str = "the file list") -> dict[str, int]:
    """Every file of the checkpoint and its size in bytes (the hub's listing, or a folder's)."""
    found = an_object(model, name, files)
    rule = count(0, MAX_FILE_BYTES, "bytes")
    for path, size in found.items():
        if not isinstance(path, str) or not path:
            raise refuse(model, name, "a file name", path, "a path in the repo")
        try:
            found[path] = rule(size)
        except ValueError as exc:
            raise refuse(model, name, path, size, str(exc)) from None
    return found
