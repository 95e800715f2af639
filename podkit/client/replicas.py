"""A router's replicas as the bench sees them: requests served and prefix-cache hits, from each
replica's own ``/metrics``.

A router host (``podkit_role = "router"``) sends requests to the hosts of the inventory group
its ``podkit_router_group`` names. The router cannot say where each request went or what the
replica's prefix cache made of it, but each replica's vLLM counts both:

- ``vllm:request_success_total``: requests finished, one series per finish reason (summed);
- ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total``: prompt tokens looked
  up in the prefix cache, and those found there (vLLM v1, the CPU build included).

:func:`read` takes one replica's counters through its edge (with the key, TLS against its pinned
CA), once before the workload and once after; :func:`figures` turns the two reads into the
per-replica table and the overall hit rate, and :func:`lines` prints it. A replica that cannot
be read is a row with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from podkit.client.api import VllmApi
from podkit.client.targets import each_host
from podkit.remote.idle.clock import parse_metrics

COUNTERS = {
    "vllm:request_success_total": "requests",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
}
R = TypeVar("R")


def router_group(data: Mapping[str, Any]) -> str | None:
    """The inventory group whose hosts are the replicas, when ``data`` is a router host's."""
    if data.get("podkit_role") != "router":
        return None
    return str(data.get("podkit_router_group") or "") or None


def parse_counters(text: str) -> dict[str, float]:
    """The counters of :data:`COUNTERS` from Prometheus text, each summed over its labels (finish
    reasons, engines), read as the idle watcher reads them. Raises ValueError when one is missing
    (not a vLLM, or a vLLM without them)."""
    found = parse_metrics(text, COUNTERS) or {}
    missing = [metric for metric, name in COUNTERS.items() if name not in found]
    if missing:
        raise ValueError(f"/metrics has no {', '.join(missing)}")
    return found


@dataclass(frozen=True)
class Replica:
    """One replica's edge: its name, base URL (no ``/v1``), API key and pinned CA (internal TLS)."""

    name: str
    base_url: str
    api_key: str
    ca_file: str | None = None


@dataclass(frozen=True)
class Reading:
    """One read of a replica's counters, or why there is none."""

    name: str
    counters: dict[str, float] | None = None
    error: str | None = None


def read(replica: Replica, timeout: float = 15.0) -> Reading:
    """``replica``'s counters through its edge; never raises."""
    answer = VllmApi(replica.base_url, replica.api_key, "", timeout, replica.ca_file).fetch("/metrics")
    if answer.status is None:
        return Reading(replica.name, error=f"{replica.base_url}/metrics: no answer ({answer.error})")
    if not answer.ok:
        return Reading(replica.name, error=f"{replica.base_url}/metrics answered {answer.status}")
    try:
        return Reading(replica.name, parse_counters(answer.body.decode("utf-8", "replace")))
    except ValueError as exc:
        return Reading(replica.name, error=f"{replica.base_url}{exc}")  # "<url>/metrics has no ..."


def read_all(replicas: Sequence[Replica | Reading]) -> list[Reading]:
    """Every replica's counters, in parallel; a :class:`Reading` given in place of a replica (one
    that could not even be addressed) stays as it is."""
    return each_host(lambda r: r if isinstance(r, Reading) else read(r), replicas)


def _rate(hits: float, queries: float) -> float | None:
    return round(hits / queries, 4) if queries > 0 else None


def figures(before: Sequence[Reading], after: Sequence[Reading], group: str | None = None) -> dict[str, Any]:
    """Per replica of ``group`` (in ``after``'s order), what the workload added between the two reads: requests
    served, prefix-cache hits and queries (tokens) and their ratio; then the totals and the overall
    hit rate over the replicas read both times. A counter that went back (the replica restarted
    between the reads) is an error row, not a negative figure."""
    earlier = {r.name: r for r in before}
    rows = []
    for reading in after:
        first = earlier.get(reading.name)
        row: dict[str, Any] = {
            "replica": reading.name,
            "requests": None,
            "prefix_cache_hits": None,
            "prefix_cache_queries": None,
            "hit_rate": None,
            "error": None,
        }
        if first is None or first.counters is None:
            row["error"] = "not read before the workload" + (f": {first.error}" if first and first.error else "")
        elif reading.counters is None:
            row["error"] = reading.error or "not read after the workload"
        else:
            delta = {k: reading.counters[k] - first.counters[k] for k in COUNTERS.values()}
            if min(delta.values()) < 0:
                row["error"] = "its counters went back between the reads (the replica restarted?)"
            else:
                row.update(
                    requests=int(delta["requests"]),
                    prefix_cache_hits=int(delta["hits"]),
                    prefix_cache_queries=int(delta["queries"]),
                    hit_rate=_rate(delta["hits"], delta["queries"]),
                )
        rows.append(row)
    read_rows = [r for r in rows if r["error"] is None]
    hits = sum(r["prefix_cache_hits"] for r in read_rows)
    queries = sum(r["prefix_cache_queries"] for r in read_rows)
    return {
        "group": group,
        "error": None,
        "replicas": rows,
        "requests": sum(r["requests"] for r in read_rows),
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "hit_rate": _rate(hits, queries),
        "unread": [r["replica"] for r in rows if r["error"]],
    }


def unread(group: str | None, reason: str) -> dict[str, Any]:
    """The table of a router whose replicas could not be found at all (no such group, no hosts)."""
    return {
        "group": group,
        "error": reason,
        "replicas": [],
        "requests": None,
        "prefix_cache_hits": None,
        "prefix_cache_queries": None,
        "hit_rate": None,
        "unread": [],
    }


def around(group: str | None, replicas: Sequence[Replica | Reading], workload: Callable[[], R]) -> tuple[R, dict]:
    """Run ``workload`` between two reads of every replica's counters: its result, and the
    per-replica table of what it added (:func:`figures`)."""
    before = read_all(replicas)
    result = workload()
    return result, figures(before, read_all(replicas), group)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def lines(table: Mapping[str, Any]) -> list[str]:
    """The per-replica table a person reads (indented for bench's report)."""
    group = f" of group {table['group']}" if table.get("group") else ""
    out = [f"  replicas{group} (from each replica's /metrics, before and after the workload)"]
    if table.get("error"):
        return out + [f"    ERROR: {table['error']}"]
    width = max([len("replica"), *(len(r["replica"]) for r in table["replicas"])])
    out.append(f"    {'replica':<{width}} {'requests':>8} {'cached tok':>10} {'queried tok':>11} {'hit rate':>8}")
    for row in table["replicas"]:
        if row["error"]:
            out.append(f"    {row['replica']:<{width}} not read: {row['error']}")
            continue
        out.append(
            f"    {row['replica']:<{width}} {row['requests']:>8} {row['prefix_cache_hits']:>10} "
            f"{row['prefix_cache_queries']:>11} {_percent(row['hit_rate']):>8}"
        )
    out.append(
        f"    {'all':<{width}} {table['requests']:>8} {table['prefix_cache_hits']:>10} "
        f"{table['prefix_cache_queries']:>11} {_percent(table['hit_rate']):>8}"
        + (f"  (without {', '.join(table['unread'])})" if table["unread"] else "")
    )
    return out
