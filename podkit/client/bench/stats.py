"""bench's figures: percentiles, what a token costs, and one request's chunk timings turned into
TTFT, inter-token latency (ITL) and time per output token (TPOT) per prompt length and per
concurrency level."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from podkit.client.outcome import Outcome


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


def aggregate_level(
    concurrency: int, timings: Sequence[Timing], wall_s: float, usd_per_hour: float | None
) -> dict[str, Any]:
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
        "ttft_s": summary([t.ttft for t in done if t.ttft is not None]),
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
        "ttft_s": summary([t.ttft for t in done if t.ttft is not None]),
    }
