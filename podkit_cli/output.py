"""How every command prints: JSON on stdout with --json, else lines for people; messages on stderr."""

from __future__ import annotations

import json
import math
from typing import Any

import click


def finite(value: Any) -> Any:
    """``value`` with every NaN and Infinity (which JSON cannot write) as None, in dicts, lists and tuples."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {name: finite(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(data: Any) -> str:
    """The one way podkit writes JSON for a reader: strict JSON (a number that is not finite is
    null, never ``NaN``), two-space indent, sorted keys; what JSON has no type for as its text."""
    return json.dumps(finite(data), indent=2, sort_keys=True, default=str, allow_nan=False)


class Finite(click.FloatRange):
    """click's ``FloatRange`` less NaN and Infinity, which click takes as floats (``--usd-per-hour nan``
    passed ``min=0``: every comparison with NaN is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def emit(data: Any, as_json: bool, human: Any) -> None:
    if as_json:
        click.echo(dumps(data))
    else:
        human(data)


def host_option(func: Any) -> Any:
    return click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")(func)
