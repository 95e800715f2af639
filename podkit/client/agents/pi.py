"""pi coding agent: ``~/.pi/agent/models.json`` with a ``podkit`` provider.

pi ignores ``OPENAI_BASE_URL``: a provider of its own, ``api: "openai-completions"``, names the
key's variable in ``apiKey`` (pi reads a value that is a variable's name from that variable) and
gives the model its ``contextWindow`` and ``maxTokens``. ``compat`` turns off the ``developer``
role and ``reasoning_effort``, which pi's docs (docs/models.md) say vLLM needs. pi 0.73.1 has no
turn limit: a model that keeps calling tools runs until it is stopped.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import KEY_VAR, PROMPT, Agent, File, Setup, ca_env, command, json_text, key_env, limits

PROVIDER = "podkit"
PATH = "~/.pi/agent/models.json"


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "pi")
    config = {
        "providers": {
            PROVIDER: {
                "baseUrl": cs.base_url,
                "api": "openai-completions",
                "apiKey": KEY_VAR,
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": cs.model, "name": cs.model, "contextWindow": context, "maxTokens": output}],
            }
        }
    }
    args = ("--provider", PROVIDER, "--model", cs.model)
    return Setup(
        host=cs.host,
        agent="pi",
        files=(File(PATH, json_text(config)),),
        env=key_env(cs) | ca_env(cs, "NODE_EXTRA_CA_CERTS"),
        args=args,
        run=command("pi", *args, "--no-session", "-p", PROMPT),
        notes=(
            "pi ignores OPENAI_BASE_URL: without this file its openai provider goes to OpenAI",
            "pi -p has no turn limit: a model that keeps calling tools runs until you stop it",
            "pi -p exits 1 when the server refuses the key, but pi --mode json exits 0: read its errorMessage",
        ),
    )


AGENT = Agent(
    name="pi",
    title="pi coding agent",
    install="npm i -g @mariozechner/pi-coding-agent@0.73.1",
    summary="pi's ~/.pi/agent/models.json (a podkit provider)",
    render=render,
    short="pi",
    ignores_base_url=True,
)
