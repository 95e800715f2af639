"""The four clients podkit wrote for before the agent renderers: shell exports (``env``), Hermes
Agent, llm and a Python program for the openai and Agents SDKs. Their text comes from
:mod:`podkit.client.connect`; here each is described as a :class:`~.base.Setup` too."""

from __future__ import annotations

import shlex

from podkit.client.connect import (
    LLM_KEY_NAME,
    ClientSettings,
    env_snippet,
    hermes_yaml,
    llm_yaml,
    openai_snippet,
)

from .base import KEY_REF, PROMPT, Agent, File, Setup, ca_env, command, key_env

HERMES_PATH = "~/.hermes/config.yaml"
LLM_PATH = "~/.config/io.datasette.llm/extra-openai-models.yaml"
OPENAI_PATH = "podkit_openai.py"
NO_TRACING = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}


def env(cs: ClientSettings) -> Setup:
    exports = key_env(cs) | {
        "OPENAI_API_KEY": KEY_REF,
        "OPENAI_BASE_URL": shlex.quote(cs.base_url),
        "PODKIT_MODEL": shlex.quote(cs.model),
    }
    return Setup(host=cs.host, agent="env", env=exports | ca_env(cs, "SSL_CERT_FILE") | NO_TRACING)


def hermes(cs: ClientSettings) -> Setup:
    return Setup(
        host=cs.host,
        agent="hermes",
        files=(File(HERMES_PATH, hermes_yaml(cs)),),
        env=key_env(cs) | ca_env(cs, "SSL_CERT_FILE"),
        run=command("hermes", "chat", "-Q", "--max-turns", "1", "-q", PROMPT),
        notes=(
            "The file goes to $HERMES_HOME/config.yaml where HERMES_HOME is set",
            "Hermes refuses a context under 64,000 tokens: podkit client warns when a host's is smaller",
        ),
    )


def llm(cs: ClientSettings) -> Setup:
    return Setup(
        host=cs.host,
        agent="llm",
        files=(File(LLM_PATH, llm_yaml(cs)),),
        env=key_env(cs) | ca_env(cs, "SSL_CERT_FILE"),
        run=command("llm", "-m", cs.llm_model_id, PROMPT),
        notes=(
            'The file goes beside llm\'s logs: "$(dirname "$(llm logs path)")/extra-openai-models.yaml"',
            f'Give llm the key once: llm keys set {LLM_KEY_NAME} --value "$PODKIT_API_KEY"',
        ),
    )


def openai(cs: ClientSettings) -> Setup:
    return Setup(
        host=cs.host,
        agent="openai",
        files=(File(OPENAI_PATH, openai_snippet(cs)),),
        env=key_env(cs) | NO_TRACING,
        run=command("python", OPENAI_PATH),
        notes=("The Agents SDK part runs where openai-agents is installed",),
    )


ENV = Agent(
    name="env",
    title="Shell exports",
    install="",
    summary="shell exports for OpenAI-compatible tools",
    render=env,
    needs_context=False,
)
HERMES = Agent(
    name="hermes",
    title="Hermes Agent",
    install="pip install hermes-agent==0.19.0",
    summary="Hermes Agent's config.yaml",
    render=hermes,
    short="Hermes",
)
LLM = Agent(
    name="llm",
    title="llm",
    install="pip install llm==0.36",
    summary="llm's extra-openai-models.yaml (every selected host)",
    render=llm,
    needs_context=False,
    multi_host=True,
)
OPENAI = Agent(
    name="openai",
    title="openai and the OpenAI Agents SDK",
    install="pip install openai openai-agents==0.24.0",
    summary="a Python program for the openai and Agents SDKs",
    render=openai,
    needs_context=False,
)

__all__ = ["ENV", "HERMES", "LLM", "OPENAI", "env_snippet"]
