"""A setting that is a vLLM flag names its flag where it is declared (``podkit/settings.py``), as
vLLM's ``EngineArgs`` makes its fields flags: the launch's command line (``serve_argv``), the launch
check's names for a refusal and ``podkit plan``'s options come from the declaration. A flag written
anywhere else fails here, and a new flag setting is one field (the last test adds one)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re

import pytest

from podkit import checks
from podkit.checks import setting
from podkit.host.hostplan import HostPlan
from podkit.host.render import serve_argv
from podkit.host.start.launchcheck import CheckResult, flag_settings, setting_for
from podkit.settings import FLAGS, SETTINGS, Settings, SettingsError, defaults
from tests.helpers import ROOT

#: The product's code, where a flag could be written again.
PRODUCT = ("podkit", "podkit_cli", "operations", "roles", "deploy.py", "cli.py")
#: Files that may write a declared flag as a string, each with the reason.
ALLOWED = {
    "podkit/settings.py": "the declarations",
    "podkit/host/router.py": "vllm-router's own --host and --port, not vllm serve's",
    "podkit/client/agents/bridge.py": "the LiteLLM proxy's own --host and --port, not vllm serve's",
}


def product_files():
    for name in PRODUCT:
        path = ROOT / name
        yield from [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "tasks" not in p.parts)


def test_a_flag_setting_is_written_nowhere_but_its_declaration():
    """Every string constant of the product that is a declared flag (a message or a docstring that
    mentions one is text, not a flag), and every template: the flag comes from ``FLAGS``."""
    flags = set(FLAGS.values())
    written = []
    for path in product_files():
        where = str(path.relative_to(ROOT))
        if where in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in flags:
                written.append(f"{where}:{node.lineno} {node.value}")
    for path in sorted((ROOT / "templates").iterdir()):
        for flag in flags:
            if re.search(re.escape(flag) + r"\b", path.read_text()):
                written.append(f"templates/{path.name} {flag}")
    assert written == [], "take the flag from podkit.settings.FLAGS (or the declaration itself)"


def test_the_flags_are_declared_once_each():
    declared = [s.flag.name for s in SETTINGS if s.flag]
    assert len(declared) == len(set(declared)) == len(FLAGS) >= 10
    assert FLAGS["max_model_len"] == "--max-model-len" and FLAGS["port"] == "--port"


def launch(**plan) -> HostPlan:
    return HostPlan(**{"model": "/m", "max_model_len": 8192, "tensor_parallel_size": 2, "tool_call_parser": None,
                       "reasoning_parser": None, **plan})  # fmt: skip


def test_the_command_line_reads_as_the_declarations_with_the_plans_choices():
    settings = Settings.from_mapping({**defaults(), "vllm_max_model_len": "auto", "vllm_extra_args": ["--x"]})
    argv = serve_argv(settings, "vllm", launch(tool_call_parser="hermes", extra_args=("--y",)))
    generation = json.dumps(settings.generation_config, sort_keys=True)
    assert argv == [
        "vllm", "serve", "/m", "--served-model-name", settings.served_model_name, "--host", "127.0.0.1",
        "--port", "8001", "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "auto",
        "--tensor-parallel-size", "2", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--override-generation-config", generation, "--y", "--x",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "data, plan, absent",
    [
        ({}, {"pipeline_parallel_size": 1}, "--pipeline-parallel-size"),  # vLLM's own default: left off
        ({}, {}, "--reasoning-parser"),  # None: no flag
        ({"vllm_generation_config": {}}, {}, "--override-generation-config"),  # vLLM's own default
        ({}, {"tool_call_parser": None}, "--enable-auto-tool-choice"),  # the switch goes with its parser
    ],
)
def test_a_flag_at_vllms_own_default_or_none_is_left_off(data, plan, absent):
    settings = Settings.from_mapping({**defaults(), **data})
    assert absent not in serve_argv(settings, "vllm", launch(**plan))


def test_a_refusal_names_the_setting_a_flag_is_declared_by():
    settings = Settings.from_mapping(defaults())
    argv = serve_argv(settings, "vllm", launch(tool_call_parser="hermes"))[2:]
    names = flag_settings(settings)
    for declared in SETTINGS:
        if declared.flag is not None and declared.flag.name in argv:
            said = CheckResult(False, "arguments", f"argument {declared.flag.name}: invalid value")
            assert setting_for(settings, argv, said) == declared.name
            assert names[declared.flag.name] == declared.name
    assert names["--enable-auto-tool-choice"] == "vllm_tool_call_parser"


@dataclasses.dataclass(frozen=True)
class WithSwapSpace(Settings):
    """The settings with one more vLLM flag, declared as podkit/settings.py would: the one edit."""

    swap_space: int = setting(
        "vllm_swap_space", 4, checks.whole(0, 1024, "GiB"), "CPU swap space per GPU, in GiB", "--swap-space"
    )


def test_a_new_flag_setting_is_one_declaration():
    """Checked, defaulted and refused like any setting; on the command line in its declared place
    (after the others, before the extra arguments); named by the launch check when vLLM refuses it."""
    data = {**defaults(), "vllm_swap_space": 8, "vllm_extra_args": ["--x"]}
    with pytest.raises(SettingsError, match="unknown setting vllm_swap_space"):
        Settings.from_mapping(data)  # not a setting of podkit's own
    settings = WithSwapSpace.from_mapping(data)
    assert settings.swap_space == 8
    with pytest.raises(SettingsError, match="vllm_swap_space must be"):
        WithSwapSpace.from_mapping({**data, "vllm_swap_space": -1})
    argv = serve_argv(settings, "vllm", launch())
    assert argv[-3:] == ["--swap-space", "8", "--x"]
    refused = CheckResult(False, "arguments", "argument --swap-space: invalid int value")
    assert setting_for(settings, argv[2:], refused) == "vllm_swap_space"
