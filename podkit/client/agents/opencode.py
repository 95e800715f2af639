"""opencode: ``~/.config/opencode/opencode.json`` with a ``podkit`` provider.

The provider is ``@ai-sdk/openai-compatible`` (opencode fetches it from npm on first run); the
key is ``{env:PODKIT_API_KEY}``, which opencode substitutes from its environment; the model's
``limit`` carries the context and the output limit. ``small_model`` keeps opencode's background
calls (titles, summaries) on the served model too.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import KEY_VAR, PROMPT, Agent, File, Setup, ca_env, command, json_text, key_env, limits

PROVIDER = "podkit"
PATH = "~/.config/opencode/opencode.json"


def render(cs: ClientSettings, called: str = "opencode") -> Setup:
    context, output = limits(cs, called)
    chosen = f"{PROVIDER}/{cs.model}"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": f"podkit {cs.host}",
                "options": {"baseURL": cs.base_url, "apiKey": "{env:" + KEY_VAR + "}"},
                "models": {
                    cs.model: {"name": cs.model, "tool_call": True, "limit": {"context": context, "output": output}}
                },
            }
        },
        "model": chosen,
        "small_model": chosen,
    }
    return Setup(
        host=cs.host,
        agent="opencode",
        files=(File(PATH, json_text(config)),),
        env=key_env(cs) | ca_env(cs, "NODE_EXTRA_CA_CERTS"),
        run=command("opencode", "run", PROMPT),
        notes=(
            "opencode fetches @ai-sdk/openai-compatible from npm on its first run; its models.dev lookup "
            "fails harmlessly offline",
        ),
    )


AGENT = Agent(
    name="opencode",
    title="opencode",
    install="npm i -g opencode-ai@1.18.33",
    summary="opencode's ~/.config/opencode/opencode.json",
    render=render,
)
