"""Qwen Code: ``--auth-type openai`` and the ``OPENAI_*`` variables, ``OPENAI_MODEL`` included.

Without an auth type it stops at "No auth type is selected"; without ``OPENAI_MODEL`` it asks the
server for its own default model (a 404). Its environment carries no context or output limit.
"""

from __future__ import annotations

import shlex

from podkit.client.connect import ClientSettings

from .base import PROMPT, Agent, Setup, command, limits, openai_env

ARGS = ("--auth-type", "openai")


def render(cs: ClientSettings) -> Setup:
    limits(cs, "Qwen Code")
    return Setup(
        host=cs.host,
        agent="qwen",
        env=openai_env(cs, "NODE_EXTRA_CA_CERTS") | {"OPENAI_MODEL": shlex.quote(cs.model)},
        args=ARGS,
        run=command("qwen", *ARGS, PROMPT),
        notes=(
            "Qwen Code 0.15.10 is the newest that runs on node 20; 0.24 needs node 22 or newer",
            "Qwen Code's environment sets no output limit: the server bounds each answer by the context",
        ),
    )


AGENT = Agent(
    name="qwen",
    title="Qwen Code",
    install="npm i -g @qwen-code/qwen-code@0.15.10",
    summary="Qwen Code's variables (OPENAI_MODEL) and --auth-type openai",
    render=render,
)
