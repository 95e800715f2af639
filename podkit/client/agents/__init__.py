"""``podkit client --for AGENT``: one description per agent, found by name in :data:`AGENTS`.

Each entry is an :class:`~.base.Agent` (its module holds its table or template); its ``render``
turns one host's :class:`~podkit.client.connect.ClientSettings` into a :class:`~.base.Setup`, the
agent's whole setup: the files it reads, the environment (the key only by reference), its flags,
the commands to run once, an example run, its notes and its warnings. :func:`setups` renders one
agent for several hosts; :mod:`.printout` builds what the CLI prints from it (stdout and stderr,
or JSON rows), so the CLI only writes that out; :mod:`.docs` writes the "Connect an agent" page
from the same entries. A new agent is one module, its entry here, and its test.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings, ConnectError

from . import (
    aider,
    bridge,
    classic,
    claude,
    cline,
    codex,
    continue_cli,
    goose,
    kilo,
    mini_swe_agent,
    opencode,
    pi,
    pyagents,
    qwen,
)
from .base import Agent, File, Setup, setup_for

#: Every agent ``--for`` takes, by name, in the order ``--help`` and the docs list them.
AGENTS: dict[str, Agent] = {
    "env": classic.make_env(lambda: AGENTS.values()),
    "hermes": classic.HERMES,
    "llm": classic.LLM,
    "openai": classic.OPENAI,
    "codex": codex.AGENT,
    "opencode": opencode.AGENT,
    "continue": continue_cli.AGENT,
    "aider": aider.AGENT,
    "qwen": qwen.AGENT,
    "goose": goose.AGENT,
    "mini-swe-agent": mini_swe_agent.AGENT,
    "claude": claude.AGENT,
    "pi": pi.AGENT,
    "cline": cline.AGENT,
    "kilo": kilo.AGENT,
    "openhands": pyagents.OPENHANDS,
    "gptme": pyagents.GPTME,
    "smolagents": pyagents.SMOLAGENTS,
    "open-webui": pyagents.OPEN_WEBUI,
    "litellm": bridge.LITELLM,
    "gemini": bridge.GEMINI,
}


def agent(name: str) -> Agent:
    """The agent called ``name``; an unknown name is refused with the valid ones."""
    try:
        return AGENTS[name]
    except KeyError:
        raise ConnectError(f"unknown agent {name!r}; one of {', '.join(AGENTS)}") from None


def setups(name: str, settings: list[ClientSettings]) -> list[Setup]:
    """``name``'s :class:`Setup` for each host, in order, each checked and with its host's warnings
    (:func:`~.base.setup_for`)."""
    chosen = agent(name)
    return [setup_for(chosen, cs) for cs in settings]


__all__ = ["AGENTS", "Agent", "File", "Setup", "agent", "setups"]
