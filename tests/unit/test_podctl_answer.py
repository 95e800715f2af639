"""podctl's one-line answer has one reader: every action's answer, and whatever else comes back, in one style."""

import ast
import json
import math

import pytest

from podkit.host.podctl import NO_PYTHON, PodctlError, read_answer
from tests.helpers import ROOT

ANSWERS = {
    "the last line, after a shell's noise": (
        "motd: welcome\n" + json.dumps({"ok": True}) + "\n",
        "",
        None,
        {"ok": True},
    ),
    "an answer despite a warning on stderr": (json.dumps({"left": []}), "warning: setlocale", None, {"left": []}),
}
REFUSED = {
    "nothing at all": ("", "", None, "podctl cache printed nothing"),
    "nothing, and the command failed": ("", "", 255, "podctl cache exited 255 without an answer"),
    "a traceback on stderr: its last line": (
        "",
        "Traceback (most recent call last):\n  File x\nKeyError: 'hub_cache'\n\n",
        1,
        "podctl cache exited 1 without an answer: KeyError: 'hub_cache'",
    ),
    "a shell's noise and no answer": (
        "Welcome to the pod!\n",
        "",
        None,
        "podctl cache printed no JSON: Welcome to the pod!",
    ),
    "JSON that is not an object": ("[1, 2]\n", "", None, "podctl cache answered something else: [1, 2]"),
    "a line cut short": ('{"repos": {', "", None, 'podctl cache printed no JSON: {"repos": {'),
    "no python3 on the host": (
        json.dumps(NO_PYTHON),
        "",
        None,
        "python3 not found on PATH: podkit needs python3 on the host (Debian/Ubuntu: apt-get install -y python3 "
        "python3-venv)",
    ),
}


@pytest.mark.parametrize("stdout, stderr, status, expected", ANSWERS.values(), ids=ANSWERS.keys())
def test_the_answer_is_the_last_lines_object(stdout, stderr, status, expected):
    assert read_answer("cache", stdout, stderr, status) == expected


@pytest.mark.parametrize("stdout, stderr, status, message", REFUSED.values(), ids=REFUSED.keys())
def test_anything_else_is_one_line_naming_the_action_and_what_came_back(stdout, stderr, status, message):
    with pytest.raises(PodctlError) as raised:
        read_answer("cache", stdout, stderr, status)
    assert str(raised.value) == message and "\n" not in str(raised.value)


def test_what_came_back_is_cut_to_one_short_line():
    with pytest.raises(PodctlError) as raised:
        read_answer("wait", "x" * 5000)
    assert len(str(raised.value)) < 250


def test_a_reader_may_read_the_numbers_its_own_way():
    answer = read_answer("status", '{"idle": NaN, "n": 3}', parse_constant=lambda _: None, parse_int=float)
    assert answer == {"idle": None, "n": 3.0}
    assert math.isnan(read_answer("status", '{"idle": NaN}')["idle"]), "json's own reading, unless asked"


def test_no_other_module_reads_podctls_last_line_itself():
    """Every module that runs podctl reads its answer through read_answer: none splits the output
    and parses the last line on its own (podctl itself and the reader excepted)."""
    found = []
    for folder in ("podkit", "podkit_cli", "operations"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "remote" in path.parts or path.name == "podctl.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and ast.unparse(node.func) == "json.loads"
                    and "splitlines" in ast.unparse(node)
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "read podctl's answer with podkit.host.podctl.read_answer"
