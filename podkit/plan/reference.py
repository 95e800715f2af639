"""The plan against the starts it is checked on: public vLLM startup logs
(``tests/fixtures/kv_reference_cases.json``, each with its source) and the starts podkit measured
(``podkit plan --measure --json`` and ``podkit status --json`` keep each as a case of the same shape;
those sent back live in ``tests/fixtures/calibration/``). Which cases give every input the plan
starts from, the plan each would get, and the accuracy per kind that the docs' tables show
(generated at build time, ``docs/hooks.py``) and ``tests/unit/test_plan_reference.py`` checks.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podkit.plan.architecture import Architecture
from podkit.plan.memory import GIB, MemoryPlan, plan_memory
from podkit.plan.overheads import Overheads

#: A prediction within this share of the logged KV tokens counts as right.
WITHIN = 0.05


def load_cases(fixture: Path, calibration: Path | None = None) -> list[dict[str, Any]]:
    """The public cases in ``fixture`` (a JSON list), then each ``calibration/*.json`` case, by name."""
    cases = list(json.loads(fixture.read_text()))
    if calibration is not None and calibration.is_dir():
        cases += [json.loads(path.read_text()) for path in sorted(calibration.glob("*.json"))]
    return cases


def arch_of(case: dict[str, Any]) -> Architecture:
    return Architecture.from_config({k: v for k, v in (case.get("config") or {}).items() if v is not None})


def version_of(case: dict[str, Any]) -> str:
    """The vLLM version a case names, as x.y.z ("0.10.1.1" -> "0.10.1"; "0.19.0+cu128" -> "0.19.0"),
    the one in its closing parentheses first where it has one ("~0.9 (0.9.2 per the log)")."""
    text = str(case.get("vllm_version") or "")
    for part in (text.split("(")[-1], text):
        found = re.search(r"\d+\.\d+\.\d+", part)
        if found:
            return found.group(0)
    return text


def predictable(case: dict[str, Any]) -> bool:
    """A start whose log gives every input the plan starts from (the card, the utilization, the
    weights, the version), on one host, without pipeline stages (those are checked stage by stage)."""
    logged = case.get("logged") or {}
    return bool(
        case.get("fits")
        and case.get("gpu_memory_gib")
        and case.get("gpu_memory_utilization")
        and logged.get("model_weights_gib")
        and str(case.get("vllm_version") or "")[:1].isdigit()
        and case.get("nodes") == 1  # podkit plans one host; Ray across nodes adds buffers it does not model
        and (case.get("pipeline_parallel_size") or 1) == 1
        and not case.get("excluded_from_prediction")  # GB10's unified memory: the case says why
    )


def measured(case: dict[str, Any]) -> bool:
    """Predictable, and the log gives the KV cache's size in tokens: the launches accuracy is taken on."""
    return predictable(case) and bool((case.get("logged") or {}).get("kv_cache_tokens"))


def logged_pool(case: dict[str, Any]) -> int:
    """The KV pool in tokens, from the logged ``GPU KV cache size`` line. Where the case names
    ``kv_cache_groups``, that vLLM printed ``num_blocks // groups x block_size`` for a hybrid model
    whose layer groups share one block pool: the pool is the line times the groups."""
    return int(case["logged"]["kv_cache_tokens"]) * int(case.get("kv_cache_groups", 1))


def predict(case: dict[str, Any]) -> MemoryPlan:
    """The plan for the case's launch, from its logged weights and the launch's own settings."""
    tp = int(case["tensor_parallel_size"] or 1)
    version = version_of(case)
    overheads = Overheads.for_version(
        version,
        case["gpu_memory_gib"],
        case.get("max_num_batched_tokens"),
        case.get("max_num_seqs") or case.get("max_num_seqs_inferred"),
    )
    return plan_memory(
        arch_of(case),
        weight_bytes=int(case["logged"]["model_weights_gib"] * GIB * tp),
        gpu_memory_gib=case["gpu_memory_gib"],
        gpu_count=tp,
        tensor_parallel_size=tp,
        gpu_memory_utilization=case["gpu_memory_utilization"],
        max_model_len=case.get("max_model_len") or "auto",
        kv_cache_dtype=case.get("kv_cache_dtype") or "auto",
        overheads=overheads,
        vllm_version=version,
    )


def error(case: dict[str, Any]) -> float:
    """predicted / logged KV tokens - 1."""
    return predict(case).kv_cache_tokens / logged_pool(case) - 1


def kind_of(case: dict[str, Any]) -> str:
    """A vision-language model is its own kind (vLLM profiles its encoder too), then MoE, then the
    attention kind ("dense" for standard attention)."""
    arch = arch_of(case)
    if case.get("multimodal"):
        return "multimodal"
    if arch.is_moe:
        return "moe"
    return {"standard": "dense"}.get(arch.kind, arch.kind)


def attention_of(case: dict[str, Any]) -> str:
    return arch_of(case).kind


@dataclass(frozen=True)
class Accuracy:
    """One kind's launches: how many, how many the plan gets within :data:`WITHIN`, the largest
    miss, and each launch's error."""

    kind: str
    errors: dict[str, float]  # case id -> predicted / logged - 1

    @property
    def count(self) -> int:
        return len(self.errors)

    @property
    def within(self) -> int:
        return sum(abs(e) <= WITHIN for e in self.errors.values())

    @property
    def worst(self) -> tuple[str, float]:
        return max(self.errors.items(), key=lambda item: abs(item[1]))


def accuracy(cases: Iterable[dict[str, Any]], grouping: Callable[[dict[str, Any]], str] = kind_of) -> list[Accuracy]:
    """The accuracy per ``grouping`` over the cases accuracy is taken on (:func:`measured`), the
    largest group first."""
    groups: dict[str, dict[str, float]] = {}
    for case in cases:
        if measured(case):
            groups.setdefault(grouping(case), {})[case["id"]] = error(case)
    return sorted((Accuracy(kind, errors) for kind, errors in groups.items()), key=lambda a: (-a.count, a.kind))


def launch_name(case: dict[str, Any]) -> str:
    """ "Qwen2.5-72B-Instruct TP 2 (0.19.0)": the model without its owner, the TP size, the version."""
    model = str(case.get("model") or case["id"]).split(" ")[0].split("/")[-1]
    return f"{model} TP {case.get('tensor_parallel_size') or 1} ({version_of(case)})"


def accuracy_table(cases: list[dict[str, Any]], by: str = "model") -> str:
    """A markdown table of :func:`accuracy`, by model kind (``by="model"``) or attention kind."""
    grouping = kind_of if by == "model" else attention_of
    by_id = {case["id"]: case for case in cases}
    rows = [
        f"| {'kind' if by == 'model' else 'attention'} | launches | within {WITHIN:.0%} | largest error |",
        "|---|---|---|---|",
    ]
    for group in accuracy(cases, grouping):
        worst_id, worst = group.worst
        counted = Counter(launch_name(by_id[case_id]) for case_id in group.errors)
        names = ", ".join(name if times == 1 else f"{name} x{times}" for name, times in counted.items())
        rows.append(
            f"| {group.kind} | {group.count}: {names} | {group.within} | "
            f"{worst:+.1%} ({launch_name(by_id[worst_id])}) |"
        )
    return "\n".join(rows) + "\n"


__all__ = [
    "WITHIN",
    "Accuracy",
    "accuracy",
    "accuracy_table",
    "arch_of",
    "attention_of",
    "error",
    "kind_of",
    "launch_name",
    "load_cases",
    "logged_pool",
    "measured",
    "predict",
    "predictable",
    "version_of",
]
