"""Fixtures shared by the unit tests."""

import pytest
from huggingface_hub import constants

from testing.hub import LocalHub
from testing.hub_repos import CONFIG, repo_files, write_repo
from tests.helpers import HUB_TOKEN


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
    # named like an FP8 sibling, but its own config and weights are BF16: must be ignored
    write_repo(root, "acme/Coder-7B-FP8", repo_files())
    write_repo(root, "RedHatAI/Coder-7B-FP8-dynamic", repo_files(fp8=True))
    write_repo(root, "acme/Gated-7B", repo_files(), {"gated": True})
    write_repo(root, "acme/Strange-7B", repo_files(config=dict(CONFIG, model_type="rwkv", architectures=["Rwkv"])))
    server = LocalHub(root, token=HUB_TOKEN)
    server.start()
    yield server
    server.stop()
