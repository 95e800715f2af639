"""The files podkit writes on a host, rendered on the controller from ``templates/``.

Rendering here (rather than on the host) lets the deploy compare a file's
checksum with the probe's and skip the write, and the restart, when nothing
changed. No secret is ever passed to a template: the launch script reads the
key from its file at start.

Every value a template receives goes through a filter for where it lands, so no
datum can add a command or a unit line (settings refuse control characters
first; these hold even for a value that got past them):

- ``q``: a shell word (``shlex.quote``);
- ``env_name``: a shell variable name, refused unless it is one;
- ``comment``: text in a ``#`` comment, with control characters (line breaks)
  made spaces;
- ``systemd``: one word of a unit's command line, double-quoted, with ``%``,
  ``$``, ``\\``, ``"`` and control characters escaped;
- ``unit_text``: free text in a unit field (``Description=``): ``%`` escaped,
  control characters made spaces, no backslash to continue the line;
- ``unit_value``: a unit field with no escapes of its own (``User=``,
  ``StandardOutput=append:PATH``): ``%`` escaped, and a value that cannot be
  written on one line refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from podkit import PROJECT_ROOT
from podkit.host.probe import managed_files
from podkit.plan.hostplan import HostPlan
from podkit.settings import UNIT_NAME, PackageSpec, Settings

TEMPLATES = PROJECT_ROOT / "templates"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # line breaks, tabs, escapes: what settings refuse
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RenderedFile:
    path: str
    content: str
    mode: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def _environment(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["env_name"] = env_name
    env.filters["comment"] = comment_text
    env.filters["systemd"] = systemd_quote
    env.filters["unit_text"] = unit_text
    env.filters["unit_value"] = unit_value
    return env


def env_name(value: str) -> str:
    """A variable name for ``export NAME=...``: it cannot be quoted, so anything else is refused."""
    if not _ENV_NAME.fullmatch(str(value)):
        raise ValueError(f"{str(value)!r} is not a shell variable name: use letters, digits and _")
    return str(value)


def comment_text(value: str) -> str:
    """Text for a ``#`` comment (shell or unit): one line, control characters made spaces."""
    return _CONTROL.sub(" ", str(value))


def systemd_quote(value: str, program: bool = False) -> str:
    """One word of a systemd command line (``ExecStart=``): double-quoted, with systemd's own
    expansions escaped (``%`` specifiers everywhere, ``$`` variables in the arguments only:
    systemd does not expand them in the program's path), and control characters written as
    C escapes (``\\x0a``, which systemd turns back into the character), so it reaches the
    program unchanged and stays on its line."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    text = text if program else text.replace("$", "$$")
    return '"' + _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text) + '"'


def unit_text(value: str) -> str:
    """Free text for a unit field such as ``Description=``: ``%`` escaped, control characters
    made spaces, and no trailing backslash (which would join the next line to this one)."""
    return comment_text(value).replace("%", "%%").rstrip("\\")


def unit_value(value: str) -> str:
    """A unit field value with no escapes of its own (``User=``, ``Group=``, ``append:PATH``):
    ``%`` escaped; a control character or a trailing backslash cannot be written on the line
    and is refused (settings and the host's ``id`` never give one)."""
    text = str(value)
    if _CONTROL.search(text) or text.endswith("\\"):
        raise ValueError(f"{text!r} cannot be written in a systemd unit: it holds a line break or ends in \\")
    return text.replace("%", "%%")


def serve_argv(settings: Settings, vllm_bin: str, launch: HostPlan) -> list[str]:
    """The ``vllm serve`` command line: data, with the preflight plan's choices (checkpoint,
    context length, TP size, parsers). Holds no secret: the key travels in VLLM_API_KEY."""
    argv = [
        vllm_bin,
        "serve",
        launch.model,
        "--served-model-name",
        settings.served_model_name,
        "--host",
        settings.host,
        "--port",
        str(settings.port),
        "--max-model-len",
        str(launch.max_model_len),
        "--gpu-memory-utilization",
        str(settings.gpu_memory_utilization),
        "--kv-cache-dtype",
        settings.kv_cache_dtype,
        "--tensor-parallel-size",
        str(launch.tensor_parallel_size),
    ]
    if launch.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", launch.tool_call_parser]
    if launch.reasoning_parser:
        argv += ["--reasoning-parser", launch.reasoning_parser]
    if settings.generation_config:
        argv += ["--override-generation-config", json.dumps(settings.generation_config, sort_keys=True)]
    return argv + list(launch.extra_args) + list(settings.extra_args)


def argv_groups(argv: list[str]) -> list[list[str]]:
    """Argv grouped for reading, one group a line: the program, subcommand and model, then each
    option with its values. The template quotes every word."""
    groups = [list(argv[:3])]
    for index in range(3, len(argv)):
        if argv[index].startswith("--") or index == 3:
            groups.append([argv[index]])
        else:
            groups[-1].append(argv[index])
    return groups


def host_files(
    settings: Settings,
    *,
    package: PackageSpec,
    vllm_bin: str,
    launch: HostPlan,
    templates: Path = TEMPLATES,
    user: str | None = None,
    group: str | None = None,
) -> dict[str, RenderedFile]:
    """The env file, launch script and runner script for one host, keyed by role; with
    ``podkit_supervisor = "systemd"`` the systemd unit (run as ``user``:``group``, the SSH
    user's) instead of the runner script."""
    env = _environment(templates)
    paths = settings.paths
    # the server reads only what is on the volume: a restart never touches the network
    server_env = {**paths.cache_env(), "HF_HUB_OFFLINE": "1", **settings.extra_env}
    files = {
        "env": RenderedFile(paths.env_file, env.get_template("env.sh.j2").render(env=server_env), "644"),
        "launch": RenderedFile(
            paths.launch_script,
            env.get_template("launch.sh.j2").render(
                served_model_name=settings.served_model_name,
                package=str(package),
                env_file=paths.env_file,
                key_file=paths.api_key,
                argv_groups=argv_groups(serve_argv(settings, vllm_bin, launch)),
            ),
            "755",
        ),
        "runner": RenderedFile(
            paths.runner_script,
            env.get_template("runner.sh.j2").render(
                runner_script=paths.runner_script,
                launch_script=paths.launch_script,
                run_dir=paths.run,
                log_file=paths.log_file,
                summed=managed_files(settings),
                log_max_bytes=settings.log_max_bytes,
                log_keep=settings.log_keep,
                backoff_max=settings.restart_backoff_max,
            ),
            "755",
        ),
    }
    if settings.supervisor == "systemd":
        del files["runner"]
        # what the running server was started from, recorded at each start as the runner does
        summed = " ".join(shlex.quote(path) for path in managed_files(settings) if path != paths.runner_script)
        files["unit"] = RenderedFile(
            paths.unit_copy,
            env.get_template("podkit-vllm.service.j2").render(
                unit=UNIT_NAME,
                served_model_name=settings.served_model_name,
                port=settings.port,
                user=user or "root",
                group=group or "root",
                launch_script=paths.launch_script,
                log_file=paths.log_file,
                record_sums=f"sha256sum {summed} > {shlex.quote(paths.run + '/serving.sha256')}",
                stop_timeout=60,
            ),
            "644",
        )
    return files
