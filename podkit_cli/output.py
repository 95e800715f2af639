"""How every command prints: JSON on stdout with --json, else lines for people; messages on stderr."""

from __future__ import annotations

import json

import click


def emit(data, as_json: bool, human) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human(data)


def host_option(func):
    return click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")(func)
