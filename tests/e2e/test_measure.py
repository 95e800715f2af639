"""``podkit plan --measure`` on the sandbox: the real vLLM (CPU build) started with random weights.

For the served model and for a second architecture that the local hub serves (config, tokenizer and
weights there; only the first two may be fetched): measured against predicted, no weight file
fetched, and nothing the running server uses changed. The deploy's own measurement of that second
architecture at a context its KV cache cannot hold stops with vLLM's own reason (how ``plan
--measure`` reports such a failure is read from vLLM's recorded words in tests/unit/test_measure.py).
Every test only reads the sandbox, converged once for the module (tests/e2e/conftest.py).
"""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from podkit import PROJECT_ROOT
from podkit.host.measure import vllm_reason
from podkit.remote import measure as remote

pytestmark = pytest.mark.e2e

#: a Qwen3 (q/k-normed attention: another architecture than the served Qwen2) whose KV cache costs
#: 2 x 4 layers x 4 KV heads x 32 x 2 bytes = 2 KiB a token: the sandbox's 64 MiB hold 32,768 tokens
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "vocab_size": 512,
    "max_position_embeddings": 65536,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
REPO = "acme/tiny-qwen3"


def measure(pod, *args, env=None):
    proc = subprocess.run(
        [sys.executable, "cli.py", "plan", "--measure", "inventories/sandbox.py", *args, "--json"],
        cwd=PROJECT_ROOT,
        env=pod.box.env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=900,
    )
    pod.outputs += [proc.stdout, proc.stderr]
    return proc


def server_view(pod) -> dict:
    """What the running server uses: its pid, its scripts and env, and the hub cache's files."""
    podkit = pod.podkit
    hub = podkit / "cache" / "huggingface" / "hub"
    return {
        "pid": pod.read_pid("vllm.pid"),
        "bin": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((podkit / "bin").iterdir())},
        "hub": sorted(str(p.relative_to(hub)) for p in hub.rglob("*")) if hub.exists() else [],
    }


@pytest.fixture
def hub(tmp_path):
    from podkit.sandbox.tinymodel import write_tiny_model
    from testing.hub import LocalHub

    folder = write_tiny_model(tmp_path / "hub" / REPO)
    (folder / "config.json").write_text(json.dumps(QWEN3))
    with LocalHub(tmp_path / "hub") as server:
        yield server


def weight_gets(hub) -> list[str]:
    # metadata reads take safetensors headers with Range requests; a weight download has none
    return [
        r["path"]
        for r in hub.request_log
        if r["method"] == "GET" and "/resolve/" in r["path"] and not r["range"] and r["path"].endswith(".safetensors")
    ]


def test_the_served_model_measured_against_the_plan_changes_nothing_the_server_uses(converged):
    pod, _ = converged
    before = server_view(pod)
    proc = measure(pod, str(pod.box.model_dir))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (found,) = json.loads(proc.stdout)
    assert found["fits"] is True and found["measured"] is True
    logged = found["logged"]
    # the CPU build's KV cache is the 64 MiB the sandbox gives it; the tiny Qwen2 costs 512 B a token
    assert logged["kv_cache_tokens"] == found["predicted"]["kv_tokens"] == 64 * 2**20 // 512
    assert logged["max_model_len"] == 65536 and logged["max_concurrency"] == pytest.approx(2.0, abs=0.01)
    assert {row["figure"] for row in found["compare"]} >= {"KV tokens", "max concurrency"}
    case = json.loads(Path(found["reference_case_file"]).read_text())
    assert case["fits"] is True and case["logged"]["kv_cache_tokens"] == logged["kv_cache_tokens"]
    assert server_view(pod) == before
    assert pod.key() not in proc.stdout + proc.stderr


def test_a_second_architecture_from_its_config_alone(converged, hub, tmp_path):
    pod, _ = converged
    before = server_view(pod)
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = measure(pod, REPO, "--max-model-len", "8192", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (found,) = json.loads(proc.stdout)
    assert found["fits"] is True, found["reason"]
    assert found["logged"]["kv_cache_tokens"] == 64 * 2**20 // 2048
    assert found["logged"]["max_concurrency"] == pytest.approx(4.0, abs=0.01)
    assert "config.json" in found["fetched"] and "tokenizer.json" in found["fetched"]
    assert found["weights_fetched"] == [] and weight_gets(hub) == []
    assert server_view(pod) == before  # the real hub cache holds no trace of it either


def test_the_host_side_program_reports_a_start_and_a_failure(tmp_path):
    lines = "print('INFO 11-26 12:00:00 CPU KV cache size: 1,024 tokens'); print('Application startup complete.')"
    cfg = {
        "model": "/m",
        "tmp_dir": str(tmp_path / "tmp"),
        "log_file": str(tmp_path / "vllm.log"),
        "needles": ["KV cache size"],
        "timeout": 60,
        "argv": [sys.executable, "-c", lines + "; import time; time.sleep(60)", "{model}", "{port}"],
    }
    started = remote.main(cfg)
    assert started["started"] is True and started["lines"] == ["INFO 11-26 12:00:00 CPU KV cache size: 1,024 tokens"]
    cfg["argv"] = [sys.executable, "-c", "raise ValueError('the KV cache cannot hold 65536 tokens')"]
    failed = remote.main(cfg)
    assert failed["started"] is False and failed["exit"] == 1
    assert vllm_reason(failed["errors"], failed["tail"]) == "ValueError: the KV cache cannot hold 65536 tokens"


def test_the_deploy_measures_a_new_checkpoint_before_its_download_and_stops_with_vllms_reason(converged, hub, tmp_path):
    """podkit_plan_measure in the deploy: the new checkpoint's start with random weights fails (its
    65,536 tokens need 128 MiB of KV cache), so the host stops with vLLM's reason before any weight
    is fetched and before anything the server uses changes; the outcome is kept, so a re-apply says
    so without measuring again."""
    pod, _ = converged
    before = server_view(pod)
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": ""}
    data = ("--data", f"vllm_model={REPO}", "--data", "podkit_plan_measure=True")
    applied = pod.apply(*data, env=env)
    said = applied.stdout + applied.stderr
    assert applied.rc != 0 and "preflight: vLLM did not start with these flags: " in said, said[-3000:]
    assert "ValueError" in said and "KV cache" in said, said[-3000:]
    assert weight_gets(hub) == [] and server_view(pod) == before
    assert not (pod.podkit / "cache" / "huggingface" / "hub" / "models--acme--tiny-qwen3").exists()
    again = pod.apply(*data, env=env)
    assert again.rc != 0 and "measured before, vLLM did not start with these flags: " in again.stdout + again.stderr
    assert weight_gets(hub) == [] and server_view(pod) == before
