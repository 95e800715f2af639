"""What a client command does across hosts: each host as a client sees it (:class:`Target`), what an
hour of a host costs, and each host in parallel.

Where each host is reached (the way in, its TLS and pinned CA) is :mod:`podkit.wayin`; how a host is
loaded and a command run on it is the front end's (``podkit_cli/hosts.py``: pyinfra's inventory and
SSH connector), given here as a :class:`Reachable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

from podkit.host.shell import Result
from podkit.settings import Settings

T = TypeVar("T")
R = TypeVar("R")


class Reachable(Protocol):
    """A host a client command can run one command on: its name, data and settings."""

    name: str
    data: dict[str, Any]
    settings: Settings

    def run(self, command: str, timeout: float = 120) -> Result: ...


H = TypeVar("H", bound=Reachable)


class Target(Generic[H]):
    """One host as a client sees it: its name, settings, data, way in (URL, TLS), the CA
    certificate it pins (internal TLS) and the API key. ``host``: what the front end loaded it as."""

    def __init__(self, host: H, key: str) -> None:
        from podkit.wayin import ca_path, way_in

        self.host = host
        self.name, self.settings, self.data, self.key = host.name, host.settings, host.data, key
        self.way = way_in(host.name, host.data, host.settings.edge_port)
        self.url = self.way.base_url
        self.ca_file = str(ca_path(host.name)) if self.way.tls == "internal" else None
        self.model = host.settings.served_model_name

    def run(self, command: str, timeout: float = 120) -> Result:
        return self.host.run(command, timeout)


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
