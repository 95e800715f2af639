"""goose: its ``openai`` provider, configured by environment (``GOOSE_*`` and ``OPENAI_*``).

``GOOSE_CONTEXT_LIMIT`` gives it the context (else it assumes its own default) and
``GOOSE_MAX_TOKENS`` bounds each answer; ``GOOSE_DISABLE_KEYRING`` keeps it from asking a
keyring for the key. Its openai provider takes the server root as ``OPENAI_HOST`` and the path as
``OPENAI_BASE_PATH``; ``OPENAI_BASE_URL`` is set too.
"""

from __future__ import annotations

import shlex

from podkit.client.connect import ClientSettings

from .base import PROMPT, Agent, Setup, command, limits, openai_env, server_root


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "goose")
    env = openai_env(cs) | {
        "OPENAI_HOST": shlex.quote(server_root(cs)),
        "OPENAI_BASE_PATH": "v1/chat/completions",
        "GOOSE_PROVIDER": "openai",
        "GOOSE_MODEL": shlex.quote(cs.model),
        "GOOSE_CONTEXT_LIMIT": str(context),
        "GOOSE_MAX_TOKENS": str(output),
        "GOOSE_DISABLE_KEYRING": "1",
    }
    return Setup(
        host=cs.host,
        agent="goose",
        env=env,
        run=command("goose", "run", "--no-session", "--max-turns", "1", "-t", PROMPT),
        notes=("goose run exits 0 even when the server refuses the key: read its output",),
    )


AGENT = Agent(
    name="goose",
    title="goose",
    install="npm i -g @aaif/goose@0.20.1",
    summary="goose's variables (GOOSE_PROVIDER=openai, GOOSE_MODEL, GOOSE_CONTEXT_LIMIT)",
    render=render,
    ignores_base_url=True,
)
