"""Where a client reaches each host's vLLM, and what an hour of it costs.

One rule for every front end (``verify``, ``bench``, ``eval``), from the host
data the deploy saw:

1. ``podkit_endpoint_url`` when the inventory or group_data sets it;
2. a RunPod pod (host data from ``inventories/runpod.py``): the public IP and
   mapped port when the served port is exposed as TCP, else RunPod's HTTP
   proxy ``https://{pod id}-{port}.proxy.runpod.net`` (Cloudflare cuts a
   request at 100 s there: stream long answers);
3. otherwise ``http://{address}:{port}``, where the address is ``vllm_host``
   unless vLLM listens on every interface, then the SSH address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

ANY_ADDRESS = ("0.0.0.0", "::", "")


def proxy_url(pod_id: str, port: int) -> str:
    """RunPod's HTTP proxy address for ``port`` of pod ``pod_id``."""
    return f"https://{pod_id}-{port}.proxy.runpod.net"


def endpoint_url(name: str, data: dict[str, Any], host: str, port: int) -> str:
    """The base URL (no ``/v1``) a client uses for host ``name`` serving on ``host:port``."""
    if data.get("podkit_endpoint_url"):
        return str(data["podkit_endpoint_url"]).rstrip("/")
    pod_id = data.get("runpod_pod_id")
    if pod_id:
        mapped = (data.get("runpod_tcp_ports") or {}).get(str(port))
        if mapped and data.get("runpod_public_ip"):
            return f"http://{data['runpod_public_ip']}:{mapped}"
        return proxy_url(pod_id, port)
    address = host if host not in ANY_ADDRESS else (data.get("ssh_hostname") or name)
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{port}"


def cost_per_hour(data: dict[str, Any], override: float | None = None) -> float | None:
    """USD per hour: ``override`` (e.g. ``--usd-per-hour``), else the pod's ``costPerHr``, else None."""
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
