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
from pathlib import Path

from podkit.sandbox.tinymodel.tokenizer import (
    CHAT_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    SPECIAL_TOKENS,
    TOOL_CALL_END,
    TOOL_CALL_JSON,
    TOOL_CALL_START,
    VOCAB_SIZE,
    added_token_ids,
    special_tokens_map,
    tokenizer_config,
    tokenizer_json,
)
from podkit.sandbox.tinymodel.weights import (
    HEAD_DIM,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    MAX_POSITION_EMBEDDINGS,
    NUM_ATTENTION_HEADS,
    NUM_KV_HEADS,
    NUM_LAYERS,
    config_json,
    safetensors,
)

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

_WEIGHT_FILE = "model.safetensors"


def _json_bytes(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _generation_config() -> dict:
    ids = added_token_ids()
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


def tiny_model_files(*, seed: int = 0) -> dict[str, bytes]:
    """The checkpoint's files, name -> exact bytes, for ``seed``."""
    return {
        "config.json": _json_bytes(config_json()),
        "generation_config.json": _json_bytes(_generation_config()),
        _WEIGHT_FILE: safetensors(seed),
        "special_tokens_map.json": _json_bytes(special_tokens_map()),
        "tokenizer.json": _json_bytes(tokenizer_json()),
        "tokenizer_config.json": _json_bytes(tokenizer_config(MAX_POSITION_EMBEDDINGS)),
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
