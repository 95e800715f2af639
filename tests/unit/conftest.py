"""Fixtures shared by the unit tests."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from podkit.settings import defaults
from testing.hub import LocalHub
from testing.hub_repos import CONFIG, repo_files, write_repo
from tests.helpers import HUB_TOKEN, ROOT


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A local hub (the real huggingface_hub client, HTTP on loopback) with a Qwen3-style repo,
    its real FP8 sibling, a sibling named FP8 that is not, a gated repo and an unknown family."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "hub"
    write_repo(root, "acme/Coder-7B", repo_files())
    write_repo(root, "acme/Coder-7B-FP8", repo_files())
    write_repo(root, "RedHatAI/Coder-7B-FP8-dynamic", repo_files(fp8=True))
    write_repo(root, "acme/Gated-7B", repo_files(), {"gated": True})
    write_repo(root, "acme/Strange-7B", repo_files(config=dict(CONFIG, model_type="rwkv", architectures=["Rwkv"])))
    server = LocalHub(root, token=HUB_TOKEN)
    server.start()
    yield server
    server.stop()


def _has_supervisor(python: Path, version: str) -> bool:
    check = f"import importlib.metadata as m, sys; sys.exit(m.version('supervisor') != {version!r})"
    return python.exists() and subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def supervisor_bin(tmp_path_factory) -> Path:
    """The bin folder of a venv holding the supervisord podkit pins (``podkit_supervisor_package``,
    from PyPI, as the deploy installs it into the volume's venv): the project's ``.venv`` when it
    has that version, else a venv made once per session (``python -m venv`` and pip: about 4 s).
    Skips the tests that use it when pip cannot get the package (no network, no index)."""
    spec = defaults()["podkit_supervisor_package"]
    version = spec.split("==", 1)[1]
    project = ROOT / ".venv" / "bin"
    if _has_supervisor(project / "python", version):
        return project
    venv = tmp_path_factory.mktemp("supervisor-venv")
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", spec],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0:
        pytest.skip(f"cannot install {spec} for the supervisord tests: {pip.stderr.strip().splitlines()[-1:]}")
    print(f"\nsupervisor venv: {spec} installed in {time.monotonic() - began:.1f}s", file=sys.stderr)
    return venv / "bin"
