"""Measure a running endpoint the way a client sees it: TTFT against prompt length,
throughput and latency against concurrency, and what an output token costs.

Only the OpenAI-compatible HTTP API is used (through :class:`podkit.client.api.VllmApi`:
the ``openai`` client, plus vLLM's ``/tokenize`` to size prompts and ``/version``),
so the controller needs no vLLM.

- **Prompts of an exact length** (:mod:`.prompts`). Each prompt is unique from
  its first tokens, so vLLM's prefix cache never serves a measured prompt, and
  every streamed answer's ``usage.prompt_tokens`` is recorded to confirm its length.
- **TTFT against prompt length.** Per length, one request that is discarded
  (the first at a new shape pays for compilation and allocation), then a few
  measured ones, one at a time. Lengths are capped at the server's max model
  length minus the tokens the request asks for.
- **Concurrency sweep.** Per level, ``level x rounds`` requests with ``level``
  of them in flight, each generating exactly ``output_tokens`` (``ignore_eos``
  plus ``max_tokens``), so levels are comparable. TTFT is the time to the first
  streamed chunk; inter-token latency (ITL) the gaps between later chunks
  (the figures: :mod:`.stats`).
- **Cost** per million output tokens from USD per hour and the measured
  output tokens per second.
- **Multi-turn sessions** (``Options.sessions``, in place of both sweeps):
  conversations that grow as an agent's do (:mod:`.sessions`), all sessions at
  once, each session's turns in order, streamed chat completions with the
  session's id in ``X-Session-ID`` (what a router's session affinity reads).
  TTFT per turn and the total time; no warm-up request, so turn 1 of a cold
  server pays for its first shapes.

Every record names what was measured: the model, its revision, the vLLM
version and the running server's full launch flags (``podkit.client.serverinfo``).
The table and the chart: :mod:`.report`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam

from podkit.client.api import VllmApi, outcome_of
from podkit.client.bench.prompts import Prompt, build_prompt, cap_lengths
from podkit.client.bench.sessions import (
    SESSION_HEADER,
    Conversation,
    aggregate_sessions,
    build_conversations,
    last_prompt_tokens,
    sample_text,
)
from podkit.client.bench.stats import Timing, aggregate_length, aggregate_level
from podkit.client.outcome import Outcome, worst
from podkit.client.serverinfo import ServerInfo
from podkit.settings import FLAGS

DEFAULT_LENGTHS = (1024, 4096, 16384, 32768)
DEFAULT_CONCURRENCY = (1, 4, 16, 64)
TTFT_OUTPUT_TOKENS = 16  # what a TTFT request asks for: the budget left under max_model_len

Progress = Callable[[str], None]


def describe_error(exc: Exception) -> str:
    """An ``openai`` error in one line: the HTTP status and message, else its type and text."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


@dataclass
class Options:
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    ttft_requests: int = 3
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    rounds: int = 3
    prompt_tokens: int = 512
    output_tokens: int = 256
    timeout: float = 600.0
    sessions: int = 0  # > 0: the multi-turn session workload instead of the sweeps
    turns: int = 4
    session_tokens: int = 2048  # each session's system prompt
    turn_tokens: int = 128  # each turn's new user message
    session_header: bool = True

    def as_dict(self) -> dict[str, Any]:
        if self.sessions:
            return {
                "sessions": self.sessions,
                "turns": self.turns,
                "session_tokens": self.session_tokens,
                "turn_tokens": self.turn_tokens,
                "session_header": SESSION_HEADER if self.session_header else None,
                "output_tokens": self.output_tokens,
                "timeout_s": self.timeout,
            }
        return {
            "lengths": list(self.lengths),
            "ttft_requests": self.ttft_requests,
            "concurrency": list(self.concurrency),
            "rounds": self.rounds,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "timeout_s": self.timeout,
        }


class BenchAborted(Exception):
    def __init__(self, message: str, outcome: Outcome):
        super().__init__(message)
        self.outcome = outcome


class Bench:
    """Benchmarks one endpoint. :meth:`prepare` reads the server and plans the
    requests (so a caller can size a progress bar); :meth:`run` sends them and
    returns the record.

    ``server`` is what ``podkit.client.serverinfo.describe`` read on the host.
    """

    def __init__(
        self,
        host: str,
        base_url: str,
        api_key: str,
        model: str,
        options: Options,
        server: ServerInfo | None = None,
        usd_per_hour: float | None = None,
        cost_source: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.host = host
        self.api = VllmApi(base_url, api_key, model, options.timeout, ca_file=ca_file)
        self.base_url = self.api.base_url
        self.model = model
        self.options = options
        self.server = server or ServerInfo(host, error="not read")
        self.usd_per_hour = usd_per_hour
        self.cost_source = cost_source
        self.client = self.api.openai
        self.nonce = secrets.token_hex(4)  # a new prefix every run: no prefix-cache hits from the last one
        self._seed = 0
        self._seed_lock = threading.Lock()
        self.words_per_token = 0.5
        self.tokens_per_word = 1.0  # the session workload's, from one /tokenize
        self.notes: list[str] = []
        self.max_model_len: int | None = None
        self.max_model_len_source: str | None = None
        self.vllm_version: str | None = None
        self.lengths: list[int] = []
        self.sweep_prompt_tokens = options.prompt_tokens
        self.error: str | None = None
        self.outcome = Outcome.OK

    # -- reading the server

    def _max_model_len(self) -> None:
        served = self.api.max_model_len()
        if served:
            self.max_model_len, self.max_model_len_source = served, "GET /v1/models max_model_len"
            return
        flag = self.server.flag(FLAGS["max_model_len"])
        if flag and flag.isdigit():
            self.max_model_len, self.max_model_len_source = int(flag), "the running server's --max-model-len"

    def _version(self) -> None:
        """The host's installed vLLM (``0.32.0+cpu``), else what the server's /version says."""
        self.vllm_version = self.server.vllm_version
        if self.vllm_version is None:
            self.vllm_version = self.api.version()

    def prepare(self) -> int:
        """Read max_model_len and the vLLM version, cap the lengths; the number of requests :meth:`run` sends.

        Raises :class:`BenchAborted` when the endpoint cannot be used.
        """
        try:
            self._max_model_len()
            self._version()
        except openai.APIError as exc:
            raise BenchAborted(describe_error(exc), outcome_of(exc)) from None
        opts = self.options
        if opts.sessions:
            return self._prepare_sessions()
        self.lengths, notes = cap_lengths(opts.lengths, self.max_model_len, TTFT_OUTPUT_TOKENS)
        self.notes += notes
        sweep, notes = cap_lengths([opts.prompt_tokens], self.max_model_len, opts.output_tokens)
        self.sweep_prompt_tokens = sweep[0]
        self.notes += [n.replace("prompt lengths", "the sweep's prompt length") for n in notes if "unknown" not in n]
        if self.usd_per_hour is None:
            self.notes.append("no cost per hour (give --usd-per-hour, or run on a RunPod pod): cost omitted")
        if self.server.error:
            self.notes.append(f"launch flags unknown: {self.server.error}")
        return self.planned_requests()

    def _prepare_sessions(self) -> int:
        opts = self.options
        sample = sample_text()
        try:
            self.tokens_per_word = round(self.api.count_tokens(sample) / len(sample.split()), 3)
        except (openai.APIError, KeyError, TypeError, ValueError) as exc:
            self.notes.append(f"/tokenize unavailable ({describe_error(exc)}): a word is taken for a token")
        longest = last_prompt_tokens(opts.session_tokens, opts.turns, opts.turn_tokens, opts.output_tokens)
        if self.max_model_len is None:
            self.notes.append("max model length unknown: the sessions' length is not checked")
        elif longest + opts.output_tokens > self.max_model_len:
            raise BenchAborted(
                f"the last turn's prompt grows to about {longest} tokens, and {opts.output_tokens} more to answer "
                f"it exceed max_model_len {self.max_model_len}: lower --session-tokens, --turn-tokens, --turns "
                "or --output-tokens",
                Outcome.ERROR,
            )
        if self.server.error:
            self.notes.append(f"launch flags unknown: {self.server.error}")
        return self.planned_requests()

    def planned_requests(self) -> int:
        opts = self.options
        if opts.sessions:
            return opts.sessions * opts.turns
        return len(self.lengths) * (1 + opts.ttft_requests) + 1 + sum(level * opts.rounds for level in opts.concurrency)

    # -- sending requests

    def _next_seed(self) -> int:
        with self._seed_lock:
            self._seed += 1
            return self._seed

    def prompt(self, tokens: int) -> Prompt:
        made = build_prompt(tokens, self.api.count_tokens, self._next_seed(), self.nonce, self.words_per_token)
        if made.tokens > 0:
            self.words_per_token = max(0.05, len(made.text.split()) / made.tokens)
        return made

    def _timed(self, chunks: Callable[[], Iterable[Any]], text: list[str] | None = None) -> Timing:
        """Read one streamed answer chunk by chunk: when each chunk with a choice came, the usage
        the last chunk reports, and (into ``text``) what the chunks said. vLLM sends its first
        chunk (for chat, the role, no text) with the first token; a token a parser holds back or
        a special token sends no text: every chunk with a choice counts."""
        timing = Timing(time.perf_counter())
        try:
            for chunk in chunks():
                now = time.perf_counter()
                if chunk.choices:
                    timing.chunks.append(now)
                    if text is not None:
                        text.append(chunk.choices[0].delta.content or "")
                if chunk.usage:
                    timing.prompt_tokens = chunk.usage.prompt_tokens
                    timing.output_tokens = chunk.usage.completion_tokens
        except openai.APIError as exc:
            timing.error, timing.outcome = describe_error(exc), outcome_of(exc)
        timing.end = time.perf_counter()
        if timing.error is None and not timing.chunks:
            timing.error, timing.outcome = "the stream ended without a token", Outcome.ERROR
        return timing

    def stream(self, prompt: Prompt, max_tokens: int) -> Timing:
        """One streamed completion of exactly ``max_tokens`` tokens, timed chunk by chunk."""
        return self._timed(
            lambda: self.client.completions.create(
                model=self.model,
                prompt=prompt.text,
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        )

    def chat_stream(self, messages: list[ChatCompletionMessageParam], session_id: str) -> tuple[Timing, str]:
        """One streamed chat completion of exactly ``output_tokens`` tokens, timed chunk by chunk,
        and the answer's text."""
        opts, answer = self.options, list[str]()
        timing = self._timed(
            lambda: self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=opts.output_tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
                extra_headers={SESSION_HEADER: session_id} if opts.session_header else None,
            ),
            answer,
        )
        return timing, "".join(answer)

    def session_workload(self, progress: Progress) -> dict[str, Any]:
        """Every session at once, each session's turns in order; a session stops at a failed turn."""
        opts = self.options
        conversations = build_conversations(
            opts.sessions, opts.turns, opts.session_tokens, opts.turn_tokens, self.nonce, self.tokens_per_word
        )

        def one(conversation: Conversation) -> list[Timing]:
            timings = []
            for turn in range(conversation.turns):
                timing, answer = self.chat_stream(conversation.messages(turn), conversation.session_id)
                timings.append(timing)
                progress(f"{self.host}: {opts.sessions} sessions, turn {turn + 1}")
                if timing.error:
                    break
                conversation.answers.append(answer)
            return timings

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=opts.sessions) as pool:
            sessions = list(pool.map(one, conversations))
        wall = time.perf_counter() - start
        for timings in sessions:
            for timing in timings:
                if timing.outcome in (Outcome.UNREACHABLE, Outcome.AUTH):
                    raise BenchAborted(timing.error or "", timing.outcome)
        result = aggregate_sessions(sessions, opts.turns, wall)
        result["session_header"] = SESSION_HEADER if opts.session_header else None
        result["tokens_per_word"] = self.tokens_per_word
        return result

    def _checked(self, timing: Timing, prompt: Prompt) -> Timing:
        if timing.outcome in (Outcome.UNREACHABLE, Outcome.AUTH):
            raise BenchAborted(timing.error or "", timing.outcome)
        if timing.prompt_tokens is not None and timing.prompt_tokens != prompt.target:
            note = (
                f"prompt of {prompt.target} tokens: the server counted {timing.prompt_tokens} "
                f"(/tokenize said {prompt.tokens})"
            )
            if note not in self.notes:
                self.notes.append(note)
        return timing

    def ttft_sweep(self, progress: Progress) -> list[dict[str, Any]]:
        results = []
        for length in self.lengths:
            warmup_prompt = self.prompt(length)
            warmup = self._checked(self.stream(warmup_prompt, TTFT_OUTPUT_TOKENS), warmup_prompt)
            progress(f"{self.host}: TTFT at {length} tokens")
            measured = []
            for _ in range(self.options.ttft_requests):
                prompt = self.prompt(length)
                measured.append(self._checked(self.stream(prompt, TTFT_OUTPUT_TOKENS), prompt))
                progress(f"{self.host}: TTFT at {length} tokens")
            results.append(aggregate_length(length, warmup, measured))
        return results

    def concurrency_sweep(self, progress: Progress) -> list[dict[str, Any]]:
        opts = self.options
        warmup = self.prompt(self.sweep_prompt_tokens)  # the sweep's shape, compiled before it counts
        self._checked(self.stream(warmup, opts.output_tokens), warmup)
        progress(f"{self.host}: warm-up")
        levels = []
        for level in opts.concurrency:
            prompts = [self.prompt(self.sweep_prompt_tokens) for _ in range(level * opts.rounds)]

            def one(prompt: Prompt, level: int = level) -> Timing:
                timing = self.stream(prompt, opts.output_tokens)
                progress(f"{self.host}: {level} concurrent")
                return timing

            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=level) as pool:
                timings = list(pool.map(one, prompts))
            wall = time.perf_counter() - start
            for timing, prompt in zip(timings, prompts):
                self._checked(timing, prompt)
            levels.append(aggregate_level(level, timings, wall, self.usd_per_hour))
        return levels

    def run(self, progress: Progress = lambda label: None) -> dict[str, Any]:
        """Both sweeps, or the session workload; the record (see :meth:`record`). Never raises for a
        failing endpoint."""
        started = datetime.now(UTC)
        ttft: list[dict[str, Any]] = []
        sweep: list[dict[str, Any]] = []
        sessions: dict[str, Any] | None = None
        try:
            if self.options.sessions:
                sessions = self.session_workload(progress)
            else:
                ttft = self.ttft_sweep(progress)
                sweep = self.concurrency_sweep(progress)
        except BenchAborted as exc:
            self.error, self.outcome = str(exc), exc.outcome
        except (ValueError, openai.APIError) as exc:  # e.g. /tokenize refused, a prompt shorter than its header
            self.error, self.outcome = f"{type(exc).__name__}: {exc}", Outcome.ERROR
        failed = [e for item in [*ttft, *sweep, *([sessions] if sessions else [])] for e in item["errors"]]
        if failed and self.outcome == Outcome.OK:
            self.outcome = Outcome.ERROR
        return self.record(started, datetime.now(UTC), ttft, sweep, sessions)

    def record(
        self, started: datetime, finished: datetime, ttft: list, sweep: list, sessions: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return {
            "host": self.host,
            "endpoint": self.base_url,
            "model": self.model,
            "server": self.server.as_dict(),
            "vllm_version": self.vllm_version,
            "max_model_len": self.max_model_len,
            "max_model_len_source": self.max_model_len_source,
            "started_at": started.isoformat(timespec="seconds"),
            "duration_s": round((finished - started).total_seconds(), 1),
            "options": self.options.as_dict(),
            "ttft_output_tokens": TTFT_OUTPUT_TOKENS,
            "sweep_prompt_tokens": self.sweep_prompt_tokens,
            "cost": {"usd_per_hour": self.usd_per_hour, "source": self.cost_source},
            "ttft": ttft,
            "concurrency": sweep,
            "sessions": sessions,
            "notes": self.notes,
            "error": self.error,
            "outcome": self.outcome.name.lower(),
        }


def failed_record(
    host: str, base_url: str, model: str, server: dict[str, Any], message: str, outcome: Outcome
) -> dict[str, Any]:
    """The record of a host that could not be benchmarked at all."""
    return {
        "host": host,
        "endpoint": base_url,
        "model": model,
        "server": server,
        "ttft": [],
        "concurrency": [],
        "sessions": None,
        "notes": [],
        "error": message,
        "outcome": outcome.name.lower(),
    }


def overall(records: Iterable[dict[str, Any]]) -> Outcome:
    """The exit code for a set of records (verify's classes: unreachable, auth, other)."""
    return worst(Outcome[r["outcome"].upper()] for r in records)
