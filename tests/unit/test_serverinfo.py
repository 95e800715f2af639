"""Reading what a host serves from podctl describe's answer."""

import json

import pytest

from podkit.client.serverinfo import parse_describe
from tests.helpers import settings

SETTINGS = settings(vllm_model="Qwen/Qwen2.5-Coder-7B-Instruct", podkit_volume="/workspace")
SNAP = "/workspace/podkit/cache/huggingface/hub/models--Qwen--Qwen2.5-Coder-7B-Instruct/snapshots/abc"
ARGS = [SNAP, "--served-model-name", "Qwen2.5-Coder-7B-Instruct", "--tool-call-parser", "hermes", "--port=8000"]


@pytest.mark.parametrize(
    "answer, model, revision, running, error",
    [
        (
            {
                "running": True,
                "serve_args": ARGS,
                "vllm_version": "0.33.0",
                "checkpoint": {"repo": "Qwen/Qwen2.5-Coder-7B-Instruct", "revision": "abc123", "snapshot": SNAP},
            },
            "Qwen/Qwen2.5-Coder-7B-Instruct",
            "abc123",
            True,
            None,
        ),
        (
            {"running": True, "serve_args": ["/models/mine", "--port", "8000"], "checkpoint": None},
            "/models/mine",
            None,
            True,
            None,
        ),  # a folder on the host: no revision to record
        (
            {"running": False, "serve_args": None, "checkpoint": None},
            None,
            None,
            False,
            "no vLLM server runs under podkit's runner on this host",
        ),
        ({"podctl": 0, "error": "python3 not found on PATH"}, None, None, False, "python3 not found on PATH"),
    ],
)
def test_parse_describe(answer, model, revision, running, error):
    info = parse_describe("pod", SETTINGS, json.dumps(answer) + "\n")
    assert (info.model, info.revision, info.running, info.error) == (model, revision, running, error)


def test_flags_are_read_in_both_spellings():
    info = parse_describe("pod", SETTINGS, json.dumps({"running": True, "serve_args": ARGS}))
    assert info.flag("--tool-call-parser") == "hermes"
    assert info.flag("--port") == "8000"
    assert info.flag("--reasoning-parser") is None


def test_garbage_is_an_error_not_a_crash():
    assert "printed no JSON" in parse_describe("pod", SETTINGS, "Welcome to the pod!\n").error


def test_describe_finds_the_server_under_systemd_too(tmp_path, monkeypatch):
    """Under systemd there are no runner pid files: the unit's MainPID is the server."""
    import subprocess
    import sys
    import time

    from podkit.remote import podctl

    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "serve", "/models/mine", "--port", "8000"]
    )
    try:
        for _ in range(100):  # the child's argv is in /proc once it has exec'd
            if podctl.serve_args(podctl.process_argv(server.pid)):
                break
            time.sleep(0.05)
        monkeypatch.setattr(
            podctl, "unit_state", lambda name: {"active": "active", "main_pid": server.pid, "restarts": 0}
        )
        cfg = {
            "run_dir": str(tmp_path),
            "venv": str(tmp_path / "venv"),
            "key_file": str(tmp_path / "key"),
            "log_file": str(tmp_path / "vllm.log"),
            "scripts": [],
            "unit": "podkit-vllm.service",
        }
        assert podctl.describe({**cfg, "supervisor": "runner"})["running"] is False
        described = podctl.describe({**cfg, "supervisor": "systemd"})
        assert described["running"] is True, described
        assert described["serve_args"][:3] == ["/models/mine", "--port", "8000"]
    finally:
        server.kill()
        server.wait()


def test_describe_reads_the_generation_config_and_scans_for_the_key_only_when_asked(tmp_path):
    import subprocess
    import sys
    import time

    from podkit.remote import podctl

    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text('{"temperature": 0.7}')
    (tmp_path / "key").write_text("k" * 32)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "serve", str(model)])
    try:
        for _ in range(100):
            if podctl.serve_args(podctl.process_argv(server.pid)):
                break
            time.sleep(0.05)
        podctl_pid = f"{server.pid} {podctl.starttime(server.pid)}"
        (tmp_path / "vllm.pid").write_text(podctl_pid)
        (tmp_path / "runner.pid").write_text(podctl_pid)
        cfg = {
            "run_dir": str(tmp_path),
            "venv": str(tmp_path / "venv"),
            "key_file": str(tmp_path / "key"),
            "log_file": str(tmp_path / "vllm.log"),
            "scripts": [],
        }
        described = podctl.describe(cfg)
        assert described["generation_config"] == {
            "path": str(model / "generation_config.json"),
            "config": {"temperature": 0.7},
        }
        assert described["leaks"] is None
        assert described["running"] and podctl.describe({**cfg, "leaks": True})["leaks"]["argv"] == []
    finally:
        server.kill()
        server.wait()
