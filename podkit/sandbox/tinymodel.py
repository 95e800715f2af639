"""Write a tiny random-weight Qwen2 checkpoint, with no dependencies.

Why this exists: the tests and the local sandbox need a *real* model that a
real vLLM can load and serve (health, auth, chat, tool calls), but they must
run with no access to the Hugging Face hub and without pulling numpy, torch,
transformers or tokenizers into the controller.  This module writes such a
checkpoint with the standard library only, in well under a second:

``config.json``
    ``Qwen2ForCausalLM``: hidden 128, 2 layers, 4 attention heads, 2 KV heads
    (head_dim 32), intermediate 256, vocabulary 320 (a multiple of 64 that
    the tokenizer fills exactly), untied embeddings, bf16.
``model.safetensors``
    Every Qwen2 weight, written by hand in the safetensors format.  Values are
    gaussian (std 0.02) from ``random.Random(seed)``, truncated float32 ->
    bf16; RMSNorm weights are 1.0; a few are set by hand (below).  About
    0.38 M parameters (~0.76 MB).
``tokenizer.json``
    A byte-level BPE tokenizer in the HF ``tokenizers`` format: the 256 GPT-2
    byte tokens, a handful of merges, ``<|endoftext|>``, ``<|im_start|>``,
    ``<|im_end|>`` (special) and ``<tool_call>``, ``</tool_call>`` and
    :data:`TOOL_CALL_JSON` (added, not special, so they survive
    ``skip_special_tokens`` as the hermes tool parser needs).
``tokenizer_config.json``, ``special_tokens_map.json``, ``generation_config.json``
    ``PreTrainedTokenizerFast`` with a Qwen2.5/Hermes-style chat template
    (tools in the system prompt, ``<tool_call>`` JSON for assistant calls,
    ``role: tool`` messages as ``<tool_response>``), and Qwen-like chat
    sampling defaults, so that server-side overrides are observable.

The weights are random, so without tools the model emits gibberish; what
the end-to-end checks rely on is that structured decoding (named tool calls,
``"strict": true`` schemas with enum/pattern fields) still yields complete,
schema-valid output.  One thing would defeat that: JSON grammars allow
unbounded whitespace, and once a random model emits a whitespace token inside
constrained JSON it may pad until ``max_tokens``.  Dimension 0 is therefore
a large constant in every token's embedding (it dominates the normalised
hidden state) and a per-token logit bias in ``lm_head``, halved for the pure
whitespace tokens (space, tab, LF, CR).  Whitespace is then never preferred
when anything else is allowed.

Offered tools, the model calls one, the same way every time, so that a tool
parser is exercised for real: right after the generation prompt
(``<|im_start|>assistant\n``) it emits ``<tool_call>``, then the single
token :data:`TOOL_CALL_JSON` (``get_weather`` for Paris in celsius), then
``</tool_call>`` and ``<|im_end|>``.  The hermes parser turns that into a
``tool_calls`` entry; a wrong parser leaves it as text in ``content`` (or
drops it), which ``cli.py verify`` must catch.  Hand-set weights do it, with
residual dimensions 1-5 reserved (nothing random reads them into the logits
or writes into them):

- four mark a token's identity in its embedding: ``\n``, ``<tool_call>``,
  the call token, ``</tool_call>``;
- one attention head of layer 0 (query head 3: a constant query, and a key
  and a value that only ``<tool_call>`` has, on the slowest rotary pair so
  position does not matter) notices the ``<tool_call>`` tokens that the
  tools section of the system prompt contains, and writes "tools offered"
  into dimension 5;
- ``lm_head`` walks the chain: ``<tool_call>`` scores high only when the
  current token is ``\n`` *and* tools are offered; each later step scores
  high when the previous token's identity is present; off the chain these
  three tokens score far below every other token, so plain chat never
  writes them.

Without tools nothing changes: the same gibberish (until ``max_tokens`` or
a chance ``<|im_end|>``).

The output is a pure function of ``seed``: the same bytes every time, and
:func:`write_tiny_model` leaves files that already hold those bytes untouched.
"""

from __future__ import annotations

import json
import os
import random
import sys
from array import array
from pathlib import Path

__all__ = [
    "HIDDEN_SIZE",
    "NUM_LAYERS",
    "NUM_ATTENTION_HEADS",
    "NUM_KV_HEADS",
    "HEAD_DIM",
    "INTERMEDIATE_SIZE",
    "VOCAB_SIZE",
    "MAX_POSITION_EMBEDDINGS",
    "SPECIAL_TOKENS",
    "TOOL_CALL_START",
    "TOOL_CALL_END",
    "TOOL_CALL_JSON",
    "CHAT_TEMPLATE",
    "tiny_model_files",
    "write_tiny_model",
]

# --------------------------------------------------------------------------
# Architecture
# --------------------------------------------------------------------------

HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_ATTENTION_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN_SIZE // NUM_ATTENTION_HEADS  # 32
INTERMEDIATE_SIZE = 256
MAX_POSITION_EMBEDDINGS = 32768
ROPE_THETA = 1000000.0
RMS_NORM_EPS = 1e-6
INIT_STD = 0.02
#: Dimension 0: the embedding's anchor, and in lm_head each token's logit bias (see module doc).
_ANCHOR = 1.0
_BIAS_VALUE = 1.0
_WHITESPACE_BIAS_VALUE = 0.5
#: The tool-call wiring (see module doc): reserved residual dimensions ...
_NEWLINE_DIM, _START_DIM, _CALL_DIM, _END_DIM, _TOOLS_DIM = 1, 2, 3, 4, 5
#: ... an identity feature's value in the embedding (the other dimensions are ~0.02) ...
_FEATURE = 0.15
#: ... the detector head's constant query, key weight and output weight ...
_DETECT_QUERY, _DETECT_KEY, _DETECT_OUT = 12.0, 6.0, 0.1
#: ... and how far below every other token the chain's tokens score when off.
_SUPPRESS = 6.0
_JSON_WHITESPACE = frozenset(b" \t\n\r")

# --------------------------------------------------------------------------
# Tokenizer layout: [256 byte tokens][merged tokens][added tokens]
# --------------------------------------------------------------------------

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
#: The whole call the model makes when offered tools, as one (added) token.
TOOL_CALL_JSON = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'

#: Added tokens, in id order, with their ``special`` flag.
_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    (ENDOFTEXT, True),
    (IM_START, True),
    (IM_END, True),
    (TOOL_CALL_START, False),
    (TOOL_CALL_END, False),
    (TOOL_CALL_JSON, False),
)
SPECIAL_TOKENS = tuple(tok for tok, special in _ADDED_TOKENS if special)

VOCAB_SIZE = 320  # multiple of 64; the tokenizer fills it exactly
_NUM_MERGES = VOCAB_SIZE - 256 - len(_ADDED_TOKENS)  # 58

#: Words whose byte-level prefixes become the merged tokens ("Ġ" is a
#: space); together they yield exactly ``_NUM_MERGES`` new tokens.
_MERGE_WORDS = (
    " the", " and", " to", " of", " is", " in", "ing", "er", "on", "re",
    "at", "en", '":', '", "', '{"', '"}', " name", " arguments", "ation",
    " Paris", " Berlin", " weather",
)

_WEIGHT_FILE = "model.safetensors"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode-character table."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def _byte_level(text: str) -> str:
    table = _bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


def _vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    """Byte tokens (ids 0-255, in byte order), then merged tokens."""
    table = _bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges: list[str] = []
    for word in _MERGE_WORDS:
        pieces = _byte_level(word)
        for end in range(2, len(pieces) + 1):
            left, right = pieces[: end - 1], pieces[end - 1]
            merged = left + right
            if merged in vocab:
                continue
            merges.append(f"{left} {right}")
            vocab[merged] = len(vocab)
    if len(merges) != _NUM_MERGES:  # pragma: no cover - guards edits above
        raise AssertionError(f"_MERGE_WORDS yields {len(merges)} merges, need {_NUM_MERGES}")
    return vocab, merges


def _added_token_ids() -> dict[str, int]:
    first = 256 + _NUM_MERGES
    return {tok: first + i for i, (tok, _special) in enumerate(_ADDED_TOKENS)}


# --------------------------------------------------------------------------
# Chat template (Qwen2.5 / Hermes style)
# --------------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- '\\n' }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role == 'user' or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == 'assistant' %}\n"
    "        {{- '<|im_start|>assistant' }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}\n"
    "            {%- if tool_call.arguments is string %}\n"
    "                {{- tool_call.arguments }}\n"
    "            {%- else %}\n"
    "                {{- tool_call.arguments | tojson }}\n"
    "            {%- endif %}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == 'tool' %}\n"
    "        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}\n"
    "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# --------------------------------------------------------------------------
# File contents
# --------------------------------------------------------------------------


def _json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _config() -> dict:
    ids = _added_token_ids()
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


def _generation_config() -> dict:
    ids = _added_token_ids()
    # Qwen-like chat defaults, deliberately not the coding profile, so that a
    # server-side --override-generation-config is observable.
    return {
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": [ids[IM_END], ids[ENDOFTEXT]],
        "pad_token_id": ids[ENDOFTEXT],
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
    }


def _tokenizer() -> dict:
    vocab, merges = _vocab_and_merges()
    ids = _added_token_ids()
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": ids[tok],
                "content": tok,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
            for tok, special in _ADDED_TOKENS
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def _tokenizer_config() -> dict:
    ids = _added_token_ids()
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {
            str(ids[tok]): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for tok, special in _ADDED_TOKENS
        },
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": MAX_POSITION_EMBEDDINGS,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _special_tokens_map() -> dict:
    return {
        "additional_special_tokens": [IM_START, IM_END],
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
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


def _whitespace_token_ids() -> frozenset[int]:
    """Ids of the tokens that decode to JSON whitespace only."""
    table = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab, _merges = _vocab_and_merges()
    return frozenset(
        token_id
        for token, token_id in vocab.items()
        if all(table[ch] in _JSON_WHITESPACE for ch in token)
    )


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
    """Hand-set the weights that make the tool call (see the module doc).

    Residual dimensions 1-5 are reserved: four mark a token's identity in its
    embedding (``\\n``, ``<tool_call>``, the call token, ``</tool_call>``) and
    one (``tools``) is written by one attention head of layer 0. No other
    weight reads from them into the logits or writes into them, so they hold
    exactly what is set here.
    """
    ids = _added_token_ids()
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
    row = embed[start * HIDDEN_SIZE : (start + 1) * HIDDEN_SIZE]
    marker = HIDDEN_SIZE**0.5 * _FEATURE / sum(v * v for v in row) ** 0.5  # <tool_call> after input_layernorm
    tools = _DETECT_OUT * marker  # what the detector writes into ``tools``
    both = _SUPPRESS / 2 + 1.5  # one feature alone scores -_SUPPRESS/2 + 1.5, both 3.0
    lm_head = tensors["lm_head.weight"]
    _set_row(lm_head, start, {0: -_SUPPRESS, _NEWLINE_DIM: both / _FEATURE, _TOOLS_DIM: both / tools})
    _set_row(lm_head, call, {0: -_SUPPRESS, _START_DIM: (_SUPPRESS + 3) / _FEATURE})
    _set_row(lm_head, end, {0: -_SUPPRESS, _CALL_DIM: (_SUPPRESS + 3) / _FEATURE})
    lm_head[im_end * HIDDEN_SIZE + _END_DIM] = 2.0 / _FEATURE


def _safetensors(seed: int) -> bytes:
    """A safetensors file: u64 LE header length, JSON header, raw BF16 data."""
    tensors = _random_tensors(seed)
    whitespace = _whitespace_token_ids()
    embed, lm_head = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"]
    for token_id in range(VOCAB_SIZE):
        # Dimension 0: the anchor in the embedding, the logit bias in lm_head (see the module doc).
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


def tiny_model_files(*, seed: int = 0) -> dict[str, bytes]:
    """The checkpoint's files, name -> exact bytes, for ``seed``."""
    return {
        "config.json": _json_bytes(_config()),
        "generation_config.json": _json_bytes(_generation_config()),
        _WEIGHT_FILE: _safetensors(seed),
        "special_tokens_map.json": _json_bytes(_special_tokens_map()),
        "tokenizer.json": _json_bytes(_tokenizer()),
        "tokenizer_config.json": _json_bytes(_tokenizer_config()),
    }


def write_tiny_model(path: str | os.PathLike[str], *, seed: int = 0) -> Path:
    """Write the tiny Qwen2 checkpoint into directory ``path`` and return it.

    The directory is created if needed.  Files that already hold the right
    bytes are left alone; others are replaced atomically, so a concurrent
    reader never sees a half-written file.  Other files in the directory are
    not touched.
    """
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    for name, data in tiny_model_files(seed=seed).items():
        dest = target / name
        try:
            if dest.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        tmp = dest.with_name(f".{name}.tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    return target
