"""Measure a running endpoint the way a client sees it: TTFT against prompt length,
throughput and latency against concurrency, and what an output token costs.

Only the OpenAI-compatible HTTP API is used (the ``openai`` client, plus vLLM's
``/tokenize`` to size prompts and ``/version``), so the controller needs no vLLM.

- **Prompts of an exact length.** Each prompt is a unique header (a per-run
  nonce and the request number, so vLLM's prefix cache never serves a
  measured prompt) followed by words; :func:`build_prompt` grows the word list
  with ``/tokenize`` until the count is exact, and every streamed answer's
  ``usage.prompt_tokens`` is recorded to confirm it.
- **TTFT against prompt length.** Per length, one request that is discarded
  (the first at a new shape pays for compilation and allocation), then a few
  measured ones, one at a time. Lengths are capped at the server's max model
  length minus the tokens the request asks for.
- **Concurrency sweep.** Per level, ``level x rounds`` requests with ``level``
  of them in flight, each generating exactly ``output_tokens`` (``ignore_eos``
  plus ``max_tokens``), so levels are comparable. TTFT is the time to the first
  streamed chunk; inter-token latency (ITL) the gaps between later chunks.
- **Cost** per million output tokens from USD per hour and the measured
  output tokens per second.

Every record names what was measured: the model, its revision, the vLLM
version and the running server's full launch flags (``podkit.serverinfo``).
"""

from __future__ import annotations

import math
import random
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import openai

from podkit.client.serverinfo import ServerInfo
from podkit.client.verify import Outcome, worst

DEFAULT_LENGTHS = (1024, 4096, 16384, 32768)
DEFAULT_CONCURRENCY = (1, 4, 16, 64)
TTFT_OUTPUT_TOKENS = 16  # what a TTFT request asks for: the budget left under max_model_len
MAX_TOKENIZE_CALLS = 48

# Words most tokenizers keep whole (one token with its leading space), so a
# prompt converges on its length in a few /tokenize calls.
WORDS = (
    "the of and to in is for that with on as by this from it be are was at or an not "
    "code file test value list return function data model server request error line name type "
    "class import module change patch bug fix call read write open close start stop run build "
    "check state path user key time size count first last next item table field method object "
    "string number result output input option default update create delete load save parse "
    "format print log cache queue thread lock event handler client socket buffer stream token"
).split()
FILLERS = (".", ",", " a", "a", " I", "!", " x", "x", "-", ":")

Tokenize = Callable[[str], int]
Progress = Callable[[str], None]


# ---------------------------------------------------------------- statistics

def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile with linear interpolation between ranks (numpy's default); None if empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p95, mean and count of ``values`` (seconds), rounded to the microsecond."""
    def r(x):
        return None if x is None else round(x, 6)
    return {
        "p50": r(percentile(values, 50)),
        "p95": r(percentile(values, 95)),
        "mean": r(sum(values) / len(values)) if values else None,
        "n": len(values),
    }


def usd_per_million_tokens(usd_per_hour: float | None, tokens_per_second: float | None) -> float | None:
    """What a million output tokens cost at ``tokens_per_second`` on a box billed ``usd_per_hour``."""
    if usd_per_hour is None or not tokens_per_second:
        return None
    return round(usd_per_hour / (tokens_per_second * 3600.0) * 1e6, 4)


def cap_lengths(lengths: Iterable[int], max_model_len: int | None, output_tokens: int) -> tuple[list[int], list[str]]:
    """The prompt lengths that fit under ``max_model_len`` with ``output_tokens`` to spare.

    A length above the limit becomes the limit (once); notes say what changed.
    """
    lengths = list(lengths)
    if max_model_len is None:
        return sorted(set(lengths)), ["max model length unknown: prompt lengths are not capped"]
    limit = max_model_len - output_tokens
    if limit < 1:
        raise ValueError(f"max model length {max_model_len} leaves no room for {output_tokens} output tokens")
    capped = sorted({min(length, limit) for length in lengths})
    over = [length for length in lengths if length > limit]
    notes = []
    if over:
        notes.append(
            f"prompt lengths {', '.join(map(str, sorted(set(over))))} exceed max_model_len {max_model_len} "
            f"minus {output_tokens} output tokens: measured at {limit} instead"
        )
    return capped, notes


# ---------------------------------------------------------------- prompts

@dataclass
class Prompt:
    text: str
    tokens: int  # as /tokenize counts them (== target unless no word or filler fit exactly)
    target: int


def build_prompt(target: int, tokenize: Tokenize, seed: int, nonce: str = "", words_per_token: float = 0.5) -> Prompt:
    """A prompt of exactly ``target`` tokens, as ``tokenize`` counts them.

    The header ``"<nonce> #<seed>:"`` makes every prompt unique from its first
    tokens; words follow, drawn from ``WORDS`` with a generator seeded by
    ``seed``. Steps aim a little short of the missing count (``words_per_token``
    is the first guess, then measured), shrink after an overshoot, and finish
    with single words or fillers. If nothing lands exactly within
    ``MAX_TOKENIZE_CALLS`` the prompt stays just under the target.
    """
    rng = random.Random(seed)
    head = f"{nonce} #{seed}:".strip()
    words: list[str] = []

    def text(ws: list[str]) -> str:
        return head + "".join(" " + w for w in ws)

    count = tokenize(head)
    calls = 1
    if count > target:
        raise ValueError(f"a prompt of {target} tokens is shorter than its own header ({count} tokens)")
    ratio = words_per_token
    suffix = ""
    while count < target and calls < MAX_TOKENIZE_CALLS:
        missing = target - count
        step = max(1, int(missing * ratio * 0.9)) if missing > 4 else 1
        trial = words + [rng.choice(WORDS) for _ in range(step)]
        got = tokenize(text(trial))
        calls += 1
        if got <= target:
            if got > count:
                ratio = (len(trial) - len(words)) / (got - count)
            words, count = trial, got
        elif step > 1:
            ratio *= 0.5
        elif missing == 1 or calls > MAX_TOKENIZE_CALLS // 2:
            break  # one word is too long: finish with a filler below
    for filler in FILLERS:
        if count == target or calls >= MAX_TOKENIZE_CALLS:
            break
        got = tokenize(text(words) + filler)
        calls += 1
        if got == target:
            suffix, count = filler, got
    return Prompt(text(words) + suffix, count, target)


# ---------------------------------------------------------------- one request

@dataclass
class Timing:
    """One streamed request: when it started, when each chunk arrived (perf_counter seconds)."""

    start: float
    chunks: list[float] = field(default_factory=list)
    end: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    outcome: Outcome = Outcome.OK

    @property
    def ttft(self) -> float | None:
        return self.chunks[0] - self.start if self.chunks else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.chunks, self.chunks[1:])]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: immune to chunks that arrive bunched."""
        tokens = self.output_tokens if self.output_tokens is not None else len(self.chunks)
        return (self.chunks[-1] - self.chunks[0]) / (tokens - 1) if self.chunks and tokens > 1 else None


def classify(exc: Exception) -> Outcome:
    if isinstance(exc, openai.APIConnectionError):
        return Outcome.UNREACHABLE
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return Outcome.AUTH
    return Outcome.ERROR


def describe_error(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def aggregate_level(concurrency: int, timings: Sequence[Timing], wall_s: float,
                    usd_per_hour: float | None) -> dict[str, Any]:
    """One concurrency level's figures from its requests' chunk timings and its wall time."""
    done = [t for t in timings if t.error is None and t.chunks]
    output_tokens = sum(t.output_tokens if t.output_tokens is not None else len(t.chunks) for t in done)
    tokens_per_s = output_tokens / wall_s if wall_s > 0 and done else None
    return {
        "concurrency": concurrency,
        "requests": len(timings),
        "completed": len(done),
        "errors": sorted({t.error for t in timings if t.error}),
        "wall_s": round(wall_s, 3),
        "output_tokens": output_tokens,
        "requests_per_s": round(len(done) / wall_s, 4) if wall_s > 0 and done else None,
        "output_tokens_per_s": round(tokens_per_s, 2) if tokens_per_s else None,
        "ttft_s": summary([t.ttft for t in done]),
        "itl_s": summary([gap for t in done for gap in t.gaps]),
        "tpot_s": summary([t.tpot for t in done if t.tpot is not None]),
        "usd_per_million_output_tokens": usd_per_million_tokens(usd_per_hour, tokens_per_s),
    }


def aggregate_length(target: int, warmup: Timing, timings: Sequence[Timing]) -> dict[str, Any]:
    """TTFT at one prompt length; the warm-up request is reported apart and kept out of the figures."""
    done = [t for t in timings if t.error is None and t.chunks]
    return {
        "target_tokens": target,
        "prompt_tokens": sorted({t.prompt_tokens for t in done if t.prompt_tokens is not None}),
        "requests": len(timings),
        "errors": sorted({t.error for t in [warmup, *timings] if t.error}),
        "first_request_ttft_s": None if warmup.ttft is None else round(warmup.ttft, 6),
        "ttft_s": summary([t.ttft for t in done]),
    }


# ---------------------------------------------------------------- the run

@dataclass
class Options:
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    ttft_requests: int = 3
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    rounds: int = 3
    prompt_tokens: int = 512
    output_tokens: int = 256
    timeout: float = 600.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lengths": list(self.lengths), "ttft_requests": self.ttft_requests,
            "concurrency": list(self.concurrency), "rounds": self.rounds,
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens, "timeout_s": self.timeout,
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

    def __init__(self, host: str, base_url: str, api_key: str, model: str, options: Options,
                 server: ServerInfo | None = None, usd_per_hour: float | None = None,
                 cost_source: str | None = None) -> None:
        self.host = host
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.options = options
        self.server = server or ServerInfo(host, error="not read")
        self.usd_per_hour = usd_per_hour
        self.cost_source = cost_source
        self.client = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key=api_key,
                                    max_retries=0, timeout=options.timeout)
        self.nonce = secrets.token_hex(4)  # a new prefix every run: no prefix-cache hits from the last one
        self._seed = 0
        self._seed_lock = threading.Lock()
        self.words_per_token = 0.5
        self.notes: list[str] = []
        self.max_model_len: int | None = None
        self.max_model_len_source: str | None = None
        self.vllm_version: str | None = None
        self.lengths: list[int] = []
        self.sweep_prompt_tokens = options.prompt_tokens
        self.error: str | None = None
        self.outcome = Outcome.OK

    # -- reading the server

    def tokenize(self, text: str) -> int:
        answer = self.client.post(f"{self.base_url}/tokenize", body={"model": self.model, "prompt": text},
                                  cast_to=object)
        return int(answer["count"])

    def _max_model_len(self) -> None:
        for entry in self.client.models.list().data:
            if entry.id == self.model and (entry.model_extra or {}).get("max_model_len"):
                self.max_model_len = int(entry.model_extra["max_model_len"])
                self.max_model_len_source = "GET /v1/models max_model_len"
                return
        flag = self.server.flag("--max-model-len")
        if flag and flag.isdigit():
            self.max_model_len, self.max_model_len_source = int(flag), "the running server's --max-model-len"

    def _version(self) -> None:
        """The host's installed vLLM (``0.32.0+cpu``), else what the server's /version says."""
        self.vllm_version = self.server.vllm_version
        if self.vllm_version is None:
            try:
                answer = self.client.get(f"{self.base_url}/version", cast_to=object)
                self.vllm_version = answer.get("version") if isinstance(answer, dict) else None
            except openai.APIStatusError:
                pass

    def prepare(self) -> int:
        """Read max_model_len and the vLLM version, cap the lengths; the number of requests :meth:`run` sends.

        Raises :class:`BenchAborted` when the endpoint cannot be used.
        """
        try:
            self._max_model_len()
            self._version()
        except openai.APIError as exc:
            raise BenchAborted(describe_error(exc), classify(exc))
        opts = self.options
        self.lengths, notes = cap_lengths(opts.lengths, self.max_model_len, TTFT_OUTPUT_TOKENS)
        self.notes += notes
        sweep, notes = cap_lengths([opts.prompt_tokens], self.max_model_len, opts.output_tokens)
        self.sweep_prompt_tokens = sweep[0]
        self.notes += [n.replace("prompt lengths", "the sweep's prompt length") for n in notes
                       if "unknown" not in n]
        if self.usd_per_hour is None:
            self.notes.append("no cost per hour (give --usd-per-hour, or run on a RunPod pod): cost omitted")
        if self.server.error:
            self.notes.append(f"launch flags unknown: {self.server.error}")
        return self.planned_requests()

    def planned_requests(self) -> int:
        opts = self.options
        return (len(self.lengths) * (1 + opts.ttft_requests) + 1
                + sum(level * opts.rounds for level in opts.concurrency))

    # -- sending requests

    def _next_seed(self) -> int:
        with self._seed_lock:
            self._seed += 1
            return self._seed

    def prompt(self, tokens: int) -> Prompt:
        made = build_prompt(tokens, self.tokenize, self._next_seed(), self.nonce, self.words_per_token)
        if made.tokens > 0:
            self.words_per_token = max(0.05, len(made.text.split()) / made.tokens)
        return made

    def stream(self, prompt: Prompt, max_tokens: int) -> Timing:
        """One streamed completion of exactly ``max_tokens`` tokens, timed chunk by chunk."""
        timing = Timing(time.perf_counter())
        try:
            for chunk in self.client.completions.create(
                model=self.model, prompt=prompt.text, max_tokens=max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
            ):
                now = time.perf_counter()
                if chunk.choices:
                    timing.chunks.append(now)
                if chunk.usage:
                    timing.prompt_tokens = chunk.usage.prompt_tokens
                    timing.output_tokens = chunk.usage.completion_tokens
        except openai.APIError as exc:
            timing.error, timing.outcome = describe_error(exc), classify(exc)
        timing.end = time.perf_counter()
        if timing.error is None and not timing.chunks:
            timing.error, timing.outcome = "the stream ended without a token", Outcome.ERROR
        return timing

    def _checked(self, timing: Timing, prompt: Prompt) -> Timing:
        if timing.outcome in (Outcome.UNREACHABLE, Outcome.AUTH):
            raise BenchAborted(timing.error or "", timing.outcome)
        if timing.prompt_tokens is not None and timing.prompt_tokens != prompt.target:
            note = (f"prompt of {prompt.target} tokens: the server counted {timing.prompt_tokens} "
                    f"(/tokenize said {prompt.tokens})")
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

            def one(prompt: Prompt) -> Timing:
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
        """Both sweeps; the record (see :func:`record`). Never raises for a failing endpoint."""
        started = datetime.now(timezone.utc)
        ttft: list[dict[str, Any]] = []
        sweep: list[dict[str, Any]] = []
        try:
            ttft = self.ttft_sweep(progress)
            sweep = self.concurrency_sweep(progress)
        except BenchAborted as exc:
            self.error, self.outcome = str(exc), exc.outcome
        except (ValueError, openai.APIError) as exc:  # e.g. /tokenize refused, a prompt shorter than its header
            self.error, self.outcome = f"{type(exc).__name__}: {exc}", Outcome.ERROR
        failed = [e for item in [*ttft, *sweep] for e in item["errors"]]
        if failed and self.outcome == Outcome.OK:
            self.outcome = Outcome.ERROR
        return self.record(started, datetime.now(timezone.utc), ttft, sweep)

    def record(self, started: datetime, finished: datetime, ttft: list, sweep: list) -> dict[str, Any]:
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
            "notes": self.notes,
            "error": self.error,
            "outcome": self.outcome.name.lower(),
        }


def failed_record(host: str, base_url: str, model: str, server: dict[str, Any], message: str,
                  outcome: Outcome) -> dict[str, Any]:
    """The record of a host that could not be benchmarked at all."""
    return {"host": host, "endpoint": base_url, "model": model, "server": server, "ttft": [],
            "concurrency": [], "notes": [], "error": message, "outcome": outcome.name.lower()}


def overall(records: Iterable[dict[str, Any]]) -> Outcome:
    """The exit code for a set of records (verify's classes: unreachable, auth, other)."""
    return worst(Outcome[r["outcome"].upper()] for r in records)


# ---------------------------------------------------------------- output

def record_path(folder: Path, host: str, when: datetime) -> Path:
    """``<folder>/<UTC timestamp>-<host>.json`` (the CLI's folder: ``runs/bench``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    return folder / f"{when.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{safe}.json"


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def table(record: dict[str, Any]) -> list[str]:
    """The human-readable lines for one host's record."""
    server = record.get("server") or {}
    head = f"{record['host']}  {record['endpoint']}  {record['model']}"
    if record.get("vllm_version"):
        head += f"  vLLM {record['vllm_version']}"
    if record.get("max_model_len"):
        head += f"  max_model_len {record['max_model_len']}"
    lines = [head]
    if server.get("model"):
        revision = f"@{server['revision'][:12]}" if server.get("revision") else ""
        lines.append(f"  serving {server['model']}{revision}")
    if record.get("error"):
        lines.append(f"  ERROR ({record['outcome']}): {record['error']}")
    if record["ttft"]:
        lines.append(f"  TTFT vs prompt length ({record['ttft_output_tokens']} output tokens, "
                     "first request at each length discarded)")
        lines.append(f"    {'prompt tok':>10} {'n':>3} {'p50 ms':>9} {'p95 ms':>9} {'first ms':>9}")
        for row in record["ttft"]:
            tokens = ",".join(map(str, row["prompt_tokens"])) or str(row["target_tokens"])
            lines.append(f"    {tokens:>10} {row['ttft_s']['n']:>3} {_fmt(row['ttft_s']['p50'], 1e3):>9} "
                         f"{_fmt(row['ttft_s']['p95'], 1e3):>9} {_fmt(row['first_request_ttft_s'], 1e3):>9}"
                         + (f"  errors: {'; '.join(row['errors'])}" if row["errors"] else ""))
    if record["concurrency"]:
        lines.append(f"  concurrency sweep ({record['sweep_prompt_tokens']} prompt + "
                     f"{record['options']['output_tokens']} output tokens per request)")
        lines.append(f"    {'conc':>4} {'reqs':>5} {'req/s':>7} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p95':>9} "
                     f"{'ITL p50':>8} {'ITL p95':>8} {'TPOT p50':>8} {'$/M out':>8}")
        for row in record["concurrency"]:
            lines.append(
                f"    {row['concurrency']:>4} {row['completed']:>5} {_fmt(row['requests_per_s'], 1, 2):>7} "
                f"{_fmt(row['output_tokens_per_s']):>9} {_fmt(row['ttft_s']['p50'], 1e3):>7}ms "
                f"{_fmt(row['ttft_s']['p95'], 1e3):>7}ms {_fmt(row['itl_s']['p50'], 1e3):>6}ms "
                f"{_fmt(row['itl_s']['p95'], 1e3):>6}ms {_fmt(row['tpot_s']['p50'], 1e3):>6}ms "
                f"{_fmt(row['usd_per_million_output_tokens'], 1, 2):>8}"
                + (f"  errors: {'; '.join(row['errors'])}" if row["errors"] else "")
            )
    cost = record.get("cost") or {}
    if cost.get("usd_per_hour") is not None:
        lines.append(f"  cost: ${cost['usd_per_hour']}/h ({cost['source']})")
    lines += [f"  note: {note}" for note in record.get("notes", [])]
    return lines


def write_chart(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """A PNG with two panels: TTFT (p50, p95 dashed) against prompt length, and output
    tokens/s against concurrency; one line per host."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), dpi=100)
    ttft_axes, tput_axes = figure.subplots(1, 2)
    for record in records:
        label = record["host"]
        rows = [r for r in record.get("ttft", []) if r["ttft_s"]["p50"] is not None]
        if rows:
            x = [r["target_tokens"] for r in rows]
            line, = ttft_axes.plot(x, [r["ttft_s"]["p50"] * 1e3 for r in rows], marker="o", label=f"{label} p50")
            ttft_axes.plot(x, [r["ttft_s"]["p95"] * 1e3 for r in rows], linestyle="--", color=line.get_color(),
                           label=f"{label} p95")
        levels = [r for r in record.get("concurrency", []) if r["output_tokens_per_s"]]
        if levels:
            tput_axes.plot([r["concurrency"] for r in levels], [r["output_tokens_per_s"] for r in levels],
                           marker="o", label=label)
    ttft_axes.set(title="TTFT vs prompt length", xlabel="prompt tokens", ylabel="TTFT (ms)")
    tput_axes.set(title="Throughput vs concurrency", xlabel="concurrent requests", ylabel="output tokens/s")
    for axes, key in ((ttft_axes, "target_tokens"), (tput_axes, "concurrency")):
        ticks = sorted({row[key] for r in records for row in r.get("ttft" if key == "target_tokens" else key, [])})
        axes.set_xscale("log", base=2)
        if ticks:
            axes.set_xticks(ticks, [str(t) for t in ticks])
            axes.minorticks_off()
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    models = sorted({f"{r['model']} (vLLM {r.get('vllm_version') or '?'})" for r in records})
    figure.suptitle(", ".join(models))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
