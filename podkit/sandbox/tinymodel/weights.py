"""The tiny model's weights: its architecture (``config.json``) and ``model.safetensors``, random
gaussian values with the hand-set anchor, whitespace bias and tool-call wiring that
:mod:`podkit.sandbox.tinymodel` describes.
"""

from __future__ import annotations

import json
import random
import sys
from array import array

from podkit.sandbox.tinymodel.tokenizer import (
    ENDOFTEXT,
    IM_END,
    TOOL_CALL_END,
    TOOL_CALL_JSON,
    TOOL_CALL_START,
    VOCAB_SIZE,
    added_token_ids,
    whitespace_token_ids,
)

HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_ATTENTION_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_ATTENTION_HEADS  # 32
INTERMEDIATE_SIZE = 256
MAX_POSITION_EMBEDDINGS = 65536
ROPE_THETA = 1000000.0
RMS_NORM_EPS = 1e-6
INIT_STD = 0.02
#: Dimension 0: the embedding's anchor, and in lm_head each token's logit bias (see the package doc).
_ANCHOR = 1.0
_BIAS_VALUE = 1.0
_WHITESPACE_BIAS_VALUE = 0.5
#: The tool-call wiring (see the package doc): reserved residual dimensions ...
_NEWLINE_DIM, _START_DIM, _CALL_DIM, _END_DIM, _TOOLS_DIM = 1, 2, 3, 4, 5
#: ... an identity feature's value in the embedding (the other dimensions are ~0.02) ...
_FEATURE = 0.15
#: ... the detector head's constant query, key weight and output weight ...
_DETECT_QUERY, _DETECT_KEY, _DETECT_OUT = 12.0, 6.0, 0.1
#: ... and how far below every other token the chain's tokens score when off.
_SUPPRESS = 6.0


def config_json() -> dict:
    ids = added_token_ids()
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": ids[IM_END],
        "hidden_act": "silu",
        "hidden_size": HIDDEN_SIZE,
        "head_dim": HEAD_DIM,
        "initializer_range": INIT_STD,
        "intermediate_size": INTERMEDIATE_SIZE,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "max_window_layers": NUM_LAYERS,
        "num_attention_heads": NUM_ATTENTION_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": NUM_KV_HEADS,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_scaling": None,
        "rope_theta": ROPE_THETA,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
    }


def _weight_shapes() -> list[tuple[str, tuple[int, ...]]]:
    """Every Qwen2ForCausalLM tensor (untied: the output layer is ``lm_head``)."""
    q_out = NUM_ATTENTION_HEADS * HEAD_DIM
    kv_out = NUM_KV_HEADS * HEAD_DIM
    shapes: list[tuple[str, tuple[int, ...]]] = [
        ("model.embed_tokens.weight", (VOCAB_SIZE, HIDDEN_SIZE)),
    ]
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (HIDDEN_SIZE,)),
            (p + "self_attn.q_proj.weight", (q_out, HIDDEN_SIZE)),
            (p + "self_attn.q_proj.bias", (q_out,)),
            (p + "self_attn.k_proj.weight", (kv_out, HIDDEN_SIZE)),
            (p + "self_attn.k_proj.bias", (kv_out,)),
            (p + "self_attn.v_proj.weight", (kv_out, HIDDEN_SIZE)),
            (p + "self_attn.v_proj.bias", (kv_out,)),
            (p + "self_attn.o_proj.weight", (HIDDEN_SIZE, q_out)),
            (p + "post_attention_layernorm.weight", (HIDDEN_SIZE,)),
            (p + "mlp.gate_proj.weight", (INTERMEDIATE_SIZE, HIDDEN_SIZE)),
            (p + "mlp.up_proj.weight", (INTERMEDIATE_SIZE, HIDDEN_SIZE)),
            (p + "mlp.down_proj.weight", (HIDDEN_SIZE, INTERMEDIATE_SIZE)),
        ]
    shapes.append(("model.norm.weight", (HIDDEN_SIZE,)))
    shapes.append(("lm_head.weight", (VOCAB_SIZE, HIDDEN_SIZE)))
    return shapes


def _bf16(values: list[float]) -> bytes:
    """float32 -> bf16 by truncation (keep the high 16 bits), little-endian."""
    as_f32 = array("f", values)
    as_u32 = array("I")
    if as_u32.itemsize != 4 or as_f32.itemsize != 4:  # pragma: no cover - exotic ABI
        raise RuntimeError("array('I') / array('f') are not 32-bit on this platform")
    as_u32.frombytes(as_f32.tobytes())
    out = array("H", [u >> 16 for u in as_u32])
    if sys.byteorder == "big":  # pragma: no cover
        out.byteswap()
    return out.tobytes()


def _random_tensors(seed: int) -> dict[str, list[float]]:
    """Every tensor, row-major: gaussian (std ``INIT_STD``) from ``seed``, norms 1.0."""
    gauss = random.Random(seed).gauss
    tensors = {}
    for name, shape in _weight_shapes():
        count = 1
        for dim in shape:
            count *= dim
        if name.endswith("norm.weight"):
            tensors[name] = [1.0] * count
        else:
            tensors[name] = [gauss(0.0, INIT_STD) for _ in range(count)]
    return tensors


def _set_row(tensor: list[float], row: int, values: dict[int, float], width: int = HIDDEN_SIZE) -> None:
    """Row ``row`` of a ``[*, width]`` matrix becomes ``values`` (column -> value), zero elsewhere."""
    tensor[row * width : (row + 1) * width] = [values.get(column, 0.0) for column in range(width)]


def _wire_tool_call(tensors: dict[str, list[float]]) -> None:
    """Hand-set the weights that make the tool call (see the package doc).

    Residual dimensions 1-5 are reserved: four mark a token's identity in its
    embedding (``\\n``, ``<tool_call>``, the call token, ``</tool_call>``) and
    one (``tools``) is written by one attention head of layer 0. No other
    weight reads from them into the logits or writes into them, so they hold
    exactly what is set here.
    """
    ids = added_token_ids()
    newline = ord("\n")  # GPT-2 byte tokens keep byte order: "\n" is id 10
    start, call, end, im_end = ids[TOOL_CALL_START], ids[TOOL_CALL_JSON], ids[TOOL_CALL_END], ids[IM_END]
    identity = {newline: _NEWLINE_DIM, start: _START_DIM, call: _CALL_DIM, end: _END_DIM}
    reserved = (*identity.values(), _TOOLS_DIM)

    embed = tensors["model.embed_tokens.weight"]
    for token_id in range(VOCAB_SIZE):
        for dim in reserved:
            embed[token_id * HIDDEN_SIZE + dim] = 0.0
    for token_id, dim in identity.items():
        embed[token_id * HIDDEN_SIZE + dim] = _FEATURE

    # Nothing the layers compute lands in the reserved dimensions ...
    for layer in range(NUM_LAYERS):
        p = f"model.layers.{layer}."
        for dim in reserved:
            _set_row(tensors[p + "self_attn.o_proj.weight"], dim, {})
            _set_row(tensors[p + "mlp.down_proj.weight"], dim, {}, INTERMEDIATE_SIZE)
    # ... except the detector: layer 0, query head 3 (key/value head 1) attends
    # to every <tool_call> in the context and copies "present" into ``tools``.
    # Query and key sit on the slowest rotary pair (dims 15 and 31), where RoPE
    # turns by under 0.1 rad over 32k positions, so position does not matter.
    p = "model.layers.0.self_attn."
    head, kv_head, slow, value_dim = NUM_ATTENTION_HEADS - 1, NUM_KV_HEADS - 1, HEAD_DIM // 2 - 1, 0
    q_rows = range(head * HEAD_DIM, (head + 1) * HEAD_DIM)
    for row in q_rows:
        _set_row(tensors[p + "q_proj.weight"], row, {})
        tensors[p + "q_proj.bias"][row] = _DETECT_QUERY if row == q_rows[slow] else 0.0
    kv = kv_head * HEAD_DIM
    for row, column in ((kv + slow, _DETECT_KEY), (kv + slow + HEAD_DIM // 2, 0.0)):
        _set_row(tensors[p + "k_proj.weight"], row, {_START_DIM: column} if column else {})
        tensors[p + "k_proj.bias"][row] = 0.0
    _set_row(tensors[p + "v_proj.weight"], kv + value_dim, {_START_DIM: 1.0})
    tensors[p + "v_proj.bias"][kv + value_dim] = 0.0
    o_proj = tensors[p + "o_proj.weight"]
    for sharing in range(head - NUM_ATTENTION_HEADS // NUM_KV_HEADS + 1, head + 1):  # heads reading kv_head
        for row in range(HIDDEN_SIZE):
            o_proj[row * HIDDEN_SIZE + sharing * HEAD_DIM + value_dim] = 0.0
    o_proj[_TOOLS_DIM * HIDDEN_SIZE + head * HEAD_DIM + value_dim] = _DETECT_OUT

    # The output layer: each step of the chain, by the features now present.
    # In units of the normalised anchor, every other token scores about 1.0.
    anchor = embed[start * HIDDEN_SIZE : (start + 1) * HIDDEN_SIZE]
    marker = HIDDEN_SIZE**0.5 * _FEATURE / sum(v * v for v in anchor) ** 0.5  # <tool_call> after input_layernorm
    tools = _DETECT_OUT * marker  # what the detector writes into ``tools``
    both = _SUPPRESS / 2 + 1.5  # one feature alone scores -_SUPPRESS/2 + 1.5, both 3.0
    lm_head = tensors["lm_head.weight"]
    _set_row(lm_head, start, {0: -_SUPPRESS, _NEWLINE_DIM: both / _FEATURE, _TOOLS_DIM: both / tools})
    _set_row(lm_head, call, {0: -_SUPPRESS, _START_DIM: (_SUPPRESS + 3) / _FEATURE})
    _set_row(lm_head, end, {0: -_SUPPRESS, _CALL_DIM: (_SUPPRESS + 3) / _FEATURE})
    lm_head[im_end * HIDDEN_SIZE + _END_DIM] = 2.0 / _FEATURE


def safetensors(seed: int) -> bytes:
    """A safetensors file: u64 LE header length, JSON header, raw BF16 data."""
    tensors = _random_tensors(seed)
    whitespace = whitespace_token_ids()
    embed, lm_head = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"]
    for token_id in range(VOCAB_SIZE):
        # Dimension 0: the anchor in the embedding, the logit bias in lm_head (see the package doc).
        embed[token_id * HIDDEN_SIZE] = _ANCHOR
        lm_head[token_id * HIDDEN_SIZE] = _WHITESPACE_BIAS_VALUE if token_id in whitespace else _BIAS_VALUE
    _wire_tool_call(tensors)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    chunks: list[bytes] = []
    offset = 0
    for name, shape in _weight_shapes():
        data = _bf16(tensors[name])
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # align the data to 8 bytes
    return len(header_bytes).to_bytes(8, "little") + header_bytes + b"".join(chunks)
