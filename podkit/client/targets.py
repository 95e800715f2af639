"""What a client command does across hosts: what an hour of a host costs, and each host in parallel.

Where each host is reached (the way in, its TLS and pinned CA) is :mod:`podkit.wayin`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cost_per_hour(data: dict[str, Any], override: float | None = None) -> float | None:
    """USD per hour: ``override`` (e.g. ``--usd-per-hour``), else the pod's cost an hour (RunPod's ``cost``), else None."""
    if override is not None:
        return float(override)
    value = data.get("runpod_cost_per_hr")
    return float(value) if value is not None else None


def each_host(func: Callable[[T], R], items: Iterable[T], workers: int = 16) -> list[R]:
    """``func`` applied to every item in parallel threads, results in the items' order.

    Hosts are independent, so a fleet is checked in the time of its slowest host.
    ``func`` must catch its own expected errors and return them as results.
    """
    items = list(items)
    if len(items) <= 1:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))
