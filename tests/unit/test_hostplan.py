"""The deploy's preflight plan against a local hub (real huggingface_hub client, HTTP on loopback)."""

import dataclasses

import pytest
from huggingface_hub import HfApi, constants

from podkit.settings import Settings
from podkit.plan.hostplan import plan_host
from podkit.host.probe import Gpu, HostState, VllmInstall
from testing.hub import LocalHub
from podkit.plan.checkpoints import find_fp8_alternative, from_hub

from testing.hub_repos import BF16_TENSORS, FP8_TENSORS, safetensors_bytes, write_repo
from .test_config import sample_data

TOKEN = "hf_" + "t" * 12
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 16, "hidden_size": 128, "intermediate_size": 256, "vocab_size": 64,
    "max_position_embeddings": 40960,
}
FP8_QUANT = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}


def repo_files(fp8=False, config=CONFIG):
    cfg = dict(config, **({"quantization_config": FP8_QUANT} if fp8 else {}))
    return {"config.json": cfg, "tokenizer.json": "{}", "model.safetensors": safetensors_bytes(FP8_TENSORS if fp8 else BF16_TENSORS)}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "hub"
    write_repo(root, "acme/Coder-7B", repo_files())
    # named like an FP8 sibling, but its own config and weights are BF16: must be ignored
    write_repo(root, "acme/Coder-7B-FP8", repo_files())
    write_repo(root, "RedHatAI/Coder-7B-FP8-dynamic", repo_files(fp8=True))
    write_repo(root, "acme/Gated-7B", repo_files(), {"gated": True})
    write_repo(root, "acme/Strange-7B", repo_files(config=dict(CONFIG, model_type="rwkv", architectures=["Rwkv"])))
    server = LocalHub(root, token=TOKEN)
    server.start()
    yield server
    server.stop()


def host(gpus=1, name="NVIDIA H100 80GB HBM3", cap="9.0", free=100 * 10**9):
    state = HostState.blank("")
    return dataclasses.replace(
        state, unreadable=None, volume_writable=True, free_bytes=free,
        gpus=[Gpu(i, name, 81559, cap) for i in range(gpus)],
    )


def plan(hub, model, state, token=None, **data):
    api = HfApi(endpoint=hub.url, token=token or False)
    settings = Settings.from_mapping({**sample_data(), "vllm_model": model, "vllm_max_model_len": 8192, **data})
    return plan_host(
        settings, state, prefer_fp8=settings.prefer_fp8,
        resolve=lambda m: from_hub(m, api=api), fp8_search=lambda ck: find_fp8_alternative(ck, api=api),
    )


def test_fp8_sibling_is_chosen_by_its_config_not_its_name(hub):
    result = plan(hub, "acme/Coder-7B", host())
    assert result.problems == []
    assert result.fetch.repo == "RedHatAI/Coder-7B-FP8-dynamic" and len(result.fetch.revision) == 40
    assert result.model == f"/workspace/podkit/cache/huggingface/hub/models--RedHatAI--Coder-7B-FP8-dynamic/snapshots/{result.fetch.revision}"
    assert result.fetch.files == ("config.json", "model.safetensors", "tokenizer.json") and not result.fetched
    assert result.plan.fp8_alternative == "RedHatAI/Coder-7B-FP8-dynamic"
    assert result.tool_call_parser == "hermes" and result.reasoning_parser == "qwen3"


def test_no_fp8_on_gpus_without_fp8(hub):
    result = plan(hub, "acme/Coder-7B", host(name="NVIDIA A100-SXM4-80GB", cap="8.0"))
    assert result.fetch.repo == "acme/Coder-7B" and result.problems == []


def test_auto_context_takes_the_plan_and_tp_the_gpu_count(hub):
    result = plan(hub, "acme/Coder-7B", host(gpus=2), vllm_max_model_len="auto")
    assert result.max_model_len == 40960  # the model's limit; the KV cache holds more
    assert result.tensor_parallel_size == 2


def test_gated_repo_without_token_stops_before_download(hub):
    result = plan(hub, "acme/Gated-7B", host())
    assert result.problems == ["acme/Gated-7B is gated: accept its licence on the hub, then set HF_TOKEN to a token of that account"]
    assert not any(method == "GET" and "/resolve/" in path and path.endswith("safetensors") for method, path in hub.requests)
    assert plan(hub, "acme/Gated-7B", host(), token=TOKEN).problems == []


def test_missing_repo_and_unknown_family(hub):
    assert "does not exist on the hub" in plan(hub, "acme/Nope", host()).problems[0]
    strange = plan(hub, "acme/Strange-7B", host())
    assert "does not know the tool-call format" in strange.problems[0]
    assert plan(hub, "acme/Strange-7B", host(), vllm_tool_call_parser="hermes", vllm_reasoning_parser=None).problems == []


def test_volume_too_small_is_refused_with_both_numbers(hub):
    result = plan(hub, "acme/Coder-7B", host(free=10**9))
    assert len(result.problems) == 1
    assert "to download" in result.problems[0] and "but the volume has 1.0 GB free" in result.problems[0]


def test_bad_tp_for_the_heads_is_a_problem(hub):
    result = plan(hub, "acme/Coder-7B", host(gpus=3))
    assert "does not divide the 8 attention heads" in result.problems[0]


def test_the_plan_is_for_the_vllm_the_host_will_run(hub):
    pinned = plan(hub, "acme/Coder-7B", host(), podkit_vllm_package="vllm==0.10.0")
    default = plan(hub, "acme/Coder-7B", host())
    assert pinned.plan.vllm_version == "0.10.0" and default.plan.vllm_version == "0.33.0"
    assert pinned.plan.kv_cache_tokens > default.plan.kv_cache_tokens  # 0.10 keeps less apart (no CUDA-graph estimate)
    # an installed vLLM that is not the pin is replaced, so the plan is for the pin
    stale = dataclasses.replace(host(), venv=VllmInstall("venv", {"vllm": "0.10.0"}, "/v/bin/vllm", True, "/v/bin/python"))
    assert plan(hub, "acme/Coder-7B", stale).plan.vllm_version == "0.33.0"
    assert plan(hub, "acme/Coder-7B", host(gpus=0)).plan.vllm_version == "0.32.0"  # the CPU build's pin
