"""bench's pure parts: statistics, cost, length capping, exact-length prompts, the
figures from recorded chunk timings, the table and the chart; then a whole run
against a small fake OpenAI-compatible server on loopback."""

import json
import math
import struct
import threading
import zlib
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from podkit.client.api import VllmApi
from podkit.client.bench import Bench, BenchAborted, Options, overall, record_path, table, write_chart
from podkit.client.bench.prompts import MAX_TOKENIZE_CALLS, build_prompt, cap_lengths
from podkit.client.bench.run import TTFT_OUTPUT_TOKENS
from podkit.client.bench.sessions import (
    SESSION_HEADER,
    Conversation,
    aggregate_sessions,
    build_conversations,
    last_prompt_tokens,
    words_text,
)
from podkit.client.bench.stats import (
    Timing,
    aggregate_length,
    aggregate_level,
    percentile,
    summary,
    usd_per_million_tokens,
)
from podkit.client.serverinfo import ServerInfo


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([10, 20, 30, 40, 50], 50, 30),
        ([10, 20, 30, 40, 50], 95, 48),  # rank 3.8: 40 + 0.8 x 10
        ([4, 1, 3, 2], 50, 2.5),  # unsorted input, between two ranks
        ([1, 2, 3, 4], 0, 1),
        ([1, 2, 3, 4], 100, 4),
        ([7.5], 95, 7.5),
        ([], 50, None),
    ],
)
def test_percentile(values, q, expected):
    assert percentile(values, q) == (None if expected is None else pytest.approx(expected))


def test_summary():
    assert summary([0.1, 0.3, 0.2]) == {"p50": 0.2, "p95": pytest.approx(0.29), "mean": pytest.approx(0.2), "n": 3}
    assert summary([]) == {"p50": None, "p95": None, "mean": None, "n": 0}


@pytest.mark.parametrize(
    "usd, tokens_per_s, expected",
    [
        (2.0, 1000.0, 0.5556),  # 3.6 M tokens an hour for $2
        (2.39, 250.0, 2.6556),
        (None, 1000.0, None),  # no price known
        (2.0, None, None),  # nothing measured
        (2.0, 0.0, None),
    ],
)
def test_usd_per_million_tokens(usd, tokens_per_s, expected):
    assert usd_per_million_tokens(usd, tokens_per_s) == expected


@pytest.mark.parametrize(
    "lengths, max_len, output, capped, noted",
    [
        ((1024, 4096, 16384, 32768), 32768, 16, [1024, 4096, 16384, 32752], True),
        ((1024, 4096, 16384, 32768), 2048, 16, [1024, 2032], True),  # 4K, 16K and 32K collapse to one
        ((256, 1024), 2048, 16, [256, 1024], False),
        ((2032,), 2048, 16, [2032], False),  # exactly at the limit
        ((4096, 1024), None, 16, [1024, 4096], True),  # unknown limit: kept, and said so
    ],
)
def test_cap_lengths(lengths, max_len, output, capped, noted):
    got, notes = cap_lengths(lengths, max_len, output)
    assert got == capped
    assert bool(notes) == noted


def test_cap_lengths_refuses_a_limit_that_leaves_no_room():
    with pytest.raises(ValueError, match="no room"):
        cap_lengths([128], 256, 256)


class FakeTokenizer:
    """Counts tokens the way a tokenizer might, and counts its calls."""

    def __init__(self, count):
        self.count, self.calls = count, 0

    def __call__(self, text):
        self.calls += 1
        return self.count(text)


TOKENIZERS = {
    "one per character": lambda text: len(text),
    "one per word plus BOS": lambda text: 1 + len(text.split()),
    # long words cost two tokens: single words can overshoot by one
    "words of 4 letters per token": lambda text: sum(math.ceil(len(w) / 4) for w in text.split()),
    "characters and spaces merged": lambda text: len(text) - text.count(" ") // 2,
}


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.parametrize("target", [20, 256, 1000, 4096, 32768])
def test_build_prompt_hits_the_exact_count(name, target):
    tokenize = FakeTokenizer(TOKENIZERS[name])
    prompt = build_prompt(target, tokenize, seed=7, nonce="ab12")
    assert prompt.target == target
    assert prompt.tokens == target == TOKENIZERS[name](prompt.text)
    assert tokenize.calls <= MAX_TOKENIZE_CALLS


def test_build_prompt_is_unique_per_seed_and_nonce_and_repeatable():
    count = TOKENIZERS["words of 4 letters per token"]
    first = build_prompt(300, count, seed=1, nonce="aa")
    assert first.text.startswith("aa #1:")
    assert build_prompt(300, count, seed=1, nonce="aa").text == first.text
    others = {build_prompt(300, count, seed=2, nonce="aa").text, build_prompt(300, count, seed=1, nonce="bb").text}
    assert first.text not in others and len(others) == 2


def test_build_prompt_below_its_header_is_refused():
    with pytest.raises(ValueError, match="header"):
        build_prompt(3, len, seed=12345, nonce="cafe")


def timing(start, chunks, tokens=None, prompt_tokens=None, error=None):
    return Timing(
        start,
        list(chunks),
        end=chunks[-1] if chunks else start,
        prompt_tokens=prompt_tokens,
        output_tokens=tokens if tokens is not None else (len(chunks) if chunks else None),
        error=error,
    )


def test_aggregate_level_from_recorded_chunks():
    timings = [
        timing(0.0, [0.1, 0.2, 0.3]),
        timing(0.0, [0.2, 0.25, 0.45]),
        timing(0.1, [], error="HTTP 500: boom"),
    ]
    level = aggregate_level(2, timings, wall_s=0.5, usd_per_hour=3.6)
    assert level["requests"] == 3 and level["completed"] == 2
    assert level["errors"] == ["HTTP 500: boom"]
    assert level["output_tokens"] == 6
    assert level["output_tokens_per_s"] == 12.0
    assert level["requests_per_s"] == 4.0
    assert level["ttft_s"]["p50"] == pytest.approx(0.15) and level["ttft_s"]["n"] == 2
    # gaps 0.1, 0.1, 0.05, 0.2
    assert level["itl_s"]["n"] == 4
    assert level["itl_s"]["p50"] == pytest.approx(0.1)
    assert level["itl_s"]["p95"] == pytest.approx(0.185)
    # (0.3 - 0.1) / 2 and (0.45 - 0.2) / 2
    assert level["tpot_s"]["p50"] == pytest.approx(0.1125)
    assert level["usd_per_million_output_tokens"] == pytest.approx(3.6 / (12 * 3600) * 1e6, rel=1e-4)


def test_aggregate_level_counts_tokens_from_usage_when_chunks_carry_several():
    level = aggregate_level(1, [timing(0.0, [0.5, 1.0], tokens=10)], wall_s=2.0, usd_per_hour=None)
    assert level["output_tokens_per_s"] == 5.0
    assert level["tpot_s"]["p50"] == pytest.approx(0.5 / 9, abs=1e-6)
    assert level["usd_per_million_output_tokens"] is None


def test_aggregate_level_with_nothing_completed():
    level = aggregate_level(4, [timing(0.0, [], error="timeout")] * 4, wall_s=1.0, usd_per_hour=1.0)
    assert level["completed"] == 0 and level["output_tokens_per_s"] is None
    assert level["ttft_s"]["p50"] is None and level["usd_per_million_output_tokens"] is None


def test_aggregate_length_keeps_the_warmup_out():
    warmup = timing(0.0, [2.0])  # paid for compilation
    row = aggregate_length(
        1024, warmup, [timing(0.0, [0.2], prompt_tokens=1024), timing(1.0, [1.4], prompt_tokens=1024)]
    )
    assert row["first_request_ttft_s"] == 2.0
    assert row["ttft_s"]["n"] == 2 and row["ttft_s"]["p50"] == pytest.approx(0.3)
    assert row["prompt_tokens"] == [1024] and row["errors"] == []


def test_record_path():
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert record_path(Path("/p/runs/bench"), "pod/1 a", when) == Path("/p/runs/bench/20260304T050607Z-pod_1_a.json")


def test_overall_outcome():
    assert int(overall([{"outcome": "ok"}, {"outcome": "ok"}])) == 0
    assert int(overall([{"outcome": "ok"}, {"outcome": "error"}, {"outcome": "unreachable"}])) == 3


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    assert struct.unpack(">I", data[29:33])[0] == zlib.crc32(data[12:29])
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


# ---------------------------------------------------------------- a whole run against a fake server


class FakeVllm(BaseHTTPRequestHandler):
    """Enough of vLLM's API for bench: /v1/models, /tokenize (a token per word, of a prompt or a
    chat), /version and streamed /v1/completions and /v1/chat/completions (a role chunk for a chat,
    then a chunk per token, then usage); it keeps each request's session header."""

    max_model_len = 2048
    key = "k"
    requests = []
    sessions = []
    tokens_per_word = 1  # what /tokenize says (usage counts a token per word)
    tokenize_status = 200  # 404: a router that does not forward /tokenize
    chat_text = True  # False: chat chunks without text (special tokens, a parser holding them)

    def log_message(self, *args):
        pass

    def _json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        if self.headers.get("Authorization") != f"Bearer {self.key}":
            self._json(401, {"error": "Unauthorized"})
            return False
        return True

    def do_GET(self):
        if self.path == "/version":
            return self._json(200, {"version": "0.32.0"})
        if not self._authorized():
            return
        entry = {"id": "m", "object": "model", "created": 0, "owned_by": "vllm"}
        if self.max_model_len:
            entry["max_model_len"] = self.max_model_len
        self._json(200, {"object": "list", "data": [entry]})

    def do_POST(self):
        if not self._authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        type(self).sessions.append(self.headers.get(SESSION_HEADER))
        text = body["prompt"] if "prompt" in body else " ".join(m["content"] for m in body["messages"])
        count = len(text.split())
        if self.path == "/tokenize":
            if self.tokenize_status != 200:
                return self._json(self.tokenize_status, {"error": "Not Found"})
            return self._json(200, {"count": count * self.tokens_per_word, "max_model_len": self.max_model_len})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chat = self.path == "/v1/chat/completions"
        kind = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": "c", "object": kind, "created": 0, "model": "m"}
        if chat:  # vLLM's first chat chunk: the role, no text
            role = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
            self.wfile.write(f"data: {json.dumps(role)}\n\n".encode())
        for index in range(body["max_tokens"]):
            delta = {"content": f" t{index}"} if self.chat_text else {}
            piece = {"delta": delta} if chat else {"text": f" t{index}"}
            chunk = {**head, "choices": [{"index": 0, **piece, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": count, "completion_tokens": body["max_tokens"], "total_tokens": 0}
        final = {**head, "choices": [], "usage": usage}
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    FakeVllm.requests = []
    FakeVllm.sessions = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # stops within 50 ms
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    FakeVllm.max_model_len = 2048
    FakeVllm.tokens_per_word = 1
    FakeVllm.tokenize_status = 200
    FakeVllm.chat_text = True


ARGS = ["/models/m", "--served-model-name", "m", "--max-model-len", "1024", "--enforce-eager"]
SMALL = Options(
    lengths=(64, 512, 4096),
    ttft_requests=2,
    concurrency=(1, 3),
    rounds=2,
    prompt_tokens=32,
    output_tokens=8,
    timeout=10,
)


def test_a_whole_run(fake_server, tmp_path):
    info = ServerInfo("box", model="/models/m", vllm_version="0.32.0+cpu", serve_args=ARGS, running=True)
    bench = Bench("box", fake_server, "k", "m", SMALL, info, usd_per_hour=1.5, cost_source="--usd-per-hour")
    planned = bench.prepare()
    assert bench.lengths == [64, 512, 2048 - TTFT_OUTPUT_TOKENS]  # 4096 capped at /v1/models' limit
    assert bench.max_model_len_source == "GET /v1/models max_model_len"
    labels = []
    record = bench.run(labels.append)
    assert len(labels) == planned == 3 * 3 + 1 + (1 + 3) * 2
    completions = [body for path, body in FakeVllm.requests if path == "/v1/completions"]
    assert len(completions) == planned
    assert all(b["stream_options"] == {"include_usage": True} and b["ignore_eos"] is True for b in completions)
    # every prompt is different (no prefix-cache hits), and exactly as long as asked
    assert len({b["prompt"] for b in completions}) == planned
    assert [row["prompt_tokens"] for row in record["ttft"]] == [[64], [512], [2032]]
    assert all(row["ttft_s"]["n"] == 2 and row["ttft_s"]["p50"] > 0 for row in record["ttft"])
    for level in record["concurrency"]:
        assert level["completed"] == level["requests"] == level["concurrency"] * 2
        assert level["output_tokens"] == level["completed"] * 8
        assert level["itl_s"]["n"] == level["completed"] * 7
        assert level["usd_per_million_output_tokens"] > 0
    assert record["outcome"] == "ok" and record["error"] is None
    assert record["server"]["serve_args"] == ARGS and record["vllm_version"] == "0.32.0+cpu"
    assert any("measured at 2032" in note for note in record["notes"])
    text = "\n".join(table(record))
    assert "2032" in text and "vLLM 0.32.0+cpu" in text and "$1.5/h" in text

    chart = write_chart([record, {**record, "host": "other"}], tmp_path / "c" / "chart.png")
    width, height = png_size(chart)
    assert width > 400 and height > 200


def test_max_model_len_falls_back_to_the_launch_flag(fake_server):
    FakeVllm.max_model_len = None
    info = ServerInfo("box", serve_args=ARGS, running=True)
    bench = Bench("box", fake_server, "k", "m", SMALL, info)
    bench.prepare()
    assert bench.max_model_len == 1024 and bench.max_model_len_source == "the running server's --max-model-len"
    assert bench.lengths == [64, 512, 1024 - TTFT_OUTPUT_TOKENS]
    assert bench.vllm_version == "0.32.0"  # the host could not say: the server's /version
    assert any("cost omitted" in note for note in bench.notes)


def test_the_api_client_gives_statuses_counts_and_never_raises_for_a_plain_request(fake_server):
    api = VllmApi(fake_server + "/", "k", "m", timeout=10)
    assert api.base_url == fake_server and api.openai.base_url == fake_server + "/v1/"
    assert api.fetch("/v1/models", key=False).status == 401
    models = api.fetch("/v1/models")
    assert models.ok and json.loads(models.body)["data"][0]["id"] == "m"
    chat = [{"role": "user", "content": "one two three"}]
    assert api.count_chat_tokens(chat) == (3, 2048)
    assert FakeVllm.requests[-1] == ("/tokenize", {"model": "m", "messages": chat, "add_generation_prompt": True})
    assert api.count_tokens("a b c d") == 4 and api.max_model_len() == 2048 and api.version() == "0.32.0"
    assert VllmApi(fake_server, "wrong", "m").count_chat_tokens(chat) is None  # refused: eval does not trim
    gone = VllmApi("http://127.0.0.1:9", "k", "m", timeout=10).fetch("/health")
    assert gone.status is None and not gone.ok and gone.error


def test_a_wrong_key_aborts_as_auth(fake_server):
    with pytest.raises(BenchAborted) as caught:
        Bench("box", fake_server, "wrong", "m", SMALL).prepare()
    assert int(caught.value.outcome) == 4


def test_an_unreachable_endpoint_aborts_as_unreachable():
    with pytest.raises(BenchAborted) as caught:
        Bench("box", "http://127.0.0.1:9", "k", "m", SMALL).prepare()
    assert int(caught.value.outcome) == 3


def test_a_chart_of_a_failed_host_is_still_a_png(tmp_path):
    failed = {"host": "down", "model": "m", "ttft": [], "concurrency": []}
    assert png_size(write_chart([failed], tmp_path / "x.png"))[0] > 0


# ---------------------------------------------------------------- multi-turn sessions


def test_words_text_is_its_head_then_about_that_many_words_and_repeatable():
    text = words_text("ab session 1:", 50, seed=3)
    assert text.startswith("ab session 1: ") and len(text.split()) == 3 + 50
    assert words_text("ab session 1:", 50, seed=3) == text != words_text("ab session 1:", 50, seed=4)
    assert words_text("h:", 0, seed=1) == "h:"


@pytest.mark.parametrize("sessions, turns, first, per_turn", [(1, 1, 32, 8), (2, 3, 64, 16), (5, 4, 200, 20)])
def test_each_turn_resends_the_last_one_and_its_answer(sessions, turns, first, per_turn):
    conversations = build_conversations(sessions, turns, first, per_turn, nonce="cafe")
    assert [c.session_id for c in conversations] == [f"cafe-{n}" for n in range(1, sessions + 1)]
    for conversation in conversations:
        assert conversation.turns == turns
        assert len(conversation.system.split()) == 3 + first
        assert all(len(u.split()) == 4 + per_turn for u in conversation.users)  # "Session 1 turn 2:" and words
        previous = None
        for turn in range(turns):
            messages = conversation.messages(turn)
            assert len(messages) == 2 + 2 * turn
            assert messages[0] == {"role": "system", "content": conversation.system}
            assert messages[-1] == {"role": "user", "content": conversation.users[turn]}
            if previous is not None:  # the growing prefix: the last turn, its answer, a new message
                assert messages[: len(previous)] == previous
                assert messages[len(previous)] == {"role": "assistant", "content": conversation.answers[turn - 1]}
            conversation.answers.append(f"answer {turn}")
            previous = messages


def test_sessions_share_no_prefix_with_each_other():
    first, second = build_conversations(2, 1, 64, 8, nonce="cafe")
    assert first.system.split()[:3] == ["cafe", "session", "1:"]
    assert second.system.split()[:3] == ["cafe", "session", "2:"]
    assert first.system.split()[3:] != second.system.split()[3:]  # and different words after the header
    others = build_conversations(1, 1, 64, 8, nonce="beef")[0]
    assert not others.system.startswith("cafe")  # the next run shares none of this one's prefix either


def test_a_turn_needs_the_answers_before_it():
    conversation = Conversation("s", "system", ["one", "two"])
    with pytest.raises(ValueError, match="needs the answer to turn 1"):
        conversation.messages(1)
    with pytest.raises(IndexError, match="2 turns"):
        conversation.messages(2)


@pytest.mark.parametrize(
    "first, turns, per_turn, output, expected",
    [
        (2048, 1, 128, 256, 2048 + 128 + 2 * 8),  # system + one user message
        (2048, 4, 128, 256, 2048 + 4 * 128 + 3 * 256 + 8 * 8),  # + three earlier answers
        (64, 3, 16, 16, 64 + 48 + 32 + 6 * 8),
    ],
)
def test_last_prompt_tokens(first, turns, per_turn, output, expected):
    assert last_prompt_tokens(first, turns, per_turn, output) == expected


def test_aggregate_sessions_per_turn_and_a_session_that_stopped():
    sessions = [
        [timing(0.0, [0.2, 0.3], prompt_tokens=100), timing(1.0, [1.1, 1.2], prompt_tokens=140)],
        [timing(0.0, [0.4, 0.5], prompt_tokens=101), timing(1.0, [], error="HTTP 500: boom")],  # stopped here
        [timing(0.0, [], error="HTTP 500: boom")],
    ]
    result = aggregate_sessions(sessions, turns=3, wall_s=2.5)
    assert (result["sessions"], result["turns"], result["wall_s"]) == (3, 3, 2.5)
    assert (result["requests"], result["completed"], result["not_sent"]) == (5, 3, 4)
    assert result["errors"] == ["HTTP 500: boom"] and result["output_tokens"] == 6
    first, second, third = result["per_turn"]
    assert (first["turn"], first["requests"], first["completed"]) == (1, 3, 2)
    assert first["prompt_tokens"] == {"min": 100, "max": 101}
    assert first["ttft_s"]["p50"] == pytest.approx(0.3) and first["ttft_s"]["n"] == 2
    assert (second["requests"], second["completed"], second["prompt_tokens"]) == (2, 1, {"min": 140, "max": 140})
    assert second["ttft_s"]["p50"] == pytest.approx(0.1)
    assert third == {
        "turn": 3,
        "requests": 0,
        "completed": 0,
        "errors": [],
        "prompt_tokens": None,
        "ttft_s": {"p50": None, "p95": None, "mean": None, "n": 0},
    }
    assert result["ttft_s"]["n"] == 3


SESSIONS = Options(sessions=3, turns=3, session_tokens=40, turn_tokens=10, output_tokens=5, timeout=10)


@pytest.mark.parametrize("header", [True, False])
def test_a_whole_session_run(fake_server, header):
    options = Options(**{**SESSIONS.__dict__, "session_header": header})
    bench = Bench("box", fake_server, "k", "m", options, ServerInfo("box", serve_args=ARGS, running=True))
    planned = bench.prepare()
    assert planned == 9
    labels = []
    record = bench.run(labels.append)
    assert len(labels) == planned and record["outcome"] == "ok", record["error"]
    assert record["ttft"] == [] and record["concurrency"] == []
    chats = [(body, session) for (path, body), session in zip(FakeVllm.requests, FakeVllm.sessions)]
    assert [path for path, _ in FakeVllm.requests] == ["/tokenize"] + ["/v1/chat/completions"] * 9
    del chats[0]  # /tokenize measured a word as a token
    by_session = {}
    for body, session in chats:
        assert body["max_tokens"] == 5 and body["ignore_eos"] is True and body["stream"] is True
        by_session.setdefault(body["messages"][0]["content"], []).append((body["messages"], session))
    assert len(by_session) == 3
    for turns in by_session.values():
        lengths = [len(messages) for messages, _ in turns]
        assert lengths == [2, 4, 6]  # each session's turns in order, each resending the last
        for (before, _), (after, _) in zip(turns, turns[1:]):
            assert after[: len(before)] == before
            assert after[len(before)] == {"role": "assistant", "content": " t0 t1 t2 t3 t4"}
    # one id per session, the same on each of its turns (what a router's session affinity keys on)
    ids = [{session for _, session in turns} for turns in by_session.values()]
    expected = [{f"{bench.nonce}-{n}"} for n in (1, 2, 3)] if header else [{None}] * 3
    assert sorted(ids, key=str) == sorted(expected, key=str)
    sessions = record["sessions"]
    assert sessions["completed"] == sessions["requests"] == 9 and sessions["errors"] == []
    assert sessions["session_header"] == (SESSION_HEADER if header else None)
    # the fake counts words: 43 in the system prompt, 14 per user message, 5 per answer
    assert [row["prompt_tokens"] for row in sessions["per_turn"]] == [
        {"min": 57, "max": 57},
        {"min": 76, "max": 76},
        {"min": 95, "max": 95},
    ]
    assert all(row["ttft_s"]["n"] == 3 and row["ttft_s"]["p50"] > 0 for row in sessions["per_turn"])
    assert record["options"]["sessions"] == 3 and "lengths" not in record["options"]
    text = "\n".join(table(record))
    assert "3 sessions x 3 turns at once" in text and "total " in text
    assert ("X-Session-ID sent" if header else "no session header") in text


def test_sessions_that_outgrow_the_context_are_refused_before_a_request(fake_server):
    FakeVllm.max_model_len = 512
    options = Options(sessions=2, turns=4, session_tokens=400, turn_tokens=10, output_tokens=16, timeout=10)
    with pytest.raises(BenchAborted, match="about 552 tokens.*max_model_len 512: lower --session-tokens"):
        Bench("box", fake_server, "k", "m", options).prepare()
    assert not [path for path, _ in FakeVllm.requests if "completions" in path]


def test_a_session_stops_at_its_failed_turn(fake_server):
    bench = Bench("box", fake_server, "k", "m", SESSIONS)
    bench.prepare()
    sent = []
    real = bench.chat_stream

    def failing_second_turn(messages, session_id):
        sent.append(len(messages))
        if len(messages) == 4 and session_id.endswith("-2"):
            return timing(0.0, [], error="HTTP 500: boom"), ""
        return real(messages, session_id)

    bench.chat_stream = failing_second_turn
    record = bench.run()
    assert record["outcome"] == "error" and record["sessions"]["not_sent"] == 1
    assert sorted(sent) == [2, 2, 2, 4, 4, 4, 6, 6]
    assert "errors: HTTP 500: boom" in "\n".join(table(record))


@pytest.mark.parametrize(
    "tokens_per_word, status, words, noted",
    [
        (1, 200, 40, False),
        (4, 200, 10, False),  # a byte-level tokenizer: a quarter as many words for the same tokens
        (1, 404, 40, True),  # a router that does not forward /tokenize: a word is taken for a token
    ],
)
def test_session_texts_are_sized_by_the_servers_tokens_per_word(fake_server, tokens_per_word, status, words, noted):
    FakeVllm.tokens_per_word, FakeVllm.tokenize_status = tokens_per_word, status
    bench = Bench("box", fake_server, "k", "m", SESSIONS)
    bench.prepare()
    assert bench.tokens_per_word == (tokens_per_word if status == 200 else 1.0)
    assert any("/tokenize unavailable (HTTP 404" in note for note in bench.notes) == noted
    record = bench.run()
    assert record["sessions"]["tokens_per_word"] == bench.tokens_per_word
    first = next(body for path, body in FakeVllm.requests if path == "/v1/chat/completions")
    assert len(first["messages"][0]["content"].split()) == 3 + words  # "<nonce> session 1:" and the words


def test_chat_chunks_without_text_still_time_the_turn(fake_server):
    """The sandbox's tiny model: its tokens decode to nothing, yet vLLM's role chunk and one chunk
    per token arrive; the turn is timed from them and the answer is empty."""
    FakeVllm.chat_text = False
    bench = Bench("box", fake_server, "k", "m", SESSIONS)
    bench.prepare()
    record = bench.run()
    assert record["outcome"] == "ok" and record["sessions"]["completed"] == 9
    last = [body for path, body in FakeVllm.requests if path == "/v1/chat/completions"][-1]
    assert {m["content"] for m in last["messages"] if m["role"] == "assistant"} == {""}
