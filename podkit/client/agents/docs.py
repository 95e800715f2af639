"""The "Connect an agent" sections, written from the registry so they cannot drift from the renderers.

Each agent is rendered for a placeholder host (``HOST`` serving ``MODEL``) and its section says
how to install it, the commands that put its files and variables in place and the command to run,
then its notes. ``podkit client``'s own flags (``--file``, ``--exports``) do the rest. The docs
site's ``<!-- podkit:agents -->`` marker (docs/hooks.py) is :func:`sections`; :func:`page` is the
page on its own.
"""

from __future__ import annotations

import posixpath

from podkit.client.connect import ClientSettings

from . import AGENTS
from .base import Agent, Setup

#: The host every section is rendered for: its names stand for the reader's own.
EXAMPLE = ClientSettings(
    host="HOST",
    base_url="https://HOST:8000/v1",
    model="MODEL",
    context_length=65536,
    key_file="/path/to/api_key",
)

TITLE = "# Connect an agent\n"

INTRO = """\
`podkit client INVENTORY --host HOST --for AGENT` prints what AGENT needs to use HOST's endpoint
([`podkit client`](commands/client.md)): its config file in its own format on stdout, ready to
redirect into place, or, for an agent configured by its environment, `export` lines to `eval`.
Where the file goes, the variables to export and the command to run go to stderr. The key is never
written into a file: each file names the variable `PODKIT_API_KEY`, and
`export PODKIT_API_KEY="$(cat KEYFILE)"` reads it from the controller's key file when the shell
runs it. Every agent gets the served model name, the context and an output limit (a quarter of the
context, at most 8192 tokens) wherever it reads them. `--file PATH` prints another of an agent's
files, `--exports` its variables, and `--json` each host's whole setup (files, env, args, run,
notes) for scripts. Through a tunnel, [`podkit tunnel --for AGENT`](commands/tunnel.md) prints the
same for the local address. A served model name that no profile can hold as written (a control,
line separator or bidi character) is refused in one line, never changed.

An agent that speaks an API vLLM does not serve (Gemini CLI speaks only the Gemini API) goes through
the LiteLLM proxy `--for litellm` configures: it runs on your machine, on loopback, in front of the
endpoint, never on the host. Start it before `--for gemini`. Every other agent here talks to the
endpoint directly (vLLM serves the OpenAI API and Anthropic's Messages).
"""


def _podkit(agent: str, *extra: str) -> str:
    return " ".join(["podkit client INVENTORY --host HOST --for", agent, *extra])


def commands(agent: Agent, setup: Setup) -> list[str]:
    """The shell lines that put ``setup`` in place and run it once."""
    lines = []
    for index, file in enumerate(setup.files):
        folder = posixpath.dirname(file.path)
        if folder.startswith("~/"):
            lines.append(f"mkdir -p {folder}")
        pick = () if index == 0 else ("--file", file.path)
        lines.append(f"{_podkit(agent.name, *pick)} > {file.path}")
    if setup.env:
        if setup.files:
            lines.append(f'eval "$({_podkit(agent.name, "--exports")})"')
        else:
            lines.append(f'eval "$({_podkit(agent.name)})"')
    lines += list(setup.once)
    if setup.run:
        lines.append(setup.run)
    return lines


def section(agent: Agent) -> str:
    """One agent's section: title, install, commands, where its files go, notes."""
    setup = agent.render(EXAMPLE)
    parts = [f"## {agent.title} (`--for {agent.name}`)", ""]
    if agent.install:
        parts += [f"Install: `{agent.install}` (the version podkit's end-to-end tests run)", ""]
    parts += ["```sh", *commands(agent, setup), "```", ""]
    gets = f"It gets {agent.summary}"
    if setup.env:
        gets += "; the variables: " + ", ".join(f"`{name}`" for name in setup.env)
    parts += [gets + "."]
    if any(not file.path.startswith("~") for file in setup.files):
        parts.append("Run these in the project folder: the agent reads its files from the folder it runs in.")
    parts.append("")
    parts += [f"- {note}." for note in setup.notes]
    if setup.notes:
        parts.append("")
    return "\n".join(parts)


def sections() -> str:
    """:data:`INTRO`, then every agent's section, in registry order."""
    return INTRO + "\n" + "\n".join(section(agent) for agent in AGENTS.values()).rstrip("\n") + "\n"


def page() -> str:
    """The page on its own: a title, then :func:`sections`."""
    return TITLE + "\n" + sections()


if __name__ == "__main__":
    print(page(), end="")
