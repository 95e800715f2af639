"""--json prints strict JSON: one helper (podkit_cli/output.py), through which every command prints it."""

import json
import math
import re

import pytest

from podkit import project_path
from podkit_cli.output import dumps


def strict(text):
    return json.loads(text, parse_constant=lambda literal: pytest.fail(f"{literal} in JSON output"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_number_json_cannot_write_is_null(bad):
    data = {"spend_usd": bad, "levels": [1.5, bad, {"p50": bad}], "pair": (bad, 2)}
    assert strict(dumps(data)) == {"spend_usd": None, "levels": [1.5, None, {"p50": None}], "pair": [None, 2]}


def test_what_json_has_no_type_for_is_its_text_and_the_rest_is_kept():
    from pathlib import Path

    data = {"b": 1, "a": [True, None, "x", 10**30], "path": Path("/w")}
    assert strict(dumps(data)) == {"a": [True, None, "x", 10**30], "b": 1, "path": "/w"}
    assert dumps(data).splitlines()[1] == '  "a": [', "sorted, two-space indent"


def test_every_command_prints_json_through_the_one_helper():
    for module in sorted(project_path("podkit_cli").glob("*.py")):
        if module.name != "output.py":
            assert not re.search(r"json\.dumps?\(", module.read_text()), f"{module.name}: print JSON with output.dumps"
