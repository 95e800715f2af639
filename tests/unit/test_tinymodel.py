"""Tests for podkit.sandbox.tinymodel: the stdlib-only tiny Qwen2 checkpoint writer."""

from __future__ import annotations

import json
import struct
import time

import pytest

from podkit.sandbox import tinymodel
from podkit.sandbox.tinymodel import tiny_model_files, write_tiny_model

EXPECTED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return tiny_model_files(seed=0)


@pytest.fixture(scope="module")
def config(files) -> dict:
    return json.loads(files["config.json"])


@pytest.fixture(scope="module")
def added(files) -> dict[str, int]:
    return {t["content"]: t["id"] for t in json.loads(files["tokenizer.json"])["added_tokens"]}


def _parse_safetensors(data: bytes) -> tuple[dict, int]:
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    return header, 8 + header_len


def test_writes_expected_files_and_returns_path(tmp_path):
    out = write_tiny_model(tmp_path / "tiny")
    assert out == tmp_path / "tiny"
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES


def test_deterministic_and_idempotent(tmp_path, files):
    a = write_tiny_model(tmp_path / "a", seed=0)
    mtimes = {p.name: p.stat().st_mtime_ns for p in a.iterdir()}
    write_tiny_model(a, seed=0)  # second run: same bytes, files left alone
    assert {p.name: p.stat().st_mtime_ns for p in a.iterdir()} == mtimes
    b = write_tiny_model(tmp_path / "b", seed=0)
    for name in EXPECTED_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes() == files[name]


def test_seed_changes_only_the_weights(files):
    other = tiny_model_files(seed=1)
    assert other["model.safetensors"] != files["model.safetensors"]
    for name in EXPECTED_FILES - {"model.safetensors"}:
        assert other[name] == files[name]


def test_rewrites_a_damaged_file(tmp_path, files):
    out = write_tiny_model(tmp_path / "m")
    (out / "model.safetensors").write_bytes(b"garbage")
    write_tiny_model(out)
    assert (out / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_fast():
    start = time.perf_counter()
    tiny_model_files(seed=123)
    assert time.perf_counter() - start < 5.0


def test_safetensors_layout(files, config):
    data = files["model.safetensors"]
    header, data_start = _parse_safetensors(data)
    assert data_start % 8 == 0
    assert header.pop("__metadata__") == {"format": "pt"}
    spans = []
    for name, info in header.items():
        assert info["dtype"] == "BF16", name
        begin, end = info["data_offsets"]
        numel = 1
        for dim in info["shape"]:
            numel *= dim
        assert end - begin == numel * 2, name
        spans.append((begin, end))
    # The tensors tile the data buffer exactly: no gaps, no overlaps.
    spans.sort()
    assert spans[0][0] == 0
    assert all(prev[1] == cur[0] for prev, cur in zip(spans, spans[1:]))
    assert data_start + spans[-1][1] == len(data)


def test_weight_names_and_shapes(files, config):
    header, _ = _parse_safetensors(files["model.safetensors"])
    shapes = {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config["head_dim"]
    inter = config["intermediate_size"]
    assert head_dim * heads == hidden

    expected = {
        "model.embed_tokens.weight": (config["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        expected.update(
            {
                p + "input_layernorm.weight": (hidden,),
                p + "post_attention_layernorm.weight": (hidden,),
                p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
                p + "self_attn.q_proj.bias": (heads * head_dim,),
                p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
                p + "self_attn.k_proj.bias": (kv_heads * head_dim,),
                p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
                p + "self_attn.v_proj.bias": (kv_heads * head_dim,),
                p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
                p + "mlp.gate_proj.weight": (inter, hidden),
                p + "mlp.up_proj.weight": (inter, hidden),
                p + "mlp.down_proj.weight": (hidden, inter),
            }
        )
    expected["lm_head.weight"] = (config["vocab_size"], hidden)  # untied: the output layer is its own
    assert shapes == expected


def _bf16_values(files, name) -> list[float]:
    data = files["model.safetensors"]
    header, start = _parse_safetensors(data)
    begin, end = header[name]["data_offsets"]
    raw = data[start + begin : start + end]
    # bf16 -> float32: the bf16 bits are the high half of the float32.
    return [struct.unpack("<f", b"\x00\x00" + raw[i : i + 2])[0] for i in range(0, len(raw), 2)]


def test_weight_values(files):
    assert set(_bf16_values(files, "model.norm.weight")) == {1.0}
    assert set(_bf16_values(files, "model.layers.1.input_layernorm.weight")) == {1.0}
    values = _bf16_values(files, "model.layers.0.mlp.gate_proj.weight")
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    assert abs(mean) < 0.002
    assert 0.018 < std < 0.022
    assert max(abs(v) for v in values) < 0.2


def test_output_layer_disfavours_whitespace(files, config, added):
    """Dimension 0 is a constant anchor in the embedding and a logit bias in
    lm_head, lower for pure whitespace tokens, so constrained JSON cannot be
    padded with whitespace forever."""
    hidden = config["hidden_size"]
    emb = _bf16_values(files, "model.embed_tokens.weight")
    assert {emb[t * hidden] for t in range(config["vocab_size"])} == {1.0}
    head = _bf16_values(files, "lm_head.weight")
    dim0 = {token_id: head[token_id * hidden] for token_id in range(config["vocab_size"])}
    whitespace = {9, 10, 13, 32}  # byte tokens: tab, LF, CR, space
    chain = {added[tinymodel.TOOL_CALL_START], added[tinymodel.TOOL_CALL_JSON], added[tinymodel.TOOL_CALL_END]}
    assert {dim0[t] for t in whitespace} == {0.5}
    assert {v for t, v in dim0.items() if t not in whitespace | chain} == {1.0}
    # The other dimensions stay small and random.
    rest = [v for i, v in enumerate(emb) if i % hidden]
    assert max(abs(v) for v in rest) < 0.2


def _rows(files, name, width):
    values = _bf16_values(files, name)
    return [values[i : i + width] for i in range(0, len(values), width)]


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_the_model_calls_the_tool_when_offered_tools(files, config, added):
    """The hand-set wiring, read from the weights: a layer-0 head notices a
    <tool_call> anywhere in the context (the tools prompt has two), and the
    output layer then walks "\n" -> <tool_call> -> the call -> </tool_call>
    -> <|im_end|>; without tools "\n" is followed by the usual gibberish.
    (Layers add small random terms on top; tests/e2e/test_verify.py runs it in vLLM.)"""
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    emb = _rows(files, "model.embed_tokens.weight", hidden)
    lm_head = _rows(files, "lm_head.weight", hidden)
    start, call, end, im_end = (
        added[t] for t in ("<tool_call>", tinymodel.TOOL_CALL_JSON, "</tool_call>", "<|im_end|>")
    )
    newline = 10

    def normed(row):  # RMSNorm with weight 1.0
        scale = (hidden / _dot(row, row)) ** 0.5
        return [v * scale for v in row]

    # The detector: query head 3 is a constant on the slowest rotary dimension (15),
    # key and value of kv head 1 are non-zero for <tool_call> only.
    p = "model.layers.0.self_attn."
    q_bias = _bf16_values(files, p + "q_proj.bias")[3 * head_dim : 4 * head_dim]
    assert [i for i, v in enumerate(q_bias) if v] == [15]
    assert not any(
        _rows(files, p + "q_proj.weight", hidden)[3 * head_dim + i] != [0.0] * hidden for i in range(head_dim)
    )
    key_row = _rows(files, p + "k_proj.weight", hidden)[head_dim + 15]
    value_row = _rows(files, p + "v_proj.weight", hidden)[head_dim]
    scores = {t: q_bias[15] * _dot(key_row, normed(emb[t])) / head_dim**0.5 for t in range(config["vocab_size"])}
    assert scores[start] > 15 and {s for t, s in scores.items() if t != start} == {0.0}
    assert {_dot(value_row, normed(emb[t])) for t in range(config["vocab_size"]) if t != start} == {0.0}
    o_proj = _rows(files, p + "o_proj.weight", config["num_attention_heads"] * head_dim)
    writes = [row for row, weights in enumerate(o_proj) if weights[3 * head_dim]]
    tools_dim = writes[0]
    assert len(writes) == 1 and not any(o_proj[row][2 * head_dim] for row in range(hidden))
    tools = o_proj[tools_dim][3 * head_dim] * _dot(value_row, normed(emb[start]))
    # No layer writes into the dimensions the wiring reserved.
    reserved = [
        d
        for d in range(1, hidden)
        if emb[newline][d] > 0.1 or emb[start][d] > 0.1 or emb[call][d] > 0.1 or emb[end][d] > 0.1
    ] + [tools_dim]
    for layer in range(config["num_hidden_layers"]):
        down = _rows(files, f"model.layers.{layer}.mlp.down_proj.weight", config["intermediate_size"])
        attn_out = _rows(files, f"model.layers.{layer}.self_attn.o_proj.weight", hidden)
        for d in reserved:
            assert not any(down[d]) and (not any(attn_out[d]) or (layer, d) == (0, tools_dim))

    def next_token(token, tools_offered):
        residual = list(emb[token])
        residual[tools_dim] += tools if tools_offered else 0.0
        logits = [_dot(residual, row) for row in lm_head]
        return max(range(len(logits)), key=logits.__getitem__)

    assert [next_token(t, True) for t in (newline, start, call, end)] == [start, call, end, im_end]
    assert next_token(newline, False) not in (start, call, end, im_end)
    assert next_token(newline, True) == start and next_token(ord("a"), True) != start


def test_config_consistent(config):
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["model_type"] == "qwen2"
    assert config["hidden_size"] == 128
    assert config["num_hidden_layers"] == 2
    assert config["num_attention_heads"] == 4
    assert config["num_key_value_heads"] == 2
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert config["tie_word_embeddings"] is False
    assert config["torch_dtype"] == "bfloat16"
    assert config["max_position_embeddings"] >= 4096
    assert config["vocab_size"] % 64 == 0
    assert config["rope_theta"] > 0 and config["rms_norm_eps"] > 0


def test_tokenizer_covers_vocab(files, config):
    tok = json.loads(files["tokenizer.json"])
    model = tok["model"]
    assert model["type"] == "BPE"
    ids = set(model["vocab"].values()) | {t["id"] for t in tok["added_tokens"]}
    # Every id the model can emit decodes, and nothing lies beyond the embedding.
    assert ids == set(range(config["vocab_size"]))
    assert len(model["vocab"]) + len(tok["added_tokens"]) == config["vocab_size"]
    # Merges are valid: both halves and their concatenation are tokens.
    for merge in model["merges"]:
        left, right = merge.split(" ")
        assert left in model["vocab"] and right in model["vocab"]
        assert left + right in model["vocab"]
    assert tok["pre_tokenizer"]["type"] == "ByteLevel"
    assert tok["decoder"]["type"] == "ByteLevel"

    added = {t["content"]: t for t in tok["added_tokens"]}
    for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert added[name]["special"] is True
    for name in ("<tool_call>", "</tool_call>", tinymodel.TOOL_CALL_JSON):
        assert added[name]["special"] is False  # must survive skip_special_tokens
    assert added["<|endoftext|>"]["id"] == config["bos_token_id"]
    assert added["<|im_end|>"]["id"] == config["eos_token_id"]

    gen = json.loads(files["generation_config.json"])
    assert config["eos_token_id"] in gen["eos_token_id"]
    tok_cfg = json.loads(files["tokenizer_config.json"])
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_cfg["eos_token"] == "<|im_end|>"
    assert tok_cfg["pad_token"] == "<|endoftext|>"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
EXPECTED_RENDER = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOLS[0])
    + "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_chat_template_renders_tools_with_jinja():
    sandbox = pytest.importorskip("jinja2.sandbox")

    # The environment transformers uses for chat templates.
    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **_kw: json.dumps(x, ensure_ascii=False)
    template = env.from_string(tinymodel.CHAT_TEMPLATE)
    assert template.render(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True) == (EXPECTED_RENDER)
    # Arguments given as a JSON string (the OpenAI wire format) render verbatim.
    as_string = [dict(m) for m in MESSAGES]
    as_string[2] = {
        **MESSAGES[2],
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
    }
    assert template.render(messages=as_string, tools=TOOLS, add_generation_prompt=True) == (EXPECTED_RENDER)
    plain = template.render(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert plain == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n")


def test_tokenizer_loads_and_round_trips_with_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = write_tiny_model(tmp_path / "tiny")
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    assert len(tok) == 320
    assert tok.eos_token == "<|im_end|>"

    text = 'Hi <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> é 日本'
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.convert_tokens_to_ids("<tool_call>") in ids
    assert tok.convert_tokens_to_ids("</tool_call>") in ids
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == text  # tool tags are not special
    for name in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"):
        assert len(tok.encode(name, add_special_tokens=False)) == 1, name

    rendered = tok.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert rendered == EXPECTED_RENDER


def test_greedy_generation_calls_the_tool_with_transformers(tmp_path):
    """The same walk in a real forward pass (where torch and transformers are installed,
    e.g. the sandbox's vLLM venv), for several seeds: the random weights do not matter."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for seed in (0, 1, 2):
        path = write_tiny_model(tmp_path / f"tiny{seed}", seed=seed)
        tok = transformers.AutoTokenizer.from_pretrained(str(path))
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16)
        answers = {}
        for tools in (TOOLS, None):
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": "Weather in Paris?"}],
                tools=tools,
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )
            out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
            answers[bool(tools)] = tok.decode(out[0][prompt["input_ids"].shape[1] :])
        assert answers[True] == f"<tool_call>{tinymodel.TOOL_CALL_JSON}</tool_call><|im_end|>", seed
        assert "<tool_call>" not in answers[False], seed
