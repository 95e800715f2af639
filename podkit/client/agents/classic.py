"""The four clients podkit wrote for before the agent renderers: shell exports (``env``), Hermes
Agent, llm and a Python program for the openai and Agents SDKs. Their files come from
:mod:`podkit.client.connect`; here each is described whole, as every other agent is."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import replace

from podkit.client.connect import (
    HERMES_CONTEXT_SETTING,
    HERMES_MIN_CONTEXT,
    LLM_KEY_NAME,
    ClientSettings,
    env_snippet,
    hermes_yaml,
    llm_yaml,
    openai_snippet,
    output_limit,
)

from .base import KEY_REF, PROMPT, Agent, File, Setup, ca_env, command, key_env

HERMES_PATH = "~/.hermes/config.yaml"
LLM_PATH = "~/.config/io.datasette.llm/extra-openai-models.yaml"
OPENAI_PATH = "podkit_openai.py"
NO_TRACING = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}


def _ca_note(cs: ClientSettings) -> tuple[str, ...]:
    if not cs.ca_file:
        return ()
    return (
        f"{cs.host} serves TLS from its own CA: run the client with SSL_CERT_FILE={shlex.quote(cs.ca_file)} "
        "(httpx then trusts that file only: set it for this client, not your whole shell)",
    )


def env(cs: ClientSettings, own: list[Agent]) -> Setup:
    """The exports; ``own``: the known tools that ignore ``OPENAI_BASE_URL`` (the stderr names them)."""
    exports = key_env(cs) | {
        "OPENAI_API_KEY": KEY_REF,
        "OPENAI_BASE_URL": shlex.quote(cs.base_url),
        "PODKIT_MODEL": shlex.quote(cs.model),
    }
    if cs.context_length:
        exports["PODKIT_CONTEXT_LENGTH"] = str(int(cs.context_length))
        exports["PODKIT_MAX_OUTPUT_TOKENS"] = str(output_limit(int(cs.context_length)))
    notes: tuple[str, ...] = (
        "These tools ignore OPENAI_BASE_URL and need their own profile (with OPENAI_API_KEY exported, Codex, "
        "pi, goose, smolagents and Open WebUI would send the key to their vendor): "
        + ", ".join(f"{a.called} (--for {a.name})" for a in own),
    )
    if cs.ca_file:
        notes += (
            "SSL_CERT_FILE makes httpx-based clients in that shell trust the edge's CA only: "
            "source these lines in the shell that runs the agent",
        )
    return Setup(
        host=cs.host,
        agent="env",
        env=exports | ca_env(cs, "SSL_CERT_FILE") | NO_TRACING,
        notes=notes,
        text=env_snippet(cs),
    )


def env_with_key(cs: ClientSettings, setup: Setup, key: str) -> Setup:
    return replace(setup, text=env_snippet(cs, key))


def hermes(cs: ClientSettings) -> Setup:
    warnings: tuple[str, ...] = ()
    if cs.context_length is not None and cs.context_length < HERMES_MIN_CONTEXT:
        warnings = (
            f"{cs.host}: Hermes Agent needs at least {HERMES_MIN_CONTEXT:,} tokens of context but the server has "
            f"{cs.context_length:,}: set vllm_max_model_len = {HERMES_CONTEXT_SETTING} and re-apply",
        )
    return Setup(
        host=cs.host,
        agent="hermes",
        files=(File(HERMES_PATH, hermes_yaml(cs)),),
        env=key_env(cs) | ca_env(cs, "SSL_CERT_FILE"),
        run=command("hermes", "chat", "-Q", "--max-turns", "1", "-q", PROMPT),
        notes=(
            "The file goes to $HERMES_HOME/config.yaml where HERMES_HOME is set",
            "Hermes refuses a context under 64,000 tokens: podkit client warns when a host's is smaller",
            *_ca_note(cs),
        ),
        warnings=warnings,
    )


def _llm_note(cs: ClientSettings, key: str) -> str:
    return f"Give llm the key once: llm keys set {LLM_KEY_NAME} --value {key}"


def llm_all(settings: list[ClientSettings]) -> Setup:
    first = settings[0]
    notes: list[str] = [_llm_note(first, '"$PODKIT_API_KEY"')]
    for cs in settings:
        notes += [note for note in _ca_note(cs) if note not in notes]
    return Setup(
        host=", ".join(cs.host for cs in settings),
        agent="llm",
        files=(File(LLM_PATH, llm_yaml(settings)),),
        env=key_env(first) | ca_env(first, "SSL_CERT_FILE"),
        run=command("llm", "-m", first.llm_model_id, PROMPT),
        notes=(
            'The file goes beside llm\'s logs: "$(dirname "$(llm logs path)")/extra-openai-models.yaml"',
            *notes,
        ),
    )


def llm(cs: ClientSettings) -> Setup:
    return replace(llm_all([cs]), host=cs.host)


def llm_with_key(cs: ClientSettings, setup: Setup, key: str) -> Setup:
    mine = _llm_note(cs, '"$PODKIT_API_KEY"')
    return replace(setup, notes=tuple(_llm_note(cs, shlex.quote(key)) if n == mine else n for n in setup.notes))


def openai(cs: ClientSettings) -> Setup:
    return Setup(
        host=cs.host,
        agent="openai",
        files=(File(OPENAI_PATH, openai_snippet(cs)),),
        env=key_env(cs) | NO_TRACING,
        run=command("python", OPENAI_PATH),
        notes=("The Agents SDK part runs where openai-agents is installed",),
    )


def make_env(registry: Callable[[], Iterable[Agent]]) -> Agent:
    """``--for env``, told the agents ``registry()`` holds when it renders."""
    return Agent(
        name="env",
        title="Shell exports",
        install="",
        summary="shell exports for OpenAI-compatible tools",
        render=lambda cs: env(cs, [a for a in registry() if a.ignores_base_url]),
        needs_context=False,
        with_key=env_with_key,
    )


HERMES = Agent(
    name="hermes",
    title="Hermes Agent",
    install="pip install hermes-agent==0.19.0",
    summary="Hermes Agent's config.yaml",
    render=hermes,
    short="Hermes",
    ignores_base_url=True,
)
LLM = Agent(
    name="llm",
    title="llm",
    install="pip install llm==0.36",
    summary="llm's extra-openai-models.yaml (every selected host)",
    render=llm,
    needs_context=False,
    render_all=llm_all,
    with_key=llm_with_key,
)
OPENAI = Agent(
    name="openai",
    title="openai and the OpenAI Agents SDK",
    install="pip install openai openai-agents==0.24.0",
    summary="a Python program for the openai and Agents SDKs",
    render=openai,
    needs_context=False,
)

__all__ = ["HERMES", "LLM", "OPENAI", "env_snippet", "make_env"]
