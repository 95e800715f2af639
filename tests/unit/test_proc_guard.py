"""The suite's guard (tests/conftest.py): a test without the ``proc`` marker that starts a process
fails, naming the fix, whether the test or its fixture starts it; a broader fixture finalized in such
a test's teardown may stop what a proc test started; and an e2e module marked for two of the e2e
layer's sessions, or marked e2e outside tests/e2e, is refused before it runs twice or never."""

from pathlib import Path

import pytest

pytest_plugins = "pytester"
pytestmark = pytest.mark.proc

CONFTEST = (Path(__file__).parents[1] / "conftest.py").read_text()

CASES = {
    "the test starts one": (
        """
import subprocess
def test_pure():
    subprocess.run(["true"])
""",
        {"failed": 1},
    ),
    "its fixture starts one": (
        """
import subprocess, pytest
@pytest.fixture
def started():
    subprocess.run(["true"])
def test_pure(started):
    pass
""",
        {"errors": 1},
    ),
    "a session fixture a proc test used ends in a pure test's teardown": (
        """
import subprocess, pytest
@pytest.fixture(scope="session")
def server():
    yield
    subprocess.run(["true"])
@pytest.mark.proc
def test_proc(server):
    pass
def test_pure():
    pass
""",
        {"passed": 2},
    ),
    "a proc test starts one": (
        """
import subprocess, pytest
@pytest.mark.proc
def test_proc():
    subprocess.run(["true"])
""",
        {"passed": 1},
    ),
}


@pytest.mark.parametrize("source, outcome", CASES.values(), ids=CASES.keys())
def test_the_guard(pytester, source, outcome):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    proc: starts a process\n    e2e: end to end\n")
    pytester.makepyfile(source)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(**outcome)
    if "passed" not in outcome or outcome.get("passed") != sum(outcome.values()):
        result.stdout.fnmatch_lines(["*starts a process*but is not marked proc: add @pytest.mark.proc*"])


def test_a_module_in_two_e2e_sessions_is_refused_at_collection(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    proc: p\n    e2e: e\n    apart: a\n    aside: s\n")
    pytester.makepyfile(
        test_twice="import pytest\npytestmark = [pytest.mark.e2e, pytest.mark.apart, pytest.mark.aside]\ndef test_x():\n    pass\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*marked both apart and aside*test_twice.py*"])


def test_an_e2e_test_outside_tests_e2e_is_refused_at_collection(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    proc: p\n    e2e: e\n")
    pytester.makepyfile(test_astray="import pytest\npytestmark = pytest.mark.e2e\ndef test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*marked e2e outside tests/e2e*test_astray.py*"])
