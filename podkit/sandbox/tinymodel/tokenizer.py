"""The tiny model's tokenizer: a byte-level BPE vocabulary that fills the embedding exactly, its
special and added tokens (the tool call among them), and a Qwen2.5/Hermes-style chat template.

Layout: [256 byte tokens][merged tokens][added tokens]. See :mod:`podkit.sandbox.tinymodel`.
"""

from __future__ import annotations

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
    " the",
    " and",
    " to",
    " of",
    " is",
    " in",
    "ing",
    "er",
    "on",
    "re",
    "at",
    "en",
    '":',
    '", "',
    '{"',
    '"}',
    " name",
    " arguments",
    "ation",
    " Paris",
    " Berlin",
    " weather",
)

_JSON_WHITESPACE = frozenset(b" \t\n\r")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode-character table."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
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


def added_token_ids() -> dict[str, int]:
    first = 256 + _NUM_MERGES
    return {tok: first + i for i, (tok, _special) in enumerate(_ADDED_TOKENS)}


def whitespace_token_ids() -> frozenset[int]:
    """Ids of the tokens that decode to JSON whitespace only."""
    table = {ch: b for b, ch in _bytes_to_unicode().items()}
    vocab, _merges = _vocab_and_merges()
    return frozenset(
        token_id for token, token_id in vocab.items() if all(table[ch] in _JSON_WHITESPACE for ch in token)
    )


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
    '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}\n'
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
    '            {{- \'\\n<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}\n'
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


def tokenizer_json() -> dict:
    vocab, merges = _vocab_and_merges()
    ids = added_token_ids()
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


def tokenizer_config(model_max_length: int) -> dict:
    ids = added_token_ids()
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
        "model_max_length": model_max_length,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict:
    return {
        "additional_special_tokens": [IM_START, IM_END],
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
    }
