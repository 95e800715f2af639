"""Planning without a server: file choice, FP8 detection, memory verdicts, suggestions, disk, the CLI."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from podkit.plan import Hardware, PlanError, gpu_by_name, make_plan
from podkit.plan.checkpoints import Checkpoint, ModelError, fp8_candidates, needed_files
from podkit.plan.memory import GIB, Architecture, fused_moe_gib, plan_memory
from podkit.sandbox.tinymodel import write_tiny_model
from podkit_cli import cli

QWEN3_CODER_30B = {  # Qwen/Qwen3-Coder-30B-A3B-Instruct config.json (the fields planning reads)
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "hidden_size": 2048,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
}
QWEN3_32B = {  # Qwen/Qwen3-32B config.json (the fields planning reads)
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
}
H100 = Hardware("NVIDIA H100 80GB HBM3", 79.19, 1, "9.0")


def checkpoint(
    config=QWEN3_CODER_30B, weight_gb=61.1, repo="Qwen/Qwen3-Coder-30B-A3B-Instruct", quant=None, dtypes=None
):
    files = {
        "config.json": 1000,
        "tokenizer.json": 7_000_000,
        "model-00001-of-00002.safetensors": int(weight_gb * 1e9 / 2),
        "model-00002-of-00002.safetensors": int(weight_gb * 1e9 / 2),
        "model.safetensors.index.json": 50_000,
    }
    return Checkpoint(repo, "a" * 40, config, files, {"BF16": 1} if dtypes is None else dtypes, quant)


@pytest.mark.parametrize(
    "files, mistral, expected",
    [
        (
            ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "README.md"],
            False,
            ["config.json", "model.safetensors", "tokenizer.json"],
        ),
        (
            [
                "config.json",
                "consolidated.safetensors",
                "model-00001-of-00002.safetensors",
                "params.json",
                "tekken.json",
                "tokenizer.json",
            ],
            False,
            ["config.json", "model-00001-of-00002.safetensors", "tokenizer.json"],
        ),
        (
            [
                "config.json",
                "consolidated.safetensors",
                "model-00001-of-00002.safetensors",
                "params.json",
                "tekken.json",
            ],
            True,
            ["consolidated.safetensors", "params.json", "tekken.json"],
        ),
        (
            ["config.json", "original/model.safetensors", "model.safetensors", "chat_template.jinja"],
            False,
            ["chat_template.jinja", "config.json", "model.safetensors"],
        ),
    ],
)
def test_only_the_files_vllm_needs_are_downloaded(files, mistral, expected):
    assert needed_files(dict.fromkeys(files, 1), mistral_format=mistral) == expected


def test_bin_only_checkpoints_are_refused():
    with pytest.raises(ModelError, match="only safetensors"):
        needed_files({"config.json": 1, "pytorch_model.bin": 1})


@pytest.mark.parametrize(
    "quant, dtypes, is_fp8",
    [
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, {"F8_E4M3": 10, "BF16": 1}, True),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            {"F8_E4M3": 10},
            True,
        ),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, {}, True),
        ({"quantization": {"quant_algo": "FP8"}}, {"F8_E4M3": 3}, True),  # hf_quant_config.json
        ({"quant_method": "fp8"}, {"BF16": 10}, False),  # a config that says FP8 over BF16 weights
        ({"quant_method": "awq", "bits": 4}, {"I32": 10}, False),
        (None, {"BF16": 10}, False),
    ],
)
def test_fp8_by_config_confirmed_by_dtypes(quant, dtypes, is_fp8):
    assert checkpoint(quant=quant, dtypes=dtypes).is_fp8 is is_fp8


def test_fp8_sibling_candidates_follow_the_publishers_conventions():
    assert fp8_candidates("Qwen/Qwen3-Coder-30B-A3B-Instruct") == [
        "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        "RedHatAI/Qwen3-Coder-30B-A3B-Instruct-FP8-dynamic",
        "RedHatAI/Qwen3-Coder-30B-A3B-Instruct-FP8",
        "neuralmagic/Qwen3-Coder-30B-A3B-Instruct-FP8-dynamic",
        "nvidia/Qwen3-Coder-30B-A3B-Instruct-FP8",
    ]
    assert fp8_candidates("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8") == []


@pytest.mark.parametrize(
    "name, memory",
    [
        ("h100", 79.19),
        ("NVIDIA H100 80GB HBM3", 79.19),
        ("rtx pro 6000", 94.97),
        ("L40S", 44.39),
        ("NVIDIA L40S", 44.39),
        ("L4", 22.05),  # not the L40S, whose name holds "l4"
        ("NVIDIA L4", 22.05),
        ("NVIDIA L40", 44.39),
        ("NVIDIA RTX 6000 Ada Generation", 47.5),
        ("NVIDIA RTX A6000", 47.54),
    ],
)
def test_gpus_by_name(name, memory):
    assert gpu_by_name(name)[1] == memory


def test_unknown_gpu_names_the_alternative():
    with pytest.raises(PlanError, match="--gpu-memory-gib"):
        gpu_by_name("Voodoo 5")


def test_moe_kv_bytes_and_a_verdict():
    arch = Architecture.from_config(QWEN3_CODER_30B)
    assert arch.kv_bytes_per_token(1, 2) == 2 * 48 * 4 * 128 * 2
    plan = plan_memory(arch, weight_bytes=int(61.1e9), gpu_memory_gib=79.19, gpu_count=1, max_model_len=65536)
    assert plan.fits and plan.kv_cache_tokens > 65536 and plan.max_concurrency > 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpu_count": 2, "tensor_parallel_size": 4}, "exceeds the 2 GPU(s)"),
        (
            {"gpu_count": 3, "tensor_parallel_size": 3},
            "does not divide the 32 attention heads; valid sizes here: [1, 2]",
        ),
    ],
)
def test_bad_tensor_parallel_sizes(kwargs, message):
    arch = Architecture.from_config(QWEN3_CODER_30B)
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_memory(arch, weight_bytes=1, gpu_memory_gib=79.19, **kwargs)


def test_too_long_context_suggests_cheapest_fixes_first():
    fp8 = checkpoint(
        repo="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        weight_gb=31.2,
        quant={"quant_method": "fp8"},
        dtypes={"F8_E4M3": 1},
    )
    small = Hardware("L40S", 44.39, 1, "8.9")
    plan = make_plan(checkpoint(), small, fp8_alternative=fp8, prefer_fp8=False, max_model_len=262144)
    assert not plan.fits
    assert "leave no memory for the KV cache" in plan.reason
    text = " | ".join(plan.suggestions)
    assert "serve the FP8 checkpoint Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8" in text
    assert "use 4 GPUs with vllm_tensor_parallel_size=4" in text  # two L40S hold the weights, not 256K of context
    assert "0 tokens" not in text  # a change that gives nothing is not suggested


def test_fp8_checkpoint_is_chosen_on_fp8_gpus_only():
    fp8 = checkpoint(
        repo="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        weight_gb=31.2,
        quant={"quant_method": "fp8"},
        dtypes={"F8_E4M3": 1},
    )
    assert make_plan(checkpoint(), H100, fp8_alternative=fp8, max_model_len=32768).checkpoint.repo.endswith("-FP8")
    a100 = Hardware("A100 80GB", 79.15, 1, "8.0")
    plan = make_plan(checkpoint(), a100, fp8_alternative=fp8, max_model_len=32768)
    assert plan.checkpoint.repo == "Qwen/Qwen3-Coder-30B-A3B-Instruct"


def test_disk_refusal_names_both_numbers_and_the_options():
    fp8 = checkpoint(
        repo="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        weight_gb=31.2,
        quant={"quant_method": "fp8"},
        dtypes={"F8_E4M3": 1},
    )
    plan = make_plan(
        checkpoint(),
        Hardware("A100 80GB", 79.15, 1, "8.0"),
        fp8_alternative=fp8,
        max_model_len=32768,
        disk_free_bytes=int(48e9),
    )
    assert not plan.fits and plan.disk_fits is False
    assert "needs 61.1 GB to download" in plan.reason and "48.0 GB free" in plan.reason
    assert plan.suggestions[0].startswith("use the FP8 checkpoint Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 (31.2 GB)")


def test_cached_blobs_count_against_the_download():
    plan = make_plan(checkpoint(), H100, max_model_len=32768, disk_free_bytes=int(10e9), cached_bytes=int(61e9))
    assert plan.disk_fits is True and plan.missing_bytes < 1e9


def test_a_plan_is_frozen_and_its_dict_is_plain_json():
    plan = make_plan(checkpoint(), H100, max_model_len=32768)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.fits = False
    data = plan.as_dict()
    assert data["checkpoint"]["repo"] == plan.checkpoint.repo and data["hardware"]["gpu_count"] == 1
    assert data["activation_gib"] == plan.activation_gib and isinstance(data["download_files"], list)
    assert json.loads(json.dumps(data)) == data  # plain JSON, nothing lost on the way
    cpu = make_plan(checkpoint(), None).as_dict()  # no GPU: no VRAM overheads, no memory verdict
    assert cpu["fits"] and cpu["kv_cache_tokens"] is None and cpu["tensor_parallel_size"] == 1
    assert not {"activation_gib", "non_torch_gib", "cuda_graph_gib"} & set(cpu)


JSON_FIELDS = {
    "weights_gib_per_gpu",
    "kv_bytes_per_token",
    "available_kv_cache_gib",
    "kv_cache_tokens",
    "max_model_len",
    "max_concurrency",
    "max_model_len_fit",
    "fits",
    "download_bytes",
    "disk_fits",
    "checkpoint",
    "fp8_alternative",
    "tool_call_parser",
    "reasoning_parser",
    "suggestions",
    "vllm_version",
}


def test_cli_plan_on_a_local_checkpoint(tmp_path):
    model = write_tiny_model(tmp_path / "tiny")
    result = CliRunner().invoke(cli, ["plan", str(model), "--gpu", "L4", "--max-model-len", "4096", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert JSON_FIELDS <= set(plan)
    assert plan["fits"] and plan["tool_call_parser"] == "hermes" and plan["checkpoint"]["local"]
    assert plan["kv_bytes_per_token"] == 2 * 2 * 2 * 32 * 2


def test_cli_plan_exit_codes(tmp_path):
    model = str(write_tiny_model(tmp_path / "tiny"))
    too_long = CliRunner().invoke(cli, ["plan", model, "--gpu", "L4", "--max-model-len", "999999"])
    assert too_long.exit_code == 1 and "DOES NOT FIT" in too_long.output
    assert CliRunner().invoke(cli, ["plan", model]).exit_code == 2  # neither --gpu nor --gpu-memory-gib
    assert CliRunner().invoke(cli, ["plan", model, "--gpu", "Voodoo"]).exit_code == 2
    assert CliRunner().invoke(cli, ["plan", str(tmp_path / "nothing"), "--gpu", "L4"]).exit_code == 2


def test_cli_plan_takes_the_vllm_version_the_host_runs(tmp_path):
    model = str(write_tiny_model(tmp_path / "tiny"))
    args = ["plan", model, "--gpu", "L4", "--max-model-len", "4096", "--json"]
    default = json.loads(CliRunner().invoke(cli, args).output)
    older = json.loads(CliRunner().invoke(cli, [*args, "--vllm-version", "0.10.0"]).output)
    assert default["vllm_version"] == "0.33.0" and older["vllm_version"] == "0.10.0"
    assert older["kv_cache_tokens"] != default["kv_cache_tokens"]  # the overheads are per version
    assert CliRunner().invoke(cli, [*args, "--vllm-version", "latest"]).exit_code == 2


def test_a_warm_up_that_cannot_fit_outside_the_budget_says_so_with_the_cheaper_fix_first():
    # vLLM before 0.21 captures graphs and warms the sampler up after sizing KV, outside the budget
    arch = Architecture.from_config(QWEN3_32B)

    def launch(**changes):  # Qwen3-32B on one H100 at 0.95 with 1024 dummy requests, as logged
        given = dict(gpu_memory_utilization=0.95, vllm_version="0.11.0", max_num_seqs=1024) | changes
        return plan_memory(
            arch, weight_bytes=int(61.03 * GIB), gpu_memory_gib=79.18, gpu_count=1, max_model_len=32768, **given
        )

    tight = launch()
    assert not tight.fits and "outside the gpu_memory_utilization budget" in tight.reason
    # each fix leaves WARMUP_FIX_MARGIN_GIB spare (the graphs took 1.86 GiB there, the plan counts 1.0)
    assert tight.suggestions[0].startswith("set vllm_extra_args ['--max-num-seqs', '624']")
    fewer, lower = launch(max_num_seqs=624), launch(gpu_memory_utilization=0.93)
    assert fewer.fits and lower.fits and fewer.kv_cache_tokens > lower.kv_cache_tokens
    # from 0.21 the graphs are in the budget and the same launch starts
    assert launch(vllm_version="0.21.0").warmup_gib == 0


def test_a_moe_layer_is_charged_the_fused_moe_caches():
    arch = Architecture.from_config(QWEN3_CODER_30B)
    assert arch.is_moe and (arch.num_experts, arch.experts_per_token, arch.moe_intermediate_size) == (128, 8, 768)
    # (M, 8, 2 x 768) + (8M, 768) + (M, 8, 2048) in bf16 for M = 8192 batched tokens
    assert fused_moe_gib(arch, 1, 8192) == pytest.approx(8192 * 8 * (3 * 768 + 2048) * 2 / GIB)
    assert fused_moe_gib(arch, 2, 8192) < fused_moe_gib(arch, 1, 8192)
    assert fused_moe_gib(Architecture.from_config(QWEN3_32B), 1, 8192) == 0


@pytest.mark.parametrize("version, refused", [("0.7.3", True), ("0.5.0", True), ("0.8.3", False), ("0.45.0", False)])
def test_a_vllm_older_than_every_start_the_plan_is_checked_on_is_not_planned(tmp_path, version, refused):
    """The reference set runs from 0.8.3: before 0.8 the V0 engine sized its cache another way, so the
    plan says why it cannot answer (exit 2) instead of an answer nothing checked; newer ones plan as
    the newest known."""
    from podkit.plan.reference import load_cases, version_of

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "kv_reference_cases.json"
    known = [version_of(case) for case in load_cases(fixture) if version_of(case)[:1].isdigit()]
    assert min(known, key=lambda v: tuple(int(p) for p in v.split("."))) == "0.8.3"
    model = str(write_tiny_model(tmp_path / "tiny"))
    result = CliRunner().invoke(cli, ["plan", model, "--gpu", "L4", "--vllm-version", version])
    assert (result.exit_code == 2) == refused
    if refused:
        assert f"vLLM {version} is older than any start the plan is checked on (from 0.8)" in result.output
        assert "serve vLLM 0.8 or newer (podkit_vllm_package)" in result.output


@pytest.mark.parametrize(
    "moe, gpus, utilization, refused",
    [
        (True, 2, 0.97, False),
        (True, 2, 0.98, True),  # 77.61 GiB wanted, 79.19 - 2.0 = 77.19 free
        (False, 2, 0.98, False),
        (False, 2, 0.99, True),
        (False, 1, 0.99, False),
        (False, 1, 1.0, True),
    ],
)
def test_a_utilization_that_vllm_refuses_at_start_is_said_before_the_download(moe, gpus, utilization, refused):
    """vLLM's first check wants the utilization's share of each card free when it starts, where the
    CUDA context (and NCCL's communicators, one more group for a mixture of experts) already hold some
    (``request_memory``): the plan says so with the utilization that starts."""
    config = {"num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 8, "hidden_size": 2048}
    if moe:
        config |= {"num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 768}
    plan = plan_memory(
        Architecture.from_config(config),
        weight_bytes=8 * 2**30,
        gpu_memory_gib=79.19,
        gpu_count=gpus,
        gpu_memory_utilization=utilization,
        max_model_len=8192,
        vllm_version="0.33.0",
    )
    assert plan.fits is not refused
    if refused:
        assert plan.reason.startswith(f"vLLM would refuse to start: it wants {79.19 * utilization:.2f} GiB of each GPU")
        share = {(True, 0.98): "0.97", (False, 0.99): "0.98", (False, 1.0): "0.99"}[(moe, utilization)]
        assert plan.suggestions == [f"set vllm_gpu_memory_utilization to {share} or lower"]


def test_cli_a_start_refusal_offers_only_the_utilization_that_starts(tmp_path):
    model = str(write_tiny_model(tmp_path / "tiny"))
    args = ["plan", model, "--gpu", "H100", "--gpus", "2", "--gpu-memory-utilization", "0.99"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "DOES NOT FIT: vLLM would refuse to start" in result.output
    assert [line for line in result.output.splitlines() if line.startswith("  - ")] == [
        "  - set vllm_gpu_memory_utilization to 0.98 or lower"
    ]
