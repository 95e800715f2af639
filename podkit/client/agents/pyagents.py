"""The Python agents configured by their environment and flags: OpenHands CLI, gptme, smolagents'
``smolagent`` and Open WebUI.

- OpenHands CLI 1.16.0 reads ``LLM_MODEL`` (``openai/<name>``, litellm's form), ``LLM_BASE_URL`` and
  ``LLM_API_KEY`` only with ``--override-with-envs``; its default base URL is its vendor's proxy.
  It reads no context or output limit from the environment, and a wrong key exits 0.
- gptme 0.35.1: ``-m local/<name>`` reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``;
  ``--tool-format tool`` makes it send tools (else it writes them as text); ``--context-budget``
  is where it compacts (it assumes a 128k window for an unknown model).
- smolagents 1.26.0 ignores ``OPENAI_BASE_URL``: its ``OpenAIModel`` goes to its vendor
  (api.fireworks.ai) with ``OPENAI_API_KEY`` unless ``--api-base`` names the endpoint;
  ``--action-type tool_calling`` sends tools.
- Open WebUI 0.12.4 reads ``OPENAI_API_BASE_URL`` (not ``OPENAI_BASE_URL``) and keeps what its
  first start saw in its database unless ``ENABLE_PERSISTENT_CONFIG=False``.
"""

from __future__ import annotations

import shlex

from podkit.client.connect import ClientSettings

from .base import KEY_REF, PROMPT, Agent, Setup, ca_env, command, key_env, limits, openai_env


def openhands(cs: ClientSettings) -> Setup:
    limits(cs, "OpenHands")
    env = key_env(cs) | {
        "LLM_MODEL": shlex.quote(f"openai/{cs.model}"),
        "LLM_BASE_URL": shlex.quote(cs.base_url),
        "LLM_API_KEY": KEY_REF,
        "OPENHANDS_SUPPRESS_BANNER": "1",
    }
    args = ("--override-with-envs",)
    return Setup(
        host=cs.host,
        agent="openhands",
        env=env | ca_env(cs, "SSL_CERT_FILE"),
        args=args,
        run=command("openhands", *args, "--headless", "-t", PROMPT),
        notes=(
            "OpenHands reads LLM_* only with --override-with-envs; its default base URL is its vendor's proxy",
            "OpenHands exits 0 when the server refuses the key: read its output",
            "OpenHands reads no context or output limit from its environment: the server bounds each answer",
            "OpenHands 1.16 needs Python 3.12 (uv tool install openhands --python 3.12)",
        ),
    )


def gptme(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "gptme")
    args = ("-m", f"local/{cs.model}", "--tool-format", "tool", "--context-budget", str(context - output))
    return Setup(
        host=cs.host,
        agent="gptme",
        env=openai_env(cs),
        args=args,
        run=command("gptme", "-n", *args, PROMPT),
        notes=(
            "Without --tool-format tool gptme sends the model no tools",
            "gptme's local provider sends no output limit: the server bounds each answer by the context",
        ),
    )


def smolagents(cs: ClientSettings) -> Setup:
    limits(cs, "smolagents")
    args = (
        "--model-type",
        "OpenAIModel",
        "--model-id",
        cs.model,
        "--api-base",
        cs.base_url,
        "--action-type",
        "tool_calling",
    )
    env = key_env(cs) | {"OPENAI_API_KEY": KEY_REF} | ca_env(cs, "SSL_CERT_FILE")
    return Setup(
        host=cs.host,
        agent="smolagents",
        env=env,
        args=args,
        run=command("smolagent", PROMPT, *args),
        notes=(
            "smolagent ignores OPENAI_BASE_URL: without --api-base it sends OPENAI_API_KEY to its vendor",
            "smolagent's flags take no context or output limit: the server bounds each answer",
        ),
    )


def open_webui(cs: ClientSettings) -> Setup:
    limits(cs, "Open WebUI")
    env = key_env(cs) | {
        "OPENAI_API_BASE_URL": shlex.quote(cs.base_url),
        "OPENAI_API_KEY": KEY_REF,
        "ENABLE_OLLAMA_API": "False",
        "ENABLE_PERSISTENT_CONFIG": "False",
    }
    return Setup(
        host=cs.host,
        agent="open-webui",
        env=env | ca_env(cs, "SSL_CERT_FILE"),
        run=command("open-webui", "serve", "--host", "127.0.0.1"),
        notes=(
            "Open WebUI reads OPENAI_API_BASE_URL, not OPENAI_BASE_URL: from OPENAI_BASE_URL alone it stores the "
            "key beside api.openai.com in its database",
            "ENABLE_PERSISTENT_CONFIG=False makes it read these at every start instead of its database",
            "Its chat settings take the context and output limit per model (num_ctx, max_tokens)",
        ),
    )


OPENHANDS = Agent(
    name="openhands",
    title="OpenHands CLI",
    install="pip install openhands==1.16.0",
    summary="OpenHands' variables (LLM_MODEL, LLM_BASE_URL, LLM_API_KEY) and --override-with-envs",
    render=openhands,
    short="OpenHands",
    ignores_base_url=True,
)
GPTME = Agent(
    name="gptme",
    title="gptme",
    install="pip install gptme==0.35.1",
    summary="gptme's variables and flags (-m local/NAME, --tool-format tool)",
    render=gptme,
)
SMOLAGENTS = Agent(
    name="smolagents",
    title="smolagents (smolagent)",
    install="pip install 'smolagents[toolkit]==1.26.0' openai",
    summary="smolagent's flags (--model-type OpenAIModel, --api-base)",
    render=smolagents,
    short="smolagents",
    ignores_base_url=True,
)
OPEN_WEBUI = Agent(
    name="open-webui",
    title="Open WebUI",
    install="pip install open-webui==0.12.4",
    summary="Open WebUI's variables (OPENAI_API_BASE_URL, ENABLE_PERSISTENT_CONFIG=False)",
    render=open_webui,
    ignores_base_url=True,
)
