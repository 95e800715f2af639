"""The GPU table: what each card holds, whether it runs FP8, and the hardware one plan is for."""

from __future__ import annotations

from dataclasses import dataclass

#: Card name -> (memory per GPU as torch reports it, GiB; compute capability).
GPUS: dict[str, tuple[float, str]] = {
    "H200": (139.8, "9.0"),
    "H100 80GB": (79.19, "9.0"),
    "H100 NVL": (93.1, "9.0"),
    "A100 80GB": (79.15, "8.0"),
    "A100 40GB": (39.39, "8.0"),
    "L40S": (44.39, "8.9"),
    "L40": (44.39, "8.9"),
    "L4": (22.05, "8.9"),
    "A10": (22.07, "8.6"),
    "A6000": (47.54, "8.6"),
    "RTX 6000 Ada": (47.5, "8.9"),
    "RTX PRO 6000 96GB": (94.97, "12.0"),
    "RTX 5090": (31.36, "12.0"),
    "RTX 4090": (23.64, "8.9"),
    "RTX 3090": (23.69, "8.6"),
}


class PlanError(ValueError):
    """Inputs that cannot be planned; the message names the fix."""


def supports_fp8(compute_capability: str | None) -> bool:
    """FP8 runs fast from compute capability 8.9 (Ada, Hopper, Blackwell)."""
    if not compute_capability:
        return False
    major, _, minor = compute_capability.partition(".")
    return (int(major), int(minor or 0)) >= (8, 9)


def gpu_by_name(name: str) -> tuple[str, float, str]:
    """Match a card name loosely (``h100``, ``NVIDIA H100 80GB HBM3``, ``rtx pro 6000``)."""
    wanted = _norm(name)
    exact = [card for card in GPUS if _norm(card) == wanted]
    # the longest card name inside the one given (``L40S`` before ``L40``, never ``L4`` for an L40S),
    # then a card named in full by a shorter one (``h100`` is the H100 80GB)
    inside = sorted((card for card in GPUS if _norm(card) in wanted), key=lambda card: -len(_norm(card)))
    for card in exact or inside or [card for card in GPUS if wanted in _norm(card)]:
        memory, capability = GPUS[card]
        return card, memory, capability
    raise PlanError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}; or give --gpu-memory-gib")


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum()).replace("nvidia", "").replace("geforce", "")


@dataclass
class Hardware:
    gpu_name: str | None
    gpu_memory_gib: float  # per GPU, as torch reports it
    gpu_count: int
    compute_capability: str | None

    @property
    def fp8_supported(self) -> bool:
        return supports_fp8(self.compute_capability)
