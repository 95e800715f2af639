"""The installed vLLM reads a launch before the server restarts with it, and a refusal names the setting.

Before any restart of vLLM the deploy sends ``podkit/remote/vllmcheck.py`` to the host, run by the
interpreter that has the vLLM it will start, with the server's environment and the rendered
``vllm serve`` arguments: vLLM's own parser and config validation, and its model classes built
from the checkpoint's config on the meta device (a change of model is proven as a change of flags
is), say whether the launch can start, so what podkit refuses follows the installed version, with no
list of flags kept here. It costs
vLLM's import (seconds), so it runs only when a restart is due: a converged re-apply pays nothing,
and neither does a launch the same vLLM accepted before (the host keeps their digests).

What is here is pure: the command, and the reading of its answer into one line that names the host's
setting, vLLM's words and the fix.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Any

from podkit.settings import Settings

_HEREDOC = "PODKIT_VLLMCHECK_EOF"
#: Seconds the check may take (vLLM's import is most of it) before the deploy stops waiting for it.
CHECK_TIMEOUT = 300


def flag_settings(settings: Settings) -> dict[str, str]:
    """The setting each of podkit's own flags on the command line comes from, as the settings
    declare them (``--enable-auto-tool-choice`` with ``--tool-call-parser``: vllm_tool_call_parser),
    to name what to fix in a refusal; a flag of vllm_extra_args is the user's, found in their list."""
    found = {}
    for declared in settings.declarations():
        if declared.flag is not None:
            for word in (*declared.flag.before, declared.flag.name):
                if word.startswith("--"):
                    found[word] = declared.name
    return found


def check_source() -> str:
    return resources.files("podkit.remote").joinpath("vllmcheck.py").read_text()


def launch_digest(python: str, package: str, argv: list[str], env: dict[str, str], generation: dict[str, Any]) -> str:
    """What identifies a launch to check: the interpreter and the vLLM package that read it, the ``vllm
    serve`` arguments, the server's environment and the sampling defaults. The same digest in the
    host's record of accepted launches means this vLLM accepted this very launch before (the host's
    settings went back to it), so it is not checked again."""
    whole = {"python": python, "package": package, "argv": list(argv), "env": env, "generation": generation}
    return hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()


#: How many accepted launches the host's record keeps (the newest): enough for a host's settings to go
#: back and forth. The check (``podkit/remote/vllmcheck.py``) and ``podctl wait`` are told it.
KEPT = 32


def accept_config(record: str, digest: str) -> dict[str, Any]:
    """What ``podctl wait`` needs to add a launch that served without a check to ``record``, kept as
    long as the check keeps the launches it read."""
    return {"record": record, "digest": digest, "keep": KEPT}


def check_command(
    python: str, argv: list[str], env: dict[str, str], generation: dict[str, Any], record: str = "", digest: str = ""
) -> str:
    """One shell command: ``python`` (the one with vLLM) runs the check on the rendered ``vllm serve``
    arguments (``argv`` after ``serve``), with the server's ``env``; a launch it accepts is added to
    ``record`` as ``digest``. No secret is in any of them."""
    source = check_source()
    assert _HEREDOC not in source
    cfg = {"argv": list(argv), "env": env, "generation": generation}
    if record and digest:
        cfg.update(accept_config(record, digest))
    quoted = shlex.quote(json.dumps(cfg, sort_keys=True))
    return f"timeout {CHECK_TIMEOUT} {shlex.quote(python)} - {quoted} <<'{_HEREDOC}'\n{source}\n{_HEREDOC}"


def serve_arguments(argv: list[str]) -> list[str]:
    """The words after ``serve`` in a rendered ``vllm serve`` command line (the model first)."""
    return argv[argv.index("serve") + 1 :]


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    step: str | None = None
    error: str | None = None
    version: str | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, stdout: str, stderr: str = "") -> CheckResult:
        for line in reversed(stdout.strip().splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "ok" in data:
                return cls(
                    bool(data["ok"]), data.get("step"), data.get("error"), data.get("version"), data.get("seconds")
                )
        said = " ".join((stderr or stdout).strip().splitlines()[-3:])[-300:]
        return cls(False, "run", f"the check printed no answer ({said or 'nothing'})")


def setting_for(settings: Settings, argv: list[str], result: CheckResult) -> str:
    """The host setting a refusal is about: the generation step's is vllm_generation_config; else
    the first flag vLLM's words name, the user's own (vllm_extra_args) before podkit's."""
    if result.step == "generation":
        return "vllm_generation_config"
    text = (result.error or "").lower()
    mentioned = [
        word
        for word in argv
        if word.startswith("--") and (word.lower() in text or word[2:].replace("-", "_").lower() in text)
    ]
    extra = {word.split("=", 1)[0] for word in settings.extra_args if word.startswith("--")}
    for word in mentioned:
        if word.split("=", 1)[0] in extra:
            return "vllm_extra_args"
    flags = flag_settings(settings)
    for word in mentioned:
        if word in flags:
            return flags[word]
    if result.step == "arguments" and extra:
        return "vllm_extra_args"
    return "the vllm_ settings"


def refusal(settings: Settings, argv: list[str], result: CheckResult, package: str) -> str:
    """One line: the setting, vLLM's own words, and the fix; the running server is left as it is."""
    if result.step in ("import", "run"):
        return (
            f"the installed {package} could not check the new launch ({result.error}); the running server was not "
            f"touched: repair the install (podkit_vllm_package / podkit_vllm_cpu_package) and re-apply"
        )
    if result.step == "model":
        version = f"vLLM {result.version}" if result.version else package
        return (
            f"vllm_model: {version} cannot build {settings.model} from its config.json: {result.error}; "
            "use another model or revision (the running server was not touched)"
        )
    setting = setting_for(settings, argv, result)
    what = {"arguments": "refuses the command line", "config": "refuses the engine config"}.get(
        result.step or "", "refuses the sampling defaults"
    )
    version = f"vLLM {result.version}" if result.version else package
    return (
        f"{setting}: {version} {what}: {result.error}; fix {setting} and re-apply (the running server was not touched)"
    )
