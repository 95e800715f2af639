"""What a client needs to use a host's endpoint, written out for the client that will use it.

``podkit client`` and ``podkit tunnel`` gather, per host, the base URL (with
``/v1``), the served model name, the context length, where the controller keeps
the API key and, for TLS from the edge's own CA, the pinned CA certificate: a
:class:`ClientSettings`. The renderers here turn one into what a client reads:

- :func:`env_snippet`: shell exports for OpenAI-compatible tools (the key as
  ``"$(cat KEYFILE)"``, never the key itself unless it is passed in);
- :func:`hermes_yaml`: a whole ``$HERMES_HOME/config.yaml`` for Hermes Agent, whose
  custom provider reads its ``model:`` block (not ``OPENAI_BASE_URL``), with the key
  as ``${PODKIT_API_KEY}``, expanded by Hermes from its environment;
- :func:`llm_yaml`: entries of llm's ``extra-openai-models.yaml``;
- :func:`openai_snippet`: Python for the ``openai`` SDK and the OpenAI Agents SDK,
  with the Agents SDK's tracing (to OpenAI, with ``OPENAI_API_KEY``) turned off;
- :func:`summary`: lines for people; :func:`warnings`: what may stop any client.

Each agent's whole setup (these texts among them) is built in :mod:`podkit.client.agents`.

YAML is written by hand, every string as a JSON string (JSON strings are YAML
double-quoted scalars), so the package needs no YAML library.

:func:`ssh_forward_argv` is the OpenSSH command line of ``podkit tunnel``, built
from the same pyinfra ``ssh_*`` data the deploy connects with.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from podkit.wayin import WayIn

#: Hermes Agent refuses a model whose context is below this many tokens.
HERMES_MIN_CONTEXT = 64000
#: The context podkit suggests for Hermes: the next power of two above its minimum.
HERMES_CONTEXT_SETTING = 65536
#: The most Hermes asks for in one answer; its custom provider otherwise asks for its whole context.
HERMES_MAX_TOKENS = 8192
#: What llm's key store calls the key (``llm keys set podkit``).
LLM_KEY_NAME = "podkit"


class ConnectError(ValueError):
    """A client's settings cannot be written; the message says which host, why and the fix."""


@dataclass(frozen=True)
class ClientSettings:
    """What a client needs for one host's endpoint. Holds no key: only where the controller keeps it.

    host: the inventory name; base_url: with ``/v1``; model: the served model name;
    context_length: tokens, None when unknown; key_file: absolute path of the controller's
    key file; ca_file: the pinned CA certificate for TLS from the edge's own CA, else None;
    tls: ``internal``, ``acme`` or ``off``; way: ``custom``, ``runpod-proxy``, ``direct``,
    ``loopback`` or ``tunnel``; note: what to know about that way in, else None."""

    host: str
    base_url: str
    model: str
    context_length: int | None
    key_file: str
    ca_file: str | None = None
    tls: str = "off"
    way: str = "direct"
    note: str | None = None

    @classmethod
    def of(
        cls,
        host: str,
        way: WayIn,
        model: str,
        context_length: int | None,
        key_file: str | Path,
        ca_file: str | Path | None = None,
    ) -> ClientSettings:
        """The settings for reaching ``host`` by ``way`` (see :func:`podkit.wayin.way_in`)."""
        return cls(
            host=host,
            base_url=way.v1,
            model=model,
            context_length=context_length,
            key_file=str(Path(key_file).absolute()),
            ca_file=str(ca_file) if ca_file and way.tls == "internal" else None,
            tls=way.tls,
            way=way.kind,
            note=way.note,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def llm_model_id(self) -> str:
        """What ``llm -m`` takes for this host."""
        return f"podkit-{self.host}"


def through_tunnel(cs: ClientSettings, local_port: int) -> ClientSettings:
    """``cs`` for a client of ``podkit tunnel`` on 127.0.0.1:``local_port``: plain HTTP when the
    edge serves plain HTTP, else HTTPS with the pinned CA (the edge's certificate names
    127.0.0.1). An ACME certificate names the domain only, so it is refused."""
    if cs.tls == "acme":
        raise ConnectError(
            f"{cs.host}: the edge serves an ACME certificate for its domain only, which a tunnel to 127.0.0.1 "
            f'cannot match: reach it at {cs.base_url}, or set podkit_tls = "internal" and re-apply'
        )
    scheme = "https" if cs.tls == "internal" else "http"
    return replace(cs, base_url=f"{scheme}://127.0.0.1:{local_port}/v1", way="tunnel", note=None)


def output_limit(context_length: int) -> int:
    """The most an agent should ask for in one answer: a quarter of the context, at most
    :data:`HERMES_MAX_TOKENS`, so prompt and answer fit (an agent that asks for nothing lets the
    server generate to the end of the context)."""
    return max(1, min(HERMES_MAX_TOKENS, context_length // 4))


def hermes_max_tokens(context_length: int) -> int:
    """The ``max_tokens`` Hermes asks for (see :func:`output_limit`)."""
    return output_limit(context_length)


def _yaml(value: str) -> str:
    """A YAML scalar for ``value``: a JSON string, which YAML reads as a double-quoted scalar."""
    return json.dumps(value)


def comment_text(text: str) -> str:
    """``text`` as one line of a comment: whitespace folded, unprintable characters (which YAML
    and TOML refuse even in a comment) replaced by spaces."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())


def _key_from_file(cs: ClientSettings) -> str:
    return f'"$(cat {shlex.quote(cs.key_file)})"'


def env_snippet(cs: ClientSettings, key: str | None = None) -> str:
    """Shell exports for OpenAI-compatible clients of ``cs``'s endpoint (``eval "$(...)"`` or
    ``source``). The key is read from its file when the shell runs them; with ``key``, the
    key itself is written instead. A known context goes in ``PODKIT_CONTEXT_LENGTH`` and the
    output limit (:func:`output_limit`) in ``PODKIT_MAX_OUTPUT_TOKENS``."""
    value = shlex.quote(key) if key is not None else _key_from_file(cs)
    context = f", context {cs.context_length} tokens" if cs.context_length else ""
    lines = [
        f"# podkit: {comment_text(cs.host)} serves {comment_text(cs.model)}{context}",
        f"export OPENAI_BASE_URL={shlex.quote(cs.base_url)}",
        f"export OPENAI_API_KEY={value}",
        f"export PODKIT_API_KEY={value}",
        f"export PODKIT_MODEL={shlex.quote(cs.model)}",
    ]
    if cs.context_length:
        lines.append(f"export PODKIT_CONTEXT_LENGTH={int(cs.context_length)}")
        lines.append(f"export PODKIT_MAX_OUTPUT_TOKENS={output_limit(int(cs.context_length))}")
    if cs.ca_file:
        lines.append("# TLS from the edge's own CA: httpx-based clients (openai, llm, Hermes) trust this file only")
        lines.append(f"export SSL_CERT_FILE={shlex.quote(cs.ca_file)}")
    lines.append("# the OpenAI Agents SDK would send traces (and OPENAI_API_KEY) to OpenAI")
    lines.append("export OPENAI_AGENTS_DISABLE_TRACING=1")
    return "\n".join(lines) + "\n"


def hermes_yaml(cs: ClientSettings) -> str:
    """A complete ``$HERMES_HOME/config.yaml`` whose custom provider is ``cs``'s endpoint. The key
    stays ``${PODKIT_API_KEY}``, which Hermes expands from its environment."""
    if cs.context_length is None:
        raise ConnectError(
            f"{cs.host}: the context length is unknown, and Hermes needs it: set vllm_max_model_len to a number"
        )
    lines = [
        f"# Hermes Agent on podkit host {comment_text(cs.host)} ({comment_text(cs.model)}), from `podkit client --for hermes`.",
        f"# Hermes reads the key from $PODKIT_API_KEY: export PODKIT_API_KEY={_key_from_file(cs)}",
    ]
    if cs.ca_file:
        lines.append(f"# TLS from the edge's own CA: run Hermes with SSL_CERT_FILE={shlex.quote(cs.ca_file)}")
    if cs.note:
        lines.append(f"# {comment_text(cs.note)}")
    lines += [
        "model:",
        f"  provider: {_yaml('custom')}",
        f"  base_url: {_yaml(cs.base_url)}",
        f"  default: {_yaml(cs.model)}",
        f"  api_key: {_yaml('${PODKIT_API_KEY}')}",
        f"  context_length: {int(cs.context_length)}",
        f"  max_tokens: {hermes_max_tokens(int(cs.context_length))}",
    ]
    return "\n".join(lines) + "\n"


def llm_yaml(settings: list[ClientSettings] | ClientSettings) -> str:
    """llm's ``extra-openai-models.yaml``: one entry per host (``llm -m podkit-<host>``), the key
    from llm's own store under the name ``podkit``."""
    entries = [settings] if isinstance(settings, ClientSettings) else list(settings)
    lines = [f"# llm models for podkit hosts; the key: llm keys set {LLM_KEY_NAME}"]
    for cs in entries:
        lines += [
            f"- model_id: {_yaml(cs.llm_model_id)}",
            f"  model_name: {_yaml(cs.model)}",
            f"  api_base: {_yaml(cs.base_url)}",
            f"  api_key_name: {_yaml(LLM_KEY_NAME)}",
            "  supports_tools: true",
        ]
    return "\n".join(lines) + "\n"


def openai_snippet(cs: ClientSettings) -> str:
    """A short Python program for ``cs``'s endpoint: the ``openai`` SDK, then, where it is installed,
    the OpenAI Agents SDK with tracing off. The key comes from ``$PODKIT_API_KEY``; a pinned CA is
    trusted explicitly; each answer is bounded by :func:`output_limit` when the context is known."""
    trust = ""
    client_extra = ""
    async_extra = ""
    if cs.ca_file:
        # openai's own httpx clients: a venv with only openai (3.x) or the Agents SDK may have no httpx
        trust = (
            "import ssl\n\nfrom openai import DefaultAsyncHttpxClient, DefaultHttpxClient\n\n"
            f"TRUST = ssl.create_default_context(cafile={cs.ca_file!r})\n"
        )
        client_extra = ", http_client=DefaultHttpxClient(verify=TRUST)"
        async_extra = ", http_client=DefaultAsyncHttpxClient(verify=TRUST)"
    limit = output_limit(cs.context_length) if cs.context_length else None
    bound = f"\n    max_tokens={limit}," if limit else ""
    settings = f"ModelSettings(max_tokens={limit})" if limit else "ModelSettings()"
    return f"""# podkit: {comment_text(cs.host)} serves {comment_text(cs.model)} at {comment_text(cs.base_url)}
# Run with: PODKIT_API_KEY={_key_from_file(cs)} python this.py
import importlib.util
import os

{trust}from openai import AsyncOpenAI, OpenAI

BASE_URL = {cs.base_url!r}
MODEL = {cs.model!r}
KEY = os.environ["PODKIT_API_KEY"]

client = OpenAI(base_url=BASE_URL, api_key=KEY{client_extra})
reply = client.chat.completions.create(
    model=MODEL,{bound}
    messages=[{{"role": "user", "content": "Write a Python function that reverses a string."}}],
)
print(reply.choices[0].message.content)

# The OpenAI Agents SDK (pip install openai-agents), when it is installed. Tracing goes to OpenAI,
# with OPENAI_API_KEY, unless it is off: keep it off (or export OPENAI_AGENTS_DISABLE_TRACING=1).
if importlib.util.find_spec("agents") is None:
    print("(pip install openai-agents to run the Agents SDK part too)")
else:
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    agent = Agent(
        name="coder",
        instructions="You are a careful coding assistant.",
        model=OpenAIChatCompletionsModel(
            model=MODEL, openai_client=AsyncOpenAI(base_url=BASE_URL, api_key=KEY{async_extra})
        ),
        model_settings={settings},
    )
    print(Runner.run_sync(agent, "Write a Python function that reverses a string.").final_output)
"""


def warnings(cs: ClientSettings) -> list[str]:
    """What may stop any client from working with ``cs``: one line each (each agent adds its own:
    :mod:`podkit.client.agents`)."""
    found = []
    if cs.ca_file and not Path(cs.ca_file).is_file():
        found.append(
            f"{cs.host}: no pinned CA certificate at {cs.ca_file} yet: apply the deploy (it pins the edge's CA)"
        )
    if cs.note:
        found.append(f"{cs.host}: {cs.note}")
    return found


def summary(cs: ClientSettings, key: str | None = None) -> str:
    """Lines for people: where, what, how much context, the key, the CA and the way in."""
    context = f"{cs.context_length:,} tokens" if cs.context_length is not None else "unknown"
    lines = [
        f"{cs.host}  {cs.base_url}",
        f"  model    {cs.model}",
        f"  context  {context}",
        f"  key      {cs.key_file}" + (f"  ({key})" if key is not None else ""),
    ]
    if cs.ca_file:
        lines.append(f"  CA       {cs.ca_file}  (SSL_CERT_FILE for httpx-based clients)")
    tls = {"internal": "TLS from the edge's own CA", "acme": "TLS (ACME)", "off": "plain HTTP"}.get(cs.tls, cs.tls)
    lines.append(f"  way in   {cs.way}, {tls}")
    if cs.note:
        lines.append(f"  note     {cs.note}")
    return "\n".join(lines) + "\n"


# --- podkit tunnel's ssh --------------------------------------------------------------------

_STRICT = ("yes", "accept-new", "no", "off")


def _ssh_path(value: str, option: bool = False) -> str:
    """A path as ssh reads it: ``%`` escaped (ssh expands %-tokens in key and known_hosts paths);
    as an ``-o`` value (a config line), quoted when it holds a space."""
    text = str(value).replace("%", "%%")
    return f'"{text}"' if option and any(c.isspace() for c in text) else text


def _resolve(path: str, root: Path) -> str:
    """``path`` as pyinfra resolves ``ssh_key``: ``~`` expanded, else from the working directory,
    else from the project root."""
    expanded = Path(os.path.expanduser(str(path)))
    if expanded.is_absolute():
        return str(expanded)
    if expanded.exists():
        return str(expanded.absolute())
    return str(root / expanded)


def ssh_forward_argv(
    name: str, data: dict[str, Any], local_port: int, remote_port: int, root: Path | str = "."
) -> list[str]:
    """The OpenSSH command line that forwards 127.0.0.1:``local_port`` here to 127.0.0.1:``remote_port``
    on host ``name``, connecting as the deploy does (pyinfra's ``ssh_hostname``, ``ssh_port``,
    ``ssh_user``, ``ssh_key``, ``ssh_config_file``, ``ssh_known_hosts_file`` and its host-key
    policy, ``ssh_strict_host_key_checking``, default ``accept-new`` as pyinfra's). It never
    prompts, uses only the given key, and exits when the forward cannot be set up or the host
    stops answering. Relative paths are from ``root`` (the project)."""
    hostname = str(data.get("ssh_hostname") or name)
    if hostname.startswith("-") or not hostname.strip():
        raise ConnectError(f"{name}: ssh_hostname {hostname!r} is not a host name")
    if data.get("ssh_password") and not data.get("ssh_key"):
        raise ConnectError(
            f"{name}: podkit tunnel runs OpenSSH without prompts, so it cannot use ssh_password: set ssh_key"
        )
    strict = str(data.get("ssh_strict_host_key_checking") or "accept-new")
    argv = ["ssh", "-N", "-L", f"127.0.0.1:{int(local_port)}:127.0.0.1:{int(remote_port)}"]
    if data.get("ssh_config_file"):
        argv += ["-F", _resolve(data["ssh_config_file"], Path(root))]
    if data.get("ssh_port"):
        argv += ["-p", str(int(data["ssh_port"]))]
    if data.get("ssh_user"):
        argv += ["-l", str(data["ssh_user"])]
    if data.get("ssh_key"):
        argv += ["-i", _ssh_path(_resolve(data["ssh_key"], Path(root))), "-o", "IdentitiesOnly=yes"]
    options = [
        "BatchMode=yes",
        f"StrictHostKeyChecking={strict if strict in _STRICT else 'yes'}",
    ]
    if data.get("ssh_known_hosts_file"):
        known = str(Path(os.path.expanduser(str(data["ssh_known_hosts_file"]))).absolute())
        options += [f"UserKnownHostsFile={_ssh_path(known, option=True)}", "GlobalKnownHostsFile=/dev/null"]
    options += [
        "ExitOnForwardFailure=yes",
        "ServerAliveInterval=15",
        "ServerAliveCountMax=3",
        "ControlMaster=no",
        "ControlPath=none",
        "LogLevel=ERROR",
    ]
    for option in options:
        argv += ["-o", option]
    return [*argv, hostname]
