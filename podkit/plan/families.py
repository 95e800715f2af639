"""Model family -> the vLLM flags its tool calls and reasoning need.

One dict literal, in the style of vLLM's own tool-parser registry. A family is
recognised from ``config.json`` (``model_type``, ``architectures``) and the
repo name; the first matching entry wins, so the more specific come first.
Every parser name is checked by the tests against the registries of the vLLM
versions podkit pins (``podkit/plan/parsers.py``, itself compared with the
registries read from the wheels in tests/fixtures/vllm_<version>_parsers.json).

An unknown family is an error that lists the known ones and says how to set
the parser by hand (``vllm_tool_call_parser``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# The vLLM versions this table is checked against (GPU pin, CPU pin).
from podkit.plan.parsers import VLLM_VERSIONS as VLLM_VERSIONS


@dataclass(frozen=True)
class Family:
    tool_call_parser: str
    reasoning_parser: str | None = None
    #: a chat template vLLM ships in examples/, needed because the model's own lacks tool support
    chat_template: str | None = None
    #: extra ``vllm serve`` flags, e.g. for Mistral-format checkpoints
    extra_args: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    #: regular expressions matched against the repo id / folder name, case-insensitive
    names: tuple[str, ...] = ()
    note: str = ""
    extra_args_when: str | None = field(default=None)  # a file whose presence turns extra_args on


MISTRAL_FORMAT = ("--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral")

FAMILIES: dict[str, Family] = {
    "qwen3-coder": Family("qwen3_coder", names=(r"qwen3-coder",), model_types=("qwen3_moe", "qwen3")),
    "qwen3.5": Family("qwen3_coder", names=(r"qwen3\.[56]",), model_types=("qwen3_5", "qwen3_5_moe")),
    "qwen3-next": Family("hermes", names=(r"qwen3-next",), model_types=("qwen3_next",)),
    "qwen3": Family("hermes", reasoning_parser="qwen3", model_types=("qwen3", "qwen3_moe")),
    "qwq": Family("hermes", reasoning_parser="deepseek_r1", names=(r"qwq",)),
    "qwen2.5": Family(
        "hermes",
        model_types=("qwen2", "qwen2_moe"),
        note="Qwen2.5-Coder often answers without <tool_call> tags; prefer Qwen3-Coder for agents",
    ),
    "nemotron-nano": Family(
        "qwen3_coder", reasoning_parser="nemotron_v3", names=(r"nemotron-3-nano",), model_types=("nemotron_h",)
    ),
    "devstral": Family("mistral", names=(r"devstral",), extra_args=MISTRAL_FORMAT, extra_args_when="params.json"),
    "mistral": Family(
        "mistral",
        model_types=("mistral", "mistral3", "ministral"),
        extra_args=MISTRAL_FORMAT,
        extra_args_when="params.json",
    ),
    "llama4": Family("llama4_pythonic", model_types=("llama4",)),
    "llama3": Family(
        "llama3_json",
        names=(r"llama-3\.[123]", r"llama-3-"),
        model_types=("llama",),
        chat_template="tool_chat_template_llama3.1_json.jinja",
    ),
    "gpt-oss": Family("openai", reasoning_parser="openai_gptoss", model_types=("gpt_oss",)),
    "deepseek-v3.1": Family("deepseek_v31", names=(r"deepseek-v3\.1",), model_types=("deepseek_v3",)),
    "deepseek-r1": Family(
        "deepseek_v3", reasoning_parser="deepseek_r1", names=(r"deepseek-r1",), model_types=("deepseek_v3",)
    ),
    "deepseek-v3": Family("deepseek_v3", model_types=("deepseek_v3",)),
    "glm-4.7": Family("glm47", reasoning_parser="glm47", names=(r"glm-4\.7",), model_types=("glm4_moe",)),
    "glm-4.5": Family("glm45", reasoning_parser="glm45", model_types=("glm4_moe",)),
    "kimi-k2": Family("kimi_k2", model_types=("kimi_k2",), names=(r"kimi-k2",)),
    "granite-4": Family("granite4", model_types=("granitemoehybrid",), names=(r"granite-4",)),
    "granite-3": Family("granite", model_types=("granite", "granitemoe")),
    "xlam": Family("xlam", names=(r"xlam",)),
    "minimax-m2": Family("minimax_m2", reasoning_parser="minimax_m2", model_types=("minimax_m2",)),
}


class UnknownFamily(LookupError):
    """No family matched; the message lists the known ones and the manual fix."""


def family_for(model: str, config: dict[str, Any]) -> tuple[str, Family]:
    """The family of ``model`` (repo id or folder) with ``config`` (its config.json)."""
    model_type = config.get("model_type", "")
    text_type = (config.get("text_config") or {}).get("model_type", "")
    lowered = model.lower()
    for name, family in FAMILIES.items():
        by_name = any(re.search(pattern, lowered) for pattern in family.names)
        by_type = model_type in family.model_types or text_type in family.model_types
        if family.names and family.model_types:
            if by_name and (by_type or not model_type):
                return name, family
        elif by_name or by_type:
            return name, family
    raise UnknownFamily(
        f"podkit does not know the tool-call format of {model} (model_type {model_type!r}); "
        f"known families: {', '.join(FAMILIES)}. Set vllm_tool_call_parser (and vllm_reasoning_parser) "
        "by hand to a parser of the pinned vLLM, or None to serve without tool calling"
    )
