"""The log diagnosis against real vLLM 0.32 (CPU) logs of each failure (tests/fixtures/vllm_logs/)."""

from pathlib import Path

import pytest

from podkit.host.diagnose import diagnose, rule_name

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_logs"


@pytest.mark.parametrize(
    "log, rule",
    [
        ("kv_cache_too_small", "kv_cache_too_small"),
        ("max_model_len_too_large", "max_model_len_over_model"),
        ("port_in_use", "port_in_use"),
        ("tool_parser_unknown", "tool_parser_unknown"),
        ("startup_ok", None),
    ],
)
def test_real_logs(log, rule):
    assert rule_name((LOGS / f"{log}.log").read_text().splitlines()) == rule


@pytest.mark.parametrize(
    "line, rule",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
        ("RuntimeError: Failed to infer device type", "no_gpu"),
        ("vllm serve: error: argument --structured-outputs-config: 1 validation error", "bad_argument"),
        ("vllm serve: error: unrecognized arguments: --no-such-flag", "bad_argument"),
        ("ValueError: Available memory on node 0 (7.6 GiB) is less than desired CPU memory utilization", "cpu_oom"),
        ("importlib.metadata.PackageNotFoundError: No package metadata was found for vllm", "vllm_metadata"),
        ("huggingface_hub.errors.GatedRepoError: 401 Client Error", "model_gated"),
        ("INFO: Application startup complete.", None),
    ],
)
def test_recorded_lines(line, rule):
    assert rule_name([line]) == rule


def test_diagnosis_names_cause_fix_and_evidence():
    found = diagnose((LOGS / "kv_cache_too_small.log").read_text().splitlines())
    assert "KV cache cannot hold one request" in found.line()
    assert "vllm_max_model_len" in found.fix
    assert "estimated maximum model length is 1920" in found.evidence
