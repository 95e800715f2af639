"""mini-swe-agent (``mini``): ``-m openai/<name>``, its default config plus an output limit
(``-c mini.yaml -c model.model_kwargs.max_tokens=N``), and the ``OPENAI_*`` variables.

``MSWEA_COST_TRACKING=ignore_errors`` keeps it from aborting on a model litellm cannot price
("This model isn't mapped yet"); ``MSWEA_CONFIGURED=true`` skips its first-run questions. A
``-c`` replaces the default config, so ``mini.yaml`` is named first.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import PROMPT, Agent, Setup, command, limits, openai_env


def render(cs: ClientSettings) -> Setup:
    _, output = limits(cs, "mini-swe-agent")
    args = ("-m", f"openai/{cs.model}", "-c", "mini.yaml", "-c", f"model.model_kwargs.max_tokens={output}")
    env = openai_env(cs) | {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors"}
    return Setup(
        host=cs.host,
        agent="mini-swe-agent",
        env=env,
        args=args,
        run=command("mini", *args, "-t", PROMPT, "--yolo", "--exit-immediately"),
        notes=("mini has one tool, bash: a call to any other tool is parsed and refused",),
    )


AGENT = Agent(
    name="mini-swe-agent",
    title="mini-swe-agent",
    install="pip install mini-swe-agent==2.4.6",
    summary="mini-swe-agent's variables and flags (-m openai/NAME, an output limit)",
    render=render,
)
