"""podctl's hub-cache check and clean, run for real on a cache-shaped folder."""

import json
import os
import subprocess

import pytest

from podkit.host.podctl import podctl_command

pytestmark = pytest.mark.proc  # starts real processes (see pytest.ini)


def podctl(action, cfg):
    out = subprocess.run(["sh", "-c", podctl_command(action, cfg)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def make_cache(tmp_path):
    hub = tmp_path / "hub"
    repo = hub / "models--acme--coder"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (hub / ".locks" / "models--acme--coder").mkdir(parents=True)
    (repo / "blobs" / "complete").write_bytes(b"w" * 1000)
    (repo / "blobs" / "e1.1a2b3c4d.incomplete").write_bytes(b"x" * 300)  # huggingface_hub >= 1.18
    (repo / "blobs" / "e2.incomplete").write_bytes(b"y" * 200)  # <= 1.17
    (repo / "blobs" / "e3.99aa88bb.incomplete").write_bytes(b"z" * 100)  # a live download holds it
    (repo / "snapshots" / "abc" / "model.safetensors").symlink_to("../../blobs/complete")
    (repo / "snapshots" / "abc" / "config.json").symlink_to("../../blobs/vanished")
    (hub / ".locks" / "models--acme--coder" / "complete.lock").touch()
    (hub / ".locks" / "models--acme--coder" / "e1.lock").touch()
    run = tmp_path / "run"
    run.mkdir()
    return hub, repo, run


def test_lists_what_broke_and_cleans_only_that(tmp_path):
    hub, repo, run = make_cache(tmp_path)
    cfg = {"hub_cache": str(hub), "run_dir": str(run)}
    with open(repo / "blobs" / "e3.99aa88bb.incomplete", "rb"):
        listed = podctl("cache", cfg)
        kinds = sorted((p["kind"], os.path.basename(p["path"]), p["in_use"]) for p in listed["problems"])
        assert kinds == [
            ("broken_link", "config.json", False),
            ("lock", "e1.lock", False),
            ("partial", "e1.1a2b3c4d.incomplete", False),
            ("partial", "e2.incomplete", False),
            ("partial", "e3.99aa88bb.incomplete", True),
        ]
        assert listed["repos"] == {"acme/coder": 1000}
        assert not any(p["removed"] for p in listed["problems"])
        cleaned = podctl("cache", {**cfg, "clean": True})
    assert cleaned["freed_bytes"] == 500
    left = sorted(p.name for p in (repo / "blobs").iterdir())
    assert left == ["complete", "e3.99aa88bb.incomplete"]  # the complete blob, and what a process held
    assert (repo / "snapshots" / "abc" / "model.safetensors").exists()
    assert (hub / ".locks" / "models--acme--coder" / "complete.lock").exists()


def test_nothing_is_removed_while_a_fetch_runs(tmp_path):
    hub, repo, run = make_cache(tmp_path)
    start = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
    (run / "fetch.pid").write_text(f"{os.getpid()} {start}\n")
    cleaned = podctl("cache", {"hub_cache": str(hub), "run_dir": str(run), "clean": True})
    assert cleaned["fetch_running"] and cleaned["freed_bytes"] == 0
    assert (repo / "blobs" / "e2.incomplete").exists()
