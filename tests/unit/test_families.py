"""The family registry: recognised from config and name, and every parser exists in the pinned vLLM."""

import json
from pathlib import Path

import pytest

from podkit.plan.families import FAMILIES, VLLM_VERSIONS, UnknownFamily, family_for
from podkit.plan.parsers import REASONING_PARSERS, TOOL_CALL_PARSERS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_every_parser_exists_in_the_pinned_vllm(version):
    registry = json.loads((FIXTURES / f"vllm_{version}_parsers.json").read_text())
    for name, family in FAMILIES.items():
        assert family.tool_call_parser in registry["tool_call_parsers"], (version, name)
        if family.reasoning_parser:
            assert family.reasoning_parser in registry["reasoning_parsers"], (version, name)


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_the_preflight_parser_tables_are_the_registries_of_the_pinned_wheels(version):
    registry = json.loads((FIXTURES / f"vllm_{version}_parsers.json").read_text())
    assert TOOL_CALL_PARSERS[version] == set(registry["tool_call_parsers"])
    assert REASONING_PARSERS[version] == set(registry["reasoning_parsers"])


def test_every_registry_read_from_a_wheel_has_a_table():
    read = {path.name.split("_")[1] for path in FIXTURES.glob("vllm_*_parsers.json")}
    assert read == set(VLLM_VERSIONS) == set(REASONING_PARSERS)


@pytest.mark.parametrize(
    "model, config, family, parser, reasoning",
    [
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", {"model_type": "qwen3_moe"}, "qwen3-coder", "qwen3_coder", None),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", {"model_type": "qwen3_moe"}, "qwen3-coder", "qwen3_coder", None),
        ("Qwen/Qwen3-32B", {"model_type": "qwen3"}, "qwen3", "hermes", "qwen3"),
        ("Qwen/Qwen3.6-35B-A3B", {"model_type": "qwen3_5_moe"}, "qwen3.5", "qwen3_coder", None),
        ("Qwen/Qwen2.5-Coder-32B-Instruct", {"model_type": "qwen2"}, "qwen2.5", "hermes", None),
        ("Qwen/QwQ-32B", {"model_type": "qwen2"}, "qwq", "hermes", "deepseek_r1"),
        ("mistralai/Devstral-Small-2505", {"model_type": "mistral"}, "devstral", "mistral", None),
        ("meta-llama/Llama-3.1-8B-Instruct", {"model_type": "llama"}, "llama3", "llama3_json", None),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", {"model_type": "llama4"}, "llama4", "llama4_pythonic", None),
        ("openai/gpt-oss-120b", {"model_type": "gpt_oss"}, "gpt-oss", "openai", "openai_gptoss"),
        ("deepseek-ai/DeepSeek-V3.1", {"model_type": "deepseek_v3"}, "deepseek-v3.1", "deepseek_v31", None),
        ("deepseek-ai/DeepSeek-R1-0528", {"model_type": "deepseek_v3"}, "deepseek-r1", "deepseek_v3", "deepseek_r1"),
        ("zai-org/GLM-4.6", {"model_type": "glm4_moe"}, "glm-4.5", "glm45", "glm45"),
        (
            "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
            {"model_type": "nemotron_h"},
            "nemotron-nano",
            "qwen3_coder",
            "nemotron_v3",
        ),
        ("/workspace/models/tiny-coder", {"model_type": "qwen2"}, "qwen2.5", "hermes", None),
        ("/x/y", {"model_type": "llava", "text_config": {"model_type": "mistral"}}, "mistral", "mistral", None),
    ],
)
def test_family_for(model, config, family, parser, reasoning):
    name, found = family_for(model, config)
    assert (name, found.tool_call_parser, found.reasoning_parser) == (family, parser, reasoning)


def test_unknown_family_lists_the_known_ones_and_the_manual_fix():
    with pytest.raises(UnknownFamily) as error:
        family_for("someone/odd-model", {"model_type": "rwkv"})
    message = str(error.value).lower()
    assert "qwen3-coder" in message and "set vllm_tool_call_parser" in message and "'rwkv'" in message


def test_mistral_format_flags_only_for_mistral_format_checkpoints():
    _, family = family_for("mistralai/Devstral-Small-2505", {"model_type": "mistral"})
    assert family.extra_args_when == "params.json" and "--load-format" in family.extra_args
