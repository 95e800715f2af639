"""Claude Code: ``ANTHROPIC_*`` variables for vLLM's Anthropic-compatible ``/v1/messages``.

``ANTHROPIC_BASE_URL`` is the server root (Claude Code adds ``/v1/messages``). The key goes as
``ANTHROPIC_AUTH_TOKEN``, which Claude Code sends as ``Authorization: Bearer`` (the header the
edge checks; ``ANTHROPIC_API_KEY`` would go as ``x-api-key``) and which outranks an
``ANTHROPIC_API_KEY`` already in the shell, so that key is not sent here. Every model alias
Claude Code uses (its main model and its background "haiku" calls) is the served model, and
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` bounds each answer. Claude Code 2.1.197 run with these against a
stub sent ``POST /v1/messages?beta=true`` with ``Authorization: Bearer``, no ``x-api-key``, the
served model and that ``max_tokens``. Claude Code 2.1.332 does not know the served
model and otherwise assumes a 1M-token window ("so it assumes a context window of 1m tokens"), so it
would not compact before the server refuses a prompt: ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` gives it
the context (its own notice names that variable for a gateway's model), and
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` compacts there too when the context is at least its 100k
minimum (a smaller one is read as 100k, with a warning). Older versions ignore both.
"""

from __future__ import annotations

import shlex

from podkit.client.connect import ClientSettings

from .base import KEY_REF, PROMPT, Agent, Setup, ca_env, command, key_env, limits, server_root

#: Claude Code 2.1.332 reads a smaller CLAUDE_CODE_AUTO_COMPACT_WINDOW as this, and warns.
AUTO_COMPACT_MINIMUM = 100_000

MODEL_VARS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
)


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "Claude Code")
    model = shlex.quote(cs.model)
    env = key_env(cs) | {
        "ANTHROPIC_BASE_URL": shlex.quote(server_root(cs)),
        "ANTHROPIC_AUTH_TOKEN": KEY_REF,
        **dict.fromkeys(MODEL_VARS, model),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(context),
        **({"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(context)} if context >= AUTO_COMPACT_MINIMUM else {}),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return Setup(
        host=cs.host,
        agent="claude",
        env=env | ca_env(cs, "NODE_EXTRA_CA_CERTS"),
        run=command("claude", "-p", PROMPT),
        notes=(
            "Claude Code speaks the Anthropic Messages API: the server must serve /v1/messages (vLLM does)",
            "Claude Code's own system prompt and tools are long: give the model a large context",
            "Claude Code retries a refused key for over a minute: a wrong key looks like a hang",
        ),
    )


AGENT = Agent(
    name="claude",
    title="Claude Code",
    install="npm i -g @anthropic-ai/claude-code@2.1.332",
    summary="Claude Code's variables (ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, the model names)",
    render=render,
    ignores_base_url=True,
)
