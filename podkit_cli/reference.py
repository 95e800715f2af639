"""The command reference the docs site shows, read from the click commands themselves.

``docs/hooks.py`` calls these at build time, so a page's ``--help`` text and the
command table are what ``podkit`` prints, never a copy that drifts.
"""

from __future__ import annotations

from collections.abc import Mapping

import click
from click.testing import CliRunner

from . import cli

#: Width the help texts are wrapped to on the site (click's own default).
WIDTH = 88


def command(path: str) -> click.Command:
    """The command named by ``path`` ("verify", "sandbox up"); a name that is not one is an error
    that lists the names there are."""
    found: click.Command = cli
    for name in path.split():
        commands = getattr(found, "commands", {})
        if name not in commands:
            where = " ".join(["podkit", *path.split()[: path.split().index(name)]])
            raise KeyError(f"{where} has no command {name!r}; it has: {', '.join(sorted(commands))}")
        found = commands[name]
    return found


def help_text(path: str) -> str:
    """``podkit PATH --help`` as the command prints it."""
    command(path)  # a clear error for a name that is not a command
    result = CliRunner().invoke(cli, [*path.split(), "--help"], prog_name="podkit", terminal_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"podkit {path} --help exited {result.exit_code}: {result.output}")
    return result.output


def help_block(path: str) -> str:
    """``podkit PATH --help`` as markdown: the text in a code block, and for a group each of its
    commands' help after it (not for ``podkit`` itself, whose commands have pages of their own)."""
    paths = [path]
    found = command(path)
    if isinstance(found, click.Group) and path:
        paths += [f"{path} {name}" for name in sorted(found.commands)]
    blocks = [f"```\n$ {' '.join(['podkit', *p.split(), '--help'])}\n{help_text(p).rstrip()}\n```\n" for p in paths]
    return "\n".join(blocks)


def summary(path: str) -> str:
    """The first sentence of a command's help."""
    paragraph = " ".join((command(path).help or "").split("\n\n")[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + "." if dot else paragraph


def commands_table(pages: Mapping[str, str]) -> str:
    """Every ``podkit`` command with the first sentence of its help, linked to its docs page
    (``pages``: top-level command -> the page's link; a command without one is an error)."""
    rows = ["| command | what |", "|---|---|"]
    for name, found in sorted(cli.commands.items()):
        if name not in pages:
            raise KeyError(f"podkit {name} has no docs page: add one and map it in docs/hooks.py")
        subcommands = getattr(found, "commands", {})
        for path in [f"{name} {sub}" for sub in sorted(subcommands)] if subcommands else [name]:
            text = summary(path).replace("|", "\\|")
            rows.append(f"| [`podkit {path}`]({pages[name]}) | {text} |")
    return "\n".join(rows) + "\n"
