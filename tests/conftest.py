"""The whole suite: tests import podkit and podkit_cli as installed (``pip install -e .``) and the
test doubles in testing/ from the project root (pytest.ini's ``pythonpath``)."""

import os
import subprocess

import pytest

#: What a pure test may not do: start a process. A test that does is marked ``proc`` (or ``e2e``),
#: so ``pytest -m "not e2e and not proc"`` is the pure layer and stays fast.
_STARTERS = ((subprocess.Popen, "__init__"), (os, "fork"), (os, "posix_spawn"), (os, "posix_spawnp"))


def pytest_sessionstart(session):
    """matplotlib (bench's charts) builds its font cache the first time it is imported under a fresh
    HOME, running ``fc-list``: build it now, before any test, so no pure test is charged with a
    process it did not start."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


#: What an e2e test may wait for, in the order its installs are ready (tests/e2e/early.py): nothing,
#: the session sandbox's first apply, then the agents' and clients' installs.
_EARLY_FIXTURES = ("pod", "agent_programs", "client_venvs")


def _run_order(item) -> tuple[bool, int]:
    if item.get_closest_marker("e2e") is None:
        return (False, 0)
    needs = [index + 1 for index, name in enumerate(_EARLY_FIXTURES) if name in item.fixturenames]
    return (True, max(needs, default=0))


def _modules(items, which) -> str:
    """The files of the ``items`` that ``which`` picks, sorted, comma-separated ("" for none)."""
    return ", ".join(sorted({item.nodeid.split("::")[0] for item in items if which(item)}))


def pytest_collection_modifyitems(config, items):
    """The e2e layer runs last, and in it first what needs no install, then what needs the sandbox,
    then what needs the agents or the clients: the installs (tests/e2e/early.py) proceed while the
    tests before run, and a failure of the pure or proc layer shows before the e2e layer's minutes.
    A test in two of the e2e layer's sessions (marked both apart and aside) is refused: it would run twice;
    so is an e2e test outside tests/e2e, which scripts/test.sh's e2e sessions do not collect."""
    both = _modules(items, lambda item: item.get_closest_marker("apart") and item.get_closest_marker("aside"))
    if both:
        raise pytest.UsageError(f"marked both apart and aside (one e2e session each, pytest.ini): {both}")
    # scripts/test.sh's e2e sessions collect tests/e2e alone: an e2e test elsewhere would never run there
    astray = _modules(items, lambda item: item.get_closest_marker("e2e") and not item.nodeid.startswith("tests/e2e/"))
    if astray:
        raise pytest.UsageError(f"marked e2e outside tests/e2e (scripts/test.sh would not run them): {astray}")
    items.sort(key=_run_order)  # stable: file order kept within each


def _guarded(item):
    """Refuse any process start while ``item`` (a test without the ``proc`` or ``e2e`` marker) sets
    up or runs, naming the fix."""
    if item.get_closest_marker("proc") or item.get_closest_marker("e2e"):
        yield
        return
    saved = [(owner, name, getattr(owner, name)) for owner, name in _STARTERS if hasattr(owner, name)]

    def refuse(*args, **kwargs):
        what = args[1] if len(args) > 1 and args[0].__class__ is subprocess.Popen else (args[:1] or "fork")
        raise AssertionError(
            f"{item.nodeid} starts a process ({what!r}) but is not marked proc: add @pytest.mark.proc "
            "(or pytestmark = pytest.mark.proc for the module)"
        )

    for owner, name, _ in saved:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """A fixture a pure test sets up may not start a process: one that starts an sshd makes its tests
    ``proc``."""
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A pure test may not start a process."""
    yield from _guarded(item)


# Teardown is not guarded: pytest finalizes a module's or the session's fixtures in the teardown of
# whichever test comes last, and that may be a pure test after the proc or e2e tests that used them
# (CI failed so: the sandbox's supervisord was shut down in a pure test_verify case's teardown).
