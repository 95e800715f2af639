"""Which GPU a new pod gets, and how big its network volume is: RunPod's catalog (price and stock,
``GET /v2/catalog/gpus``) read against podkit's plan (does the model fit on that card, with the
context asked for, and on how many).

For each GPU type the catalog lists, the fewest GPUs (1, 2, 4 or 8, up to what one machine of that
type holds) on which the plan says the model and the context fit make an :class:`Offer`; offers
in stock come first, the cheapest an hour first. The volume is sized from the real download (the
source checkpoint when the model is quantized at start, as the plan reads it), never from the
weights in memory, plus room for vLLM's venv and caches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from podkit.plan.gpus import GPUS, Hardware, PlanError, gpu_by_name
from podkit.plan.memory import GIB

COUNTS = (1, 2, 4, 8)
LEVELS = ("NONE", "LOW", "MEDIUM", "HIGH")
#: What the volume holds beside the checkpoint (GB): vLLM's venv with torch's CUDA wheels, Caddy and
#: supervisord (about 12 GB for vLLM 0.33), and the caches podkit keeps there (torch.compile,
#: FlashInfer's kernels, the hub's metadata).
VENV_GB = 15
CACHES_GB = 10
#: Slack on the download: a new revision is fetched beside the old one before the old one goes.
DOWNLOAD_SLACK = 0.10
#: RunPod's list price of a STANDARD network volume, USD per GB a month (runpod.io/pricing: $0.07
#: under 1 TB, $0.05 above), for the estimate ``podkit create --dry`` prints; RunPod bills what it bills.
VOLUME_USD_PER_GB_MONTH = 0.07
VOLUME_USD_PER_GB_MONTH_OVER_1TB = 0.05
#: v2's bounds on a network volume (CreateNetworkVolumeRequest.size)
VOLUME_MIN_GB, VOLUME_MAX_GB = 10, 4096


@dataclass(frozen=True)
class Offer:
    """One way to serve: ``count`` GPUs of one type, what it costs, where it is in stock, and the plan."""

    gpu_id: str
    name: str
    count: int
    memory_gib: float
    usd_per_hour: float | None
    availability: str  # NONE, LOW, MEDIUM, HIGH (for this count)
    data_centers: tuple[tuple[str, str], ...]  # (data center, availability), best first
    plan: Any  # podkit.plan.serverplan.Plan

    @property
    def in_stock(self) -> bool:
        return bool(self.data_centers)

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu_id": self.gpu_id,
            "gpu": self.name,
            "count": self.count,
            "memory_gib": self.memory_gib,
            "usd_per_hour": self.usd_per_hour,
            "availability": self.availability,
            "data_centers": [dc for dc, _ in self.data_centers],
            "context": self.plan.max_model_len,
            "max_concurrency": self.plan.max_concurrency,
            "kv_cache_tokens": self.plan.kv_cache_tokens,
            "checkpoint": self.plan.checkpoint.repo,
            "download_bytes": self.plan.download_bytes,
        }


def card(gpu: dict[str, Any]) -> tuple[str, float, str | None]:
    """A catalog GPU type as the plan sees it: its name, memory per GPU as torch reports it (GiB) and
    compute capability. The plan's own table is used when its card matches the catalog's memory
    (within 10%); otherwise the catalog's GB, less what the driver keeps, and no FP8 assumed."""
    memory_gb = gpu.get("memory")
    catalog_gib = float(memory_gb) * 0.98 if isinstance(memory_gb, (int, float)) and memory_gb > 0 else 0.0
    for name in (gpu.get("name"), gpu.get("id")):
        try:
            known, memory, capability = gpu_by_name(str(name or ""))
        except PlanError:
            continue
        if catalog_gib and abs(memory - catalog_gib) <= 0.1 * catalog_gib:
            return known, memory, capability
    return str(gpu.get("name") or gpu.get("id")), round(catalog_gib, 2), None


def offers(
    catalog: Callable[[int], list[dict[str, Any]]],
    plan_for: Callable[[Hardware], Any],
    cloud: str = "SECURE",
    data_center: str | None = None,
    only: str | None = None,
) -> list[Offer]:
    """Every GPU type (``only``: that one) on which the model fits, at the fewest GPUs it needs,
    ranked: in stock first (in ``data_center`` when given), then the cheapest an hour.
    ``catalog(count)`` is the catalog answer for pods of ``count`` GPUs."""
    key = "secure" if cloud == "SECURE" else "community"
    found: list[Offer] = []
    for gpu in catalog(1):
        if only is not None and gpu.get("id") != only:
            continue
        name, memory, capability = card(gpu)
        if memory <= 0:
            continue
        most = _int((gpu.get("maxCount") or {}).get(key)) or 1
        for count in (n for n in COUNTS if n <= most):
            plan = plan_for(Hardware(name, memory, count, capability))
            if not plan.fits:
                continue
            stocked = next((g for g in catalog(count) if g.get("id") == gpu.get("id")), {})
            centers = [
                (str(dc.get("id")), str(dc.get("availability")))
                for dc in stocked.get("dataCenters") or []
                if isinstance(dc, dict) and dc.get("availability") in LEVELS[1:]
            ]
            if data_center is not None:
                centers = [(dc, level) for dc, level in centers if dc == data_center]
            centers.sort(key=lambda item: -LEVELS.index(item[1]))
            price = _number((gpu.get("price") or {}).get(key))
            found.append(
                Offer(
                    gpu_id=str(gpu.get("id")),
                    name=name,
                    count=count,
                    memory_gib=memory,
                    usd_per_hour=round(price * count, 4) if price is not None else None,
                    availability=centers[0][1] if centers else "NONE",
                    data_centers=tuple(centers),
                    plan=plan,
                )
            )
            break
    return sorted(found, key=lambda o: (not o.in_stock, o.usd_per_hour if o.usd_per_hour is not None else 1e9))


def volume_gb(download_bytes: int) -> int:
    """The network volume for a checkpoint of ``download_bytes``: the download and its slack, vLLM's
    venv and the caches, rounded up to 10 GB, within v2's bounds."""
    download_gb = download_bytes / 1e9
    needed = download_gb * (1 + DOWNLOAD_SLACK) + VENV_GB + CACHES_GB
    return min(VOLUME_MAX_GB, max(VOLUME_MIN_GB, int(math.ceil(needed / 10.0)) * 10))


def volume_usd_per_month(size_gb: int) -> float:
    rate = VOLUME_USD_PER_GB_MONTH if size_gb < 1000 else VOLUME_USD_PER_GB_MONTH_OVER_1TB
    return round(size_gb * rate, 2)


def known_cards() -> list[str]:
    return list(GPUS)


def gib(value: int) -> float:
    return round(value / GIB, 1)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)
