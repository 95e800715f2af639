"""The deploy's preflight plan against a local hub (real huggingface_hub client, HTTP on loopback)."""

import dataclasses

from podkit.host.probe import VllmInstall
from tests.helpers import HUB_TOKEN as TOKEN
from tests.helpers import gpu_host as host
from tests.helpers import host_plan as plan


def test_fp8_sibling_is_chosen_by_its_config_not_its_name(hub):
    result = plan(hub, "acme/Coder-7B", host())
    assert result.problems == []
    assert result.fetch.repo == "RedHatAI/Coder-7B-FP8-dynamic" and len(result.fetch.revision) == 40
    assert (
        result.model
        == f"/workspace/podkit/cache/huggingface/hub/models--RedHatAI--Coder-7B-FP8-dynamic/snapshots/{result.fetch.revision}"
    )
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
    assert result.problems == [
        "acme/Gated-7B is gated: accept its licence on the hub, then set HF_TOKEN to a token of that account"
    ]
    assert not any(
        method == "GET" and "/resolve/" in path and path.endswith("safetensors") for method, path in hub.requests
    )
    assert plan(hub, "acme/Gated-7B", host(), token=TOKEN).problems == []


def test_missing_repo_and_unknown_family(hub):
    assert "does not exist on the hub" in plan(hub, "acme/Nope", host()).problems[0]
    strange = plan(hub, "acme/Strange-7B", host())
    assert "does not know the tool-call format" in strange.problems[0]
    assert (
        plan(hub, "acme/Strange-7B", host(), vllm_tool_call_parser="hermes", vllm_reasoning_parser=None).problems == []
    )


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
    stale = dataclasses.replace(
        host(), venv=VllmInstall("venv", {"vllm": "0.10.0"}, "/v/bin/vllm", True, "/v/bin/python")
    )
    assert plan(hub, "acme/Coder-7B", stale).plan.vllm_version == "0.33.0"
    assert plan(hub, "acme/Coder-7B", host(gpus=0)).plan.vllm_version == "0.32.0"  # the CPU build's pin
