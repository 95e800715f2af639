"""eval's cage with limits (issue #27, part 7): hostile answers to the ``feature`` task are bounded
(processes, memory, file size, workspace, output, time), each limit hit is a line of the run's
record, output that is not UTF-8 is read, and an answer that cheats (patches the test framework,
adds its own test file, a conftest or a sitecustomize, changes the task's tests) scores 0 with the
reason, because the tests run from pristine files in another interpreter. Small limits keep each
case fast."""

import json
import textwrap
from types import SimpleNamespace

import pytest

from podkit.client.eval import cage, load_tasks, scoring
from podkit.client.eval.endpoint import Turn
from podkit.client.eval.harness import run_once
from podkit.client.eval.tools import run_tool_task

pytestmark = pytest.mark.proc

FEATURE = next(task for task in load_tasks() if task.name == "feature")
TOOLS = next(task for task in load_tasks() if task.name == "tools")
GOOD = '''\
"""Durations as short strings: 5400 seconds <-> "1h30m"."""

import re

UNITS = (("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds):
    if seconds < 0:
        raise ValueError("negative duration")
    parts = []
    for name, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{name}")
    return "".join(parts) or "0s"


def parse_duration(text):
    if not re.fullmatch(r"(?:\\d+[hms])+", text):
        raise ValueError(f"not a duration: {text!r}")
    sizes = dict(UNITS)
    return sum(int(count) * sizes[unit] for count, unit in re.findall(r"(\\d+)([hms])", text))
'''
#: A wrong parse_duration: the task's tests fail on it unless something cheats.
WRONG = GOOD.replace("    return sum(int(count)", "    return 0 * sum(int(count)")
SMALL = cage.Limits(seconds=30, processes=8, memory=256 << 20, file=4 << 20, workspace=8 << 20, output=64 << 10)


@pytest.fixture(autouse=True)
def small_limits(monkeypatch):
    monkeypatch.setattr(scoring, "LIMITS", SMALL)


def answer(module: str) -> str:
    return f"```python\n{module}\n```\n"


def hostile(code: str, base: str = GOOD) -> str:
    return answer(base + "\n" + textwrap.dedent(code))


def judge(text: str):
    score, info = scoring.score_code(FEATURE, text)
    return score, info


def test_a_good_answer_passes_from_the_pristine_tests_in_another_interpreter():
    score, info = judge(answer(GOOD))
    assert score == 2 and info["tests"]["passed"] and info["tests"]["ran"] == 4, info["tests"]
    assert info["tests"]["limits"] == [] and info["tests"]["cheats"] == []


def test_a_wrong_answer_fails():
    score, info = judge(answer(WRONG))
    assert score == 1 and not info["tests"]["passed"] and "tests fail" in info["detail"]


BOUNDED = {
    "a fork bomb": (
        """
        import os, time
        forked = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                forked += 1
        finally:
            print("FORKED", forked)
        """,
        "process limit hit: 8 processes",
    ),
    "a 300 MB file": (
        """
        with open("big.bin", "wb") as handle:
            for _ in range(300):
                handle.write(bytes(1 << 20))
        """,
        "file size limit hit: 4 MiB per file",
    ),
    "300 MB in many small files": (
        """
        for index in range(100):
            with open(f"part{index}.bin", "wb") as handle:
                handle.write(bytes(3 << 20))
        """,
        "workspace size limit hit: 8 MiB for the workspace",
    ),
    "300 MB into /tmp": (
        """
        for index in range(100):
            with open(f"/tmp/part{index}.bin", "wb") as handle:
                handle.write(bytes(3 << 20))
        """,
        "workspace size limit hit: 8 MiB for the workspace",
    ),
    "a 1 GiB allocation": ("held = bytearray(1 << 30)\n", "memory limit hit: 256 MiB of address space per process"),
    "200 MB of output": (
        """
        import sys
        for _ in range(200):
            sys.stdout.write("x" * (1 << 20))
        """,
        "output limit hit: more than 64 KiB printed; the cages were stopped",
    ),
    "an answer that never returns": ("import time\ntime.sleep(3600)\n", "time limit hit"),
}


@pytest.mark.parametrize("code, line", BOUNDED.values(), ids=BOUNDED.keys())
def test_each_limit_bounds_a_hostile_answer_with_a_line_in_its_record(code, line, monkeypatch):
    if "never returns" in line or line == "time limit hit":
        monkeypatch.setattr(scoring, "LIMITS", cage.Limits(**{**SMALL.__dict__, "seconds": 2}))
    score, info = judge(hostile(code))
    tests = info["tests"]
    assert any(hit.startswith(line) for hit in tests["limits"]), tests
    assert score == 1 and not tests["passed"] and line in info["detail"]
    assert len(tests["output"]) <= 4000
    if "FORKED" in tests["output"]:
        forked = int(tests["output"].split("FORKED ")[1].split()[0])
        assert forked < SMALL.processes


def test_output_that_is_not_utf8_is_read_and_the_run_is_recorded():
    code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe bad \\xc3')\nsys.stdout.flush()\n"
    score, info = judge(hostile(code))
    assert score == 2 and "\ufffd\ufffd bad \ufffd" in info["tests"]["output"]


def test_invalid_utf8_from_the_model_still_leaves_a_record():
    """The finding: one invalid byte ended the whole eval with a traceback and no record."""

    class Endpoint:
        def chat(self, messages, params, tools=None):
            text = hostile("import os\nos.write(1, b'\\x80\\x81')\nos.write(2, b'\\xff')\n")
            return Turn(content=text, reasoning=None, tool_calls=[], finish_reason="stop", error=None, seconds=0.0)

    run = run_once(Endpoint(), FEATURE, {})
    assert run["correctness"] == 2 and "tests pass" in run["detail"]
    json.dumps(run)


CHEATS = {
    "patching unittest's assertions": (
        """
        import unittest
        unittest.TestCase.assertEqual = lambda *args, **kwargs: None
        unittest.TestCase.assertRaises = lambda *args, **kwargs: __import__("contextlib").nullcontext()
        """,
        "the answer loaded unittest, a test framework, in its own interpreter",
    ),
    "patching the framework through a hidden import": (
        """
        framework = __import__("unit" + "test")
        framework.TestResult.wasSuccessful = lambda self: True
        """,
        "the answer loaded unittest, a test framework, in its own interpreter",
    ),
    "adding its own test file": (
        """
        with open("test_aaa.py", "w") as handle:
            handle.write("import unittest\\nunittest.TestCase.assertEqual = lambda *a: None\\n")
        """,
        "the answer added test_aaa.py, a file a test runner would read",
    ),
    "writing a conftest": (
        "open('conftest.py', 'w').write('import pytest\\n')\n",
        "the answer added conftest.py, a file a test runner would read",
    ),
    "writing a sitecustomize": (
        "open('sitecustomize.py', 'w').write('import unittest\\n')\n",
        "the answer added sitecustomize.py, a file a test runner would read",
    ),
    "rewriting the task's tests": (
        "open('test_durations.py', 'w').write('import unittest\\n')\n",
        "the answer changed the task's test file test_durations.py",
    ),
}


@pytest.mark.parametrize("code, reason", CHEATS.values(), ids=CHEATS.keys())
def test_a_cheating_answer_scores_0_with_the_reason(code, reason):
    score, info = judge(hostile(code, base=WRONG))
    assert score == 0 and info["detail"].startswith("cheating: ") and reason in info["detail"], info["detail"]
    assert not info["tests"]["passed"]  # the task's pristine tests ran, in their own interpreter, and failed


def test_an_answer_that_only_mentions_unittest_under_main_is_no_cheat():
    code = 'if __name__ == "__main__":\n    import unittest\n    unittest.main()\n'
    score, info = judge(hostile(code))
    assert score == 2 and info["tests"]["cheats"] == []


def tool_turns(*calls):
    """A model that makes ``calls`` (name, arguments) one turn each, then answers."""
    turns = [
        Turn(
            content="",
            reasoning=None,
            tool_calls=[{"id": f"c{i}", "name": name, "arguments": json.dumps(args)}],
            finish_reason="tool_calls",
            error=None,
            seconds=0.0,
        )
        for i, (name, args) in enumerate(calls)
    ]
    turns.append(Turn(content="done", reasoning=None, tool_calls=[], finish_reason="stop", error=None, seconds=0.0))
    replies = iter(turns)
    return SimpleNamespace(chat=lambda messages, params, tools=None: next(replies))


def test_the_tool_task_cheat_of_a_test_file_of_its_own_scores_0():
    files = TOOLS.files()
    patch = "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
    endpoint = tool_turns(
        ("write_file", {"path": "loader.py", "content": files["loader.py"] + "\n# touched\n"}),
        ("write_file", {"path": "test_aaa.py", "content": patch}),
    )
    score, info = run_tool_task(endpoint, TOOLS, {})
    assert score == 0 and "the answer added test_aaa.py, a file a test runner would read" in info["detail"]
