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

from podkit.plan import modelfiles
from podkit.plan.architecture import Architecture
from podkit.plan.memory import DTYPE_BYTES, GIB, MemoryPlan, plan_memory
from podkit.plan.overheads import Overheads
from podkit.text import clean

#: A prediction within this share of the logged KV tokens counts as right.
WITHIN = 0.05


def load_cases(
    fixture: Path, calibration: Path | None = None, skipped: list[str] | None = None
) -> list[dict[str, Any]]:
    """The public cases in ``fixture`` (a JSON list), then each ``calibration/*.json`` case, by name.
    A case sent back is data like any other: one that is not JSON or not a case the plan can be run
    on (:func:`case_problem`) is left out, with one line naming its file and why in ``skipped``."""
    cases = list(json.loads(fixture.read_text()))
    if calibration is not None and calibration.is_dir():
        for path in sorted(calibration.glob("*.json")):
            try:
                case = modelfiles.load_json(path.name, "the case", path.read_bytes())
                problem = case_problem(case)
            except (OSError, modelfiles.ModelError) as exc:
                problem = str(exc)
            if problem:
                (skipped if skipped is not None else []).append(f"{path.name}: skipped: {clean(problem)}")
                continue
            cases.append(case)
    return cases


def _whole(low: int) -> Callable[[Any], Any]:
    return modelfiles.count(low, 1 << 40, "a count")


def _share(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError("a share in (0, 1]")
    return float(value)


def _gib(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
        raise ValueError("GiB from 0 to 1e6")
    return float(value)


def _one_of(*choices: Any) -> Callable[[Any], Any]:
    def rule(value: Any) -> Any:
        if value not in choices:
            raise ValueError(f"one of {', '.join(map(repr, choices))}")
        return value

    return rule


#: What the plan and the accuracy tables read of a case, each with its rule (null: absent).
CASE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "model": modelfiles.text,
    "vllm_version": modelfiles.text,
    "gpu_memory_gib": _gib,
    "gpu_memory_utilization": _share,
    "gpu_count": _whole(1),
    "tensor_parallel_size": _whole(1),
    "pipeline_parallel_size": _whole(1),
    "nodes": _whole(1),
    "max_model_len": _whole(1),
    "max_num_seqs": _whole(1),
    "max_num_seqs_inferred": _whole(1),
    "max_num_batched_tokens": _whole(1),
    "kv_cache_groups": _whole(1),
    "kv_cache_dtype": _one_of(*DTYPE_BYTES),
    "fits": modelfiles.flag,
    "multimodal": modelfiles.flag,
    "calibration": _one_of("fit", "check"),
    "logged": modelfiles.mapping,
    "config": modelfiles.mapping,
}
LOGGED_FIELDS: dict[str, Callable[[Any], Any]] = {"model_weights_gib": _gib, "kv_cache_tokens": _whole(1)}


def case_problem(case: Any) -> str | None:
    """Why ``case`` (one reference case, as a user sent it back) cannot be counted, or None: an object
    with a name (``id``), the fields the plan reads of the right type and range, a config that passes
    the checkpoint's own checks (:func:`podkit.plan.modelfiles.config`), and, where accuracy is taken
    on it, a plan that can be made from it."""
    if not isinstance(case, dict):
        return f"the case is {modelfiles.shown(case)}, which must be a JSON object"
    name = case.get("id")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        return f"its id is {modelfiles.shown(name)}, which must be a name (a string of 1 to 200 characters)"
    try:
        modelfiles.fields(name, "the case", case, CASE_FIELDS)
        modelfiles.fields(name, "the case", case.get("logged") or {}, LOGGED_FIELDS, "logged.")
        config = {k: v for k, v in (case.get("config") or {}).items() if v is not None}
        modelfiles.config(name, config, "its config")
        if measured(case):
            predict(case)
            logged_pool(case)
            launch_name(case)
    except modelfiles.ModelError as exc:
        return str(exc)
    except (ArithmeticError, LookupError, TypeError, ValueError) as exc:  # the plan could not be made from it
        return f"{name}: the plan cannot be made from it ({type(exc).__name__}: {exc})"
    return None


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
    "case_problem",
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
