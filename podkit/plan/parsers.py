"""The parser names each pinned vLLM version registers, as data: the preflight checks
``vllm_tool_call_parser`` and ``vllm_reasoning_parser`` against them before the server is touched.

vLLM keeps one registry per kind (``vllm/tool_parsers/__init__.py`` and
``vllm/reasoning/__init__.py``: name -> module, class) and refuses at start a name it
does not hold, which on a live host means restarting a working server into a crash
loop. These are the names of those registries in the wheels podkit pins, one entry per
version; tests/unit/test_families.py compares them with the registries read from the
wheels (tests/fixtures/vllm_<version>_parsers.json). A version missing here is not
checked (vLLM itself then says what it lacks).
"""

from __future__ import annotations

import difflib


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: --tool-call-parser names, per vLLM version.
TOOL_CALL_PARSERS: dict[str, frozenset[str]] = {
    "0.33.0": _names(
        """
        apertus beam cohere_command3 cohere_command4 deepseek_v3 deepseek_v31 deepseek_v32 deepseek_v4
        deepseek_v41 dots ernie45 functiongemma gemma4 gigachat3 glm45 glm47 granite granite-20b-fc
        granite4 hermes hf hunyuan_a13b hy_v3 hy_v4 inkling internlm jamba k2_horizon kimi_k2 kimi_k3
        lfm2 ling3 llama3_json llama4_json llama4_pythonic longcat mimo minicpm5 minimax_m2 minimax_m3
        mistral muse muse_glimmer musespark1x olmo3 openai phi4_mini_json plamo3 poolside_v1 pythonic
        qwen3_coder qwen3_json qwen3_xml seed_oss step3 step3p5 step5 xlam
        """
    ),
    "0.32.0": _names(
        """
        apertus cohere_command3 cohere_command4 deepseek_v3 deepseek_v31 deepseek_v32 deepseek_v4
        deepseek_v41 dots ernie45 functiongemma gemma4 gigachat3 glm45 glm47 granite granite-20b-fc
        granite4 hermes hf hunyuan_a13b hy_v3 hy_v4 inkling internlm jamba k2_horizon kimi_k2 kimi_k3
        lfm2 ling3 llama3_json llama4_json llama4_pythonic longcat mimo minicpm5 minimax_m2 minimax_m3
        mistral muse_glimmer olmo3 openai phi4_mini_json plamo3 poolside_v1 pythonic qwen3_coder
        qwen3_json qwen3_xml seed_oss step3 step3p5 xlam
        """
    ),
}

#: --reasoning-parser names, per vLLM version.
REASONING_PARSERS: dict[str, frozenset[str]] = {
    "0.33.0": _names(
        """
        beam cohere_command3 cohere_command4 deepseek_r1 deepseek_v3 deepseek_v4 deepseek_v41 ernie45
        gemma4 glm45 glm47 granite granite_thinking_parser hf holo2 hunyuan_a13b hy_v3 hy_v4 inkling
        k2_horizon kimi_k2 kimi_k3 ling3 mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3
        mistral muse muse_glimmer musespark1x nemotron_v3 olmo3 openai_gptoss plamo3 poolside_v1 qwen3
        seed_oss step3 step3p5 step5
        """
    ),
    "0.32.0": _names(
        """
        cohere_command3 cohere_command4 deepseek_r1 deepseek_v3 deepseek_v4 deepseek_v41 ernie45 gemma4
        glm45 glm47 granite granite_thinking_parser hf holo2 hunyuan_a13b hy_v3 hy_v4 inkling k2_horizon
        kimi_k2 kimi_k3 ling3 mimo minicpmv minimax_m2 minimax_m2_append_think minimax_m3 mistral
        muse_glimmer nemotron_v3 olmo3 openai_gptoss plamo3 poolside_v1 qwen3 seed_oss step3 step3p5
        """
    ),
}

#: The vLLM versions podkit pins (GPU pin, CPU pin): those the tables hold.
VLLM_VERSIONS = tuple(TOOL_CALL_PARSERS)

#: The flags that load parsers from a plugin file, which then adds names of its own.
_PLUGIN_FLAGS = {"tool_call_parser": "--tool-parser-plugin", "reasoning_parser": "--reasoning-parser-plugin"}


def parser_problem(setting: str, name: str | None, version: str, *, plugins: bool = False) -> str | None:
    """One line when ``name`` is not a parser of ``setting``'s kind (``"tool_call_parser"`` or
    ``"reasoning_parser"``) in vLLM ``version``: it lists the valid names, closest first, and the
    fix. None when it is one, when it is None, when podkit has no table for ``version``, or when
    ``plugins`` (vllm_extra_args loads a parser plugin, whose names podkit cannot know)."""
    registry = (TOOL_CALL_PARSERS if setting == "tool_call_parser" else REASONING_PARSERS).get(version)
    if name is None or registry is None or name in registry or plugins:
        return None
    ranked = difflib.get_close_matches(name, registry, n=len(registry), cutoff=0.0)
    return (
        f"vllm_{setting} {name!r} is not a {setting.replace('_', ' ').replace(' parser', '')} parser of "
        f"vLLM {version}, which would refuse to start; set vllm_{setting} to one of its names (closest first: "
        f"{', '.join(ranked)}), 'auto' (from the model family) or None, or load a plugin with "
        f"{_PLUGIN_FLAGS[setting]} in vllm_extra_args"
    )


def plugin_flag(setting: str) -> str:
    """The vLLM flag that loads parsers of ``setting``'s kind from a file."""
    return _PLUGIN_FLAGS[setting]
