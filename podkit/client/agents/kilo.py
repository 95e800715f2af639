"""Kilo Code CLI: opencode's file, unchanged, at ``~/.config/kilo/opencode.json``.

Kilo is a fork of opencode and reads opencode's config format from its own folder: the
``podkit`` provider, the key as ``{env:PODKIT_API_KEY}`` and the model's ``limit``. Like opencode,
it fetches ``@ai-sdk/openai-compatible`` from npm on its first run.
"""

from __future__ import annotations

from dataclasses import replace

from podkit.client.connect import ClientSettings

from . import opencode
from .base import PROMPT, Agent, File, Setup, command

PATH = "~/.config/kilo/opencode.json"


def render(cs: ClientSettings) -> Setup:
    base = opencode.render(cs, "Kilo Code")
    (file,) = base.files
    return replace(
        base,
        agent="kilo",
        files=(File(PATH, file.content),),
        run=command("kilo", "run", PROMPT),
        notes=("Kilo reads opencode's format: the same file as --for opencode, in Kilo's own folder",),
    )


AGENT = Agent(
    name="kilo",
    title="Kilo Code CLI",
    install="npm i -g @kilocode/cli@7.7.7",
    summary="Kilo Code's ~/.config/kilo/opencode.json (opencode's format)",
    render=render,
    short="Kilo",
)
