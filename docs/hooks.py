"""MkDocs hook: fill the markers ``<!-- podkit:NAME ARGS -->`` in the pages with text made from
the code at build time, so a table on the site cannot drift from what podkit does.

Markers (one registry, ``GENERATORS``):

    <!-- podkit:settings -->          the settings table (podkit.settings.settings_table)
    <!-- podkit:exit-codes -->        the exit codes (podkit.client.outcome.exit_codes_table)
    <!-- podkit:commands -->          every command, linked to its page (podkit_cli.reference)
    <!-- podkit:help verify -->       ``podkit verify --help`` (a group: each subcommand too)
    <!-- podkit:agents -->            one section per agent ``--for`` takes (podkit.client.agents.docs)
    <!-- podkit:plan-accuracy model -->  the plan's accuracy per kind over the reference cases
                                      (podkit.plan.reference; ``attention``: per attention kind)

A marker this file does not know fails the build (mkdocs build --strict runs in scripts/test.sh).
``tests/unit/test_docs.py`` runs the same expansion on every page.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

MARKER = re.compile(r"<!-- podkit:([a-z-]+)((?: [a-z-]+)*) -->")

#: Each top-level command's page, relative to docs/commands/ (the commands table links there).
COMMAND_PAGES = {
    "bench": "bench.md",
    "cache": "cache.md",
    "client": "client.md",
    "down": "lifecycle.md",
    "eval": "eval.md",
    "key": "key.md",
    "plan": "plan.md",
    "sandbox": "sandbox.md",
    "status": "lifecycle.md",
    "tunnel": "tunnel.md",
    "up": "lifecycle.md",
    "verify": "verify.md",
}


def _settings(*args: str) -> str:
    from podkit.settings import settings_table

    return settings_table()


def _exit_codes(*args: str) -> str:
    from podkit.client.outcome import exit_codes_table

    return exit_codes_table()


def _commands(*args: str) -> str:
    from podkit_cli.reference import commands_table

    return commands_table(COMMAND_PAGES)


def _help(*args: str) -> str:
    from podkit_cli.reference import help_block

    return help_block(" ".join(args))


def _agents(*args: str) -> str:
    from podkit.client.agents.docs import sections

    return sections()


#: The reference cases: public startup logs, then the starts podkit measured that were sent back.
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _plan_accuracy(by: str = "model") -> str:
    """The accuracy table; a calibration case that cannot be counted is named on stderr and left out
    (a case sent back is data: it never stops the build)."""
    from podkit.plan.reference import accuracy_table, load_cases

    skipped: list[str] = []
    table = accuracy_table(load_cases(FIXTURES / "kv_reference_cases.json", FIXTURES / "calibration", skipped), by)
    for line in skipped:
        print(f"docs: tests/fixtures/calibration/{line}", file=sys.stderr)
    return table


GENERATORS: dict[str, Callable[..., str]] = {
    "settings": _settings,
    "exit-codes": _exit_codes,
    "commands": _commands,
    "help": _help,
    "agents": _agents,
    "plan-accuracy": _plan_accuracy,
}


def expand(markdown: str, where: str) -> str:
    """``markdown`` with every marker replaced by its generated text; an unknown marker is an
    error naming the page and the markers there are."""

    def one(match: re.Match[str]) -> str:
        name, args = match.group(1), match.group(2).split()
        if name not in GENERATORS:
            raise ValueError(f"{where}: unknown marker podkit:{name}; known: {', '.join(sorted(GENERATORS))}")
        return GENERATORS[name](*args)

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    return expand(markdown, page.file.src_uri)


def on_config(config):
    """The project root on sys.path, so the generators import this checkout's podkit."""
    import sys

    root = str(Path(config["config_file_path"]).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config
