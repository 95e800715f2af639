"""The deploy's preflight plan against a local hub (real huggingface_hub client, HTTP on loopback)."""

import dataclasses

import pytest

from podkit.host.hostplan import stage_line
from podkit.host.hoststate import VllmInstall
from podkit.plan import checkpoints
from testing.hub_repos import CONFIG, repo_files, write_repo
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


def test_unknown_tool_parser_stops_the_host_with_the_valid_names_closest_first(hub):
    result = plan(hub, "acme/Coder-7B", host(), vllm_tool_call_parser="hermez")
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.startswith("vllm_tool_call_parser 'hermez' is not a tool call parser of vLLM 0.33.0")
    assert "closest first: hermes, " in problem and "qwen3_coder" in problem and "'auto'" in problem


def test_parser_names_are_those_of_the_vllm_the_host_runs(hub):
    # step5 came with vLLM 0.33: the GPU pin has it, the CPU build's 0.32 pin does not
    assert plan(hub, "acme/Coder-7B", host(), vllm_tool_call_parser="step5").problems == []
    cpu = plan(hub, "acme/Coder-7B", host(gpus=0), vllm_tool_call_parser="step5")
    assert cpu.problems[0].startswith("vllm_tool_call_parser 'step5' is not a tool call parser of vLLM 0.32.0")
    reasoning = plan(hub, "acme/Coder-7B", host(gpus=0), vllm_reasoning_parser="qwen")
    assert reasoning.problems[0].startswith("vllm_reasoning_parser 'qwen' is not a reasoning parser of vLLM 0.32.0")
    assert "closest first: qwen3, " in reasoning.problems[0]
    # a version podkit has no table for is left to vLLM; a parser plugin brings names of its own
    assert (
        plan(hub, "acme/Coder-7B", host(), podkit_vllm_package="vllm==0.10.0", vllm_tool_call_parser="x").problems == []
    )
    plugin = ["--tool_parser_plugin=/w/my_parser.py"]
    assert plan(hub, "acme/Coder-7B", host(), vllm_tool_call_parser="mine", vllm_extra_args=plugin).problems == []


def test_a_context_above_the_model_positions_stops_the_host_on_any_host(hub):
    expected = (
        "vllm_max_model_len 65536 exceeds the 40960 positions of acme/Coder-7B (its config.json), which vLLM "
        "{} refuses at start: lower vllm_max_model_len to at most 40960, or set it to 'auto'"
    )
    # a CPU host has no memory plan to notice it
    assert plan(hub, "acme/Coder-7B", host(gpus=0), vllm_max_model_len=65536).problems == [expected.format("0.32.0")]
    # a GPU host's memory plan notices it too: said once
    assert plan(hub, "acme/Coder-7B", host(), vllm_max_model_len=65536).problems == [expected.format("0.33.0")]
    allowed = plan(
        hub,
        "acme/Coder-7B",
        host(gpus=0),
        vllm_max_model_len=65536,
        vllm_extra_env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    assert allowed.problems == []
    assert plan(hub, "acme/Coder-7B", host(gpus=0), vllm_max_model_len=40960).problems == []


def test_model_positions_as_vllm_derives_them():
    max_positions = checkpoints.max_positions
    assert max_positions({"max_position_embeddings": 40960}) == 40960
    assert max_positions({"max_position_embeddings": 40960, "seq_length": 8192}) == 8192  # the smallest
    assert max_positions({"text_config": {"max_position_embeddings": 131072}}) == 131072
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert max_positions({"max_position_embeddings": 32768, "rope_scaling": yarn}) == 131072
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert max_positions({"max_position_embeddings": 131072, "rope_scaling": llama3}) == 131072
    assert max_positions({"hidden_size": 16}) is None  # vLLM then takes what it is given


def test_a_model_without_safetensors_stops_its_host_only(hub):
    files = {k: v for k, v in repo_files().items() if k != "model.safetensors"}
    write_repo(hub.root, "acme/Pickled-7B", {**files, "pytorch_model.bin": b"\0" * 64})
    bad = plan(hub, "acme/Pickled-7B", host())
    assert bad.problems == [
        "acme/Pickled-7B: the checkpoint has no .safetensors weights podkit can serve (only safetensors are "
        "supported); point vllm_model at a checkpoint with .safetensors weights"
    ]
    assert bad.fetch is None
    assert plan(hub, "acme/Coder-7B", host()).problems == []  # the next host of the inventory goes on


def test_an_fp8_sibling_without_safetensors_is_passed_over(hub):
    write_repo(hub.root, "acme/Base-7B", repo_files())
    sibling = {k: v for k, v in repo_files(fp8=True).items() if k != "model.safetensors"}
    write_repo(hub.root, "acme/Base-7B-FP8", {**sibling, "pytorch_model.bin": b"\0" * 64})
    result = plan(hub, "acme/Base-7B", host())
    assert result.problems == [] and result.fetch.repo == "acme/Base-7B"


def test_a_config_without_the_sizes_the_memory_plan_reads_stops_its_host_only(hub):
    config = {k: v for k, v in CONFIG.items() if k != "num_hidden_layers"}
    write_repo(hub.root, "acme/Headless-7B", repo_files(config=config))
    assert plan(hub, "acme/Headless-7B", host()).problems == [
        "acme/Headless-7B: its config.json lacks 'num_hidden_layers', which podkit plans memory from; "
        "check vllm_model (a transformers checkpoint for vLLM)"
    ]


@pytest.mark.parametrize(
    "gpus, nodes, data, tp, pp, shape",
    [
        (2, 1, {}, 2, 1, "TP 2; parser"),  # alone: every GPU, one stage
        (2, 2, {}, 2, 2, "TP 2 x PP 2"),  # a cluster: TP within a node, a stage per node
        (4, 1, {"vllm_pipeline_parallel_size": 2}, 2, 2, "TP 2 x PP 2"),  # two stages on one host
        (2, 2, {"vllm_pipeline_parallel_size": 4}, 1, 4, "TP 1 x PP 4"),  # two stages per node
        (4, 2, {"vllm_tensor_parallel_size": 2}, 2, 2, "TP 2 x PP 2"),  # half of each node's GPUs
    ],
)
def test_tensor_parallel_within_a_node_pipeline_parallel_across_nodes(hub, gpus, nodes, data, tp, pp, shape):
    result = plan(hub, "acme/Coder-7B", host(gpus=gpus), nodes=nodes, **data)
    assert result.problems == []
    assert (result.tensor_parallel_size, result.pipeline_parallel_size) == (tp, pp)
    assert (result.plan.tensor_parallel_size, result.plan.pipeline_parallel_size) == (tp, pp)
    assert len(result.plan.stages) == (pp if pp > 1 else 0)
    assert shape in result.summary()


@pytest.mark.parametrize(
    "gpus, nodes, data, problem",
    [
        (
            2,
            2,
            {"vllm_tensor_parallel_size": 4},
            "tensor_parallel_size 4 x pipeline_parallel_size 2 needs 8 GPUs, more than the 4 here; "
            "shapes that use them all: TP 1 x PP 4, TP 2 x PP 2, TP 4 x PP 1",
        ),
        (1, 8, {}, "pipeline_parallel_size 8 must be from 1 to the model's 4 layers"),
    ],
)
def test_a_pipeline_the_nodes_or_layers_cannot_take_stops_the_host(hub, gpus, nodes, data, problem):
    result = plan(hub, "acme/Coder-7B", host(gpus=gpus), nodes=nodes, **data)
    assert result.problems == [problem] and result.plan is None


def test_a_cluster_without_gpus_carries_its_pipeline_size(hub):
    result = plan(hub, "acme/Coder-7B", host(gpus=0), nodes=2)
    assert result.problems == [] and result.tensor_parallel_size == 1
    assert result.pipeline_parallel_size == 2 and result.plan.pipeline_parallel_size == 2
    assert result.plan.kv_cache_tokens is None and "; PP 2; parser" in result.summary()
    # per stage, as vLLM would place them (the model's 4 layers: 2 each; embedding first, head last)
    assert [(s["stage"], s["layers"]) for s in result.stages] == [(0, 2), (1, 2)]
    assert "stage 0: 2 layers, " in result.summary() and "stage 1: 2 layers, " in result.summary()


def test_a_cluster_with_gpus_prints_each_stage_with_its_kv_tokens(hub):
    result = plan(hub, "acme/Coder-7B", host(gpus=2), nodes=2)
    assert [s["stage"] for s in result.stages] == [0, 1]
    assert all(s["kv_cache_tokens"] == stage.kv_cache_tokens for s, stage in zip(result.stages, result.plan.stages))
    assert stage_line(result.stages[1]) in result.summary() and "KV tokens" in stage_line(result.stages[1])


def test_a_vllm_older_than_the_plan_knows_stops_the_host_before_any_download(hub):
    result = plan(hub, "acme/Coder-7B", host(), podkit_vllm_package="vllm==0.7.3")
    assert result.problems == [
        "vLLM 0.7.3 is older than any start the plan is checked on (from 0.8): its memory overheads are "
        "unknown; serve vLLM 0.8 or newer (podkit_vllm_package)"
    ]
    assert result.fetch is None and result.plan is None
