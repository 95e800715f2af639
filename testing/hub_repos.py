"""Build small model repos on disk for testing.hub.LocalHub (tests only)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from testing.hub import SAFETENSORS_DTYPE_SIZES


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], metadata: dict | None = None) -> bytes:
    """A safetensors file: u64 LE header length, JSON header (space-padded to 8 bytes), zero-filled data."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for dim in shape:
            n *= dim
        nbytes = n * SAFETENSORS_DTYPE_SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


# The two weight variants: counts per dtype are what get_safetensors_metadata must report.
BF16_TENSORS = {
    "model.embed_tokens.weight": ("BF16", [64, 16]),  # 1024
    "model.layers.0.mlp.down_proj.weight": ("BF16", [16, 32]),  # 512
    "model.norm.weight": ("BF16", [16]),  # 16
}
BF16_COUNTS = {"BF16": 1024 + 512 + 16}

FP8_TENSORS = {
    "model.embed_tokens.weight": ("BF16", [64, 16]),  # 1024
    "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [16, 32]),  # 512
    "model.layers.0.mlp.down_proj.weight_scale": ("F32", [1]),  # 1
    "model.norm.weight": ("BF16", [16]),  # 16
}
FP8_COUNTS = {"BF16": 1024 + 16, "F8_E4M3": 512, "F32": 1}


def write_repo(
    root: Path,
    repo_id: str,
    files: dict[str, bytes | str | dict],
    hub_json: dict | None = None,
) -> Path:
    """Write ``root/<repo_id>/`` with ``files`` (dicts become JSON) and an optional ``.hub.json``."""
    folder = root / repo_id
    folder.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            content = json.dumps(content, indent=2)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)
    if hub_json is not None:
        (folder / ".hub.json").write_text(json.dumps(hub_json))
    return folder


def model_files(fp8: bool = False) -> dict[str, bytes | str | dict]:
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "torch_dtype": "bfloat16",
    }
    if fp8:
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    return {
        "config.json": config,
        "tokenizer_config.json": {"eos_token": "<|im_end|>", "model_max_length": 4096},
        "model.safetensors": safetensors_bytes(FP8_TENSORS if fp8 else BF16_TENSORS),
        "README.md": "# tiny test model\n",
    }


# A small Qwen3-style repo and its FP8 sibling, for planning tests.
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_size": 128,
    "intermediate_size": 256,
    "vocab_size": 64,
    "max_position_embeddings": 40960,
}
FP8_QUANT = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}


def repo_files(fp8=False, config=CONFIG):
    cfg = dict(config, **({"quantization_config": FP8_QUANT} if fp8 else {}))
    return {
        "config.json": cfg,
        "tokenizer.json": "{}",
        "model.safetensors": safetensors_bytes(FP8_TENSORS if fp8 else BF16_TENSORS),
    }
