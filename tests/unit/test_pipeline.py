"""Pipeline parallel in the plan (issue #13, part 3): layers split as vLLM splits them, each stage's
weights, activation and KV cache, the pool the smallest stage's, and the TP x PP shapes a host's
GPUs allow; checked on the public PP 2 launch in tests/fixtures/kv_reference_cases.json."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from podkit.plan.architecture import Architecture
from podkit.plan.memory import PlanError, plan_memory, stage_layers, stage_weights_gib, valid_shapes
from podkit.plan.reference import arch_of, version_of
from podkit.sandbox.tinymodel import write_tiny_model
from podkit_cli import cli
from tests.helpers import known_gaps

CASES = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "kv_reference_cases.json").read_text())
PP_CASES = [c for c in CASES if c.get("logged_stages")]


@pytest.mark.parametrize(
    "layers, pp, split",
    [(27, 2, [14, 13]), (48, 2, [24, 24]), (10, 3, [3, 4, 3]), (61, 4, [15, 15, 16, 15]), (7, 7, [1] * 7)],
)
def test_layers_are_split_as_vllm_splits_them(layers, pp, split):
    """vLLM's get_pp_indices: an even share each, the remainder one each to the stages before the last,
    counting back from it (61 over 4: the third stage gets the extra layer)."""
    assert stage_layers(layers, pp) == split and sum(split) == layers


def test_the_reference_set_has_a_pipeline_parallel_launch_with_both_stages():
    assert PP_CASES and all(len(c["logged_stages"]) == c["pipeline_parallel_size"] >= 2 for c in PP_CASES)


#: PP launches the plan misses by more than 5%, and why.
KNOWN_GAPS = {
    "qwen3-32b-rtxpro6000-pp2-gmu0426-maxlen32k-v0271": (
        "vLLM 0.27.1 on PCIe RTX PRO 6000 cards: the pool is 2.8% low, but stage 0 logged 3.03 GiB of overheads "
        "where the plan counts 2.65 (1.17 activation, 0.07 non-torch, 1.41 CUDA graphs), 5.5% high on its KV "
        "memory: the one 0.21+ pipeline log, too little to set that version's stage terms apart"
    ),
}


def planned(case):
    return plan_memory(
        arch_of(case),
        weight_bytes=case["weight_bytes"],
        gpu_memory_gib=case["gpu_memory_gib"],
        gpu_count=case["gpu_count"],
        tensor_parallel_size=case["tensor_parallel_size"],
        pipeline_parallel_size=case["pipeline_parallel_size"],
        gpu_memory_utilization=case["gpu_memory_utilization"],
        max_model_len=case["max_model_len"],
        kv_cache_dtype=case["kv_cache_dtype"],
        vllm_version=version_of(case),
    )


@pytest.mark.parametrize("case", known_gaps(PP_CASES, KNOWN_GAPS), ids=lambda c: c["id"])
def test_each_stage_and_the_pool_within_5_percent_of_the_log(case):
    """Each stage whose log line is there (recent vLLM logs rank 0's only), and the pool."""
    plan = planned(case)
    assert [s.layers for s in plan.stages] == [s["layers"] for s in case["logged_stages"]]
    assert plan.kv_cache_tokens == min(s.kv_cache_tokens for s in plan.stages)
    assert plan.pipeline_parallel_size == case["pipeline_parallel_size"] and plan.fits
    for predicted, logged in zip(plan.stages, case["logged_stages"]):
        print(
            f"stage {logged['stage']}: predicted {predicted.available_kv_cache_gib} GiB, logged {logged['available_kv_gib']}"
        )
    logged = case["logged"]["kv_cache_tokens"]
    print(f"pool: predicted {plan.kv_cache_tokens} tokens, logged {logged}, {plan.kv_cache_tokens / logged - 1:+.1%}")
    for predicted, stage in zip(plan.stages, case["logged_stages"]):
        if stage["available_kv_gib"] is not None:
            assert predicted.available_kv_cache_gib == pytest.approx(stage["available_kv_gib"], rel=0.05)
    assert plan.kv_cache_tokens == pytest.approx(logged, rel=0.05)


def test_a_recent_versions_last_stage_holds_no_batch_logits():
    """Qwen3-32B, PP 2 on vLLM 0.27.1, started with a 56,640-token pool, which needs at least 6.91 GiB
    on each stage. With the whole batch's logits on the last stage (8192 x 151,936 fp32, 4.6 GiB), as
    the ~0.9.2 launch held them (and any GPU's profile in 0.14-0.16), the plan left that stage 0.47 GiB and said the launch would not fit.
    The last stage is now below the first only by the sampler's logits (1024 requests, 0.58 GiB)."""
    case = next(c for c in PP_CASES if c["id"] in KNOWN_GAPS)
    plan = planned(case)
    first, last = plan.stages
    assert plan.fits
    assert first.available_kv_cache_gib - last.available_kv_cache_gib == pytest.approx(0.58, abs=0.01)
    older = plan_memory(
        arch_of(case),
        weight_bytes=case["weight_bytes"],
        gpu_memory_gib=case["gpu_memory_gib"],
        gpu_count=2,
        pipeline_parallel_size=2,
        gpu_memory_utilization=case["gpu_memory_utilization"],
        max_model_len=case["max_model_len"],
        vllm_version="0.13.0",
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
    )
    assert older.stages[0].available_kv_cache_gib - older.stages[1].available_kv_cache_gib > 4.5


def test_a_pipeline_without_tensor_parallel_has_little_non_torch_memory_and_a_light_first_stage():
    """Llama-3.1-8B, PP 2 on H100s with vLLM 0.19.0: each stage logged 0.07 GiB of non-torch memory
    (no all-reduce buffers), the first stage a 1.1 GiB peak (its layers) and the last 2.01 (the
    sampler too); the plan used to charge each stage TP's 2.1 GiB and was 9% low on the pool."""
    case = next(c for c in PP_CASES if c["id"].startswith("llama-3.1-8b-instruct-h100-pp2"))
    plan = planned(case)
    assert plan.non_torch_gib == 0.07
    first, last = plan.stages
    assert first.activation_gib < last.activation_gib == pytest.approx(2.01, abs=0.15)
    assert plan.kv_cache_tokens == pytest.approx(case["logged"]["kv_cache_tokens"], rel=0.01)


def test_the_pool_is_the_smallest_stages_from_its_logged_memory():
    """With the logged KV memory of each stage, each stage's bytes per token (its own layers) give
    the logged pool from the smaller stage: the rule the plan applies."""
    case = next(c for c in PP_CASES if all(s["available_kv_gib"] for s in c["logged_stages"]))
    arch = arch_of(case)
    tokens = [
        stage["available_kv_gib"] * 2**30 / arch.kv_bytes_per_token(case["tensor_parallel_size"], 2, stage["layers"])
        for stage in case["logged_stages"]
    ]
    assert min(tokens) == pytest.approx(case["logged"]["kv_cache_tokens"], rel=0.001)


SMALL = Architecture.from_config(
    {"num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 1024}
)


def test_shapes_for_the_gpu_count_and_the_models_heads_and_layers():
    assert (2, 2) in valid_shapes(SMALL, 4) and (4, 1) in valid_shapes(SMALL, 4) and (1, 4) in valid_shapes(SMALL, 4)
    assert (3, 1) not in valid_shapes(SMALL, 4)  # 3 does not divide 8 heads
    assert all(tp * pp <= 4 for tp, pp in valid_shapes(SMALL, 4))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(gpu_count=4, tensor_parallel_size=4, pipeline_parallel_size=2),
            "tensor_parallel_size 4 x pipeline_parallel_size 2 needs 8 GPUs, more than the 4 here; "
            "shapes that use them all: TP 1 x PP 4, TP 2 x PP 2, TP 4 x PP 1",
        ),
        (
            dict(gpu_count=16, pipeline_parallel_size=9),
            "pipeline_parallel_size 9 must be from 1 to the model's 8 layers",
        ),
    ],
)
def test_a_shape_the_gpus_or_layers_cannot_take_is_refused_with_the_ones_they_can(kwargs, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_memory(SMALL, weight_bytes=2 * 10**9, gpu_memory_gib=24, max_model_len=4096, **kwargs)


def test_without_a_pipeline_the_plan_is_what_it_was():
    one = plan_memory(SMALL, weight_bytes=2 * 10**9, gpu_memory_gib=24, gpu_count=2, max_model_len=4096)
    assert one.pipeline_parallel_size == 1 and one.stages == [] and one.kv_cache_tokens > 0


def test_cli_plan_prints_each_stage(tmp_path):
    model = str(write_tiny_model(tmp_path / "tiny"))
    args = ["plan", model, "--gpu", "L4", "--gpus", "2", "--pipeline-parallel-size", "2", "--max-model-len", "4096"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "pipeline parallel    2" in result.output
    assert re.search(r"stage 0: 1 layers, .* GiB of weights per GPU, KV cache .* GiB = \d+ tokens", result.output)
    assert "stage 1: 1 layers" in result.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert [s["stage"] for s in data["stages"]] == [0, 1] and data["tensor_parallel_size"] == 1
    assert data["kv_cache_tokens"] == min(s["kv_cache_tokens"] for s in data["stages"])


DEEPSEEK = arch_of(PP_CASES[0])
DECODER_GIB = (31_400_000_000 - 2 * 102400 * 2048 * 2) / 2 / 2**30  # per GPU at TP 2, less embedding and head


@pytest.mark.parametrize(
    "arch, weight_bytes, pp, expected",
    [
        # untied Llama-like: the embedding on the first stage, the LM head on the last, 8 even layers between
        (SMALL, 2 * 32000 * 1024 * 2 + 8 * 100 * 2**20, 2, [4 * 100 / 1024 + 0.0610, 4 * 100 / 1024 + 0.0610]),
        # tied: one matrix in the checkpoint, a copy on each end of the pipeline
        (
            dataclasses.replace(SMALL, tied_embeddings=True),
            32000 * 1024 * 2 + 8 * 100 * 2**20,
            4,
            [2 * 100 / 1024 + 0.0610, 2 * 100 / 1024, 2 * 100 / 1024, 2 * 100 / 1024 + 0.0610],
        ),
        # DeepSeek-V2-Lite: layer 0 is dense (84M against 588M), so stage 0 holds less than 14/27 of the layers' bytes
        (
            DEEPSEEK,
            31_400_000_000,
            2,
            [DECODER_GIB * (84 + 13 * 588) / (84 + 26 * 588) + 0.195, DECODER_GIB * 13 * 588 / (84 + 26 * 588) + 0.195],
        ),
    ],
    ids=["untied", "tied", "dense-first-layer"],
)
def test_each_stage_holds_its_layers_weights_and_the_embedding_or_head_at_its_end(arch, weight_bytes, pp, expected):
    split = stage_layers(arch.num_layers, pp)
    tp = 2 if arch is DEEPSEEK else 1
    weights = stage_weights_gib(arch, weight_bytes, tp, split, runtime_fp8=False)
    assert weights == pytest.approx(expected, abs=0.02)
    if not arch.tied_embeddings:  # what the stages hold is the checkpoint, once
        assert sum(weights) == pytest.approx(weight_bytes / tp / 2**30)


def test_runtime_fp8_halves_the_layers_not_the_embedding_or_head():
    weight_bytes = 2 * 32000 * 1024 * 2 + 8 * 100 * 2**20
    full = stage_weights_gib(SMALL, weight_bytes, 1, [4, 4], runtime_fp8=False)
    fp8 = stage_weights_gib(SMALL, weight_bytes, 1, [4, 4], runtime_fp8=True)
    assert [f - h for f, h in zip(full, fp8)] == pytest.approx([200 / 1024, 200 / 1024])


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_the_pool_is_the_minimum_over_the_stages_and_each_holds_only_its_layers_kv(pp):
    plan = plan_memory(
        SMALL, weight_bytes=4 * 10**9, gpu_memory_gib=24, gpu_count=8, pipeline_parallel_size=pp, max_model_len=4096
    )
    assert len(plan.stages) == pp and sum(s.layers for s in plan.stages) == 8
    smallest = min(plan.stages, key=lambda s: s.kv_cache_tokens)
    assert plan.kv_cache_tokens == smallest.kv_cache_tokens
    assert plan.available_kv_cache_gib == smallest.available_kv_cache_gib
    assert plan.weights_gib_per_gpu == max(s.weights_gib for s in plan.stages)
    for stage in plan.stages:
        assert stage.kv_bytes_per_token == SMALL.kv_bytes_per_token(8 // pp, 2, stage.layers)
    if len({s.layers for s in plan.stages}) == 1:  # even layers: the last stage, with the logits, is the smallest
        assert smallest.stage == pp - 1


def test_the_plan_json_gives_each_stage_as_plain_data(tmp_path):
    model = str(write_tiny_model(tmp_path / "tiny"))
    args = ["plan", model, "--gpu", "L4", "--gpus", "2", "--pipeline-parallel-size", "2", "--max-model-len", "4096"]
    result = CliRunner().invoke(cli, args)
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    smallest = min(data["stages"], key=lambda s: s["kv_cache_tokens"])
    assert f"KV cache tokens: {data['kv_cache_tokens']}, the minimum over the stages (stage {smallest['stage']})" in (
        result.output
    )
    assert set(data["stages"][0]) == {
        "stage",
        "layers",
        "weights_gib",
        "activation_gib",
        "available_kv_cache_gib",
        "kv_bytes_per_token",
        "kv_cache_tokens",
        "max_context",
    }
    assert data["pipeline_parallel_size"] == 2
