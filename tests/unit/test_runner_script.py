"""runner.sh for real: a rendered runner supervising a stand-in server (a shell that sleeps)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from podkit.config import PackageSpec
from podkit.hostplan import HostPlan
from podkit.render import host_files

from .test_hoststate import settings_for


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.fixture
def runner(tmp_path):
    settings = settings_for(tmp_path, podkit_log_max_bytes=2048, podkit_log_keep=2)
    paths = settings.paths
    launch = HostPlan(settings.model, 2048, 1, None, None)
    files = host_files(settings, package=PackageSpec("vllm", "0.33.0"), vllm_bin="vllm", launch=launch)
    for folder in (paths.bin, paths.run, paths.logs):
        Path(folder).mkdir(parents=True, exist_ok=True)
    Path(paths.runner_script).write_text(files["runner"].content)
    Path(paths.launch_script).write_text('#!/bin/sh\necho "stand-in server up"\nexec sleep 300\n')
    os.chmod(paths.launch_script, 0o755)
    script = ["/bin/sh", paths.runner_script]

    def run(command):
        return subprocess.run([*script, command], capture_output=True, text=True, timeout=120)

    def pid(name):
        text = Path(paths.run, name).read_text() if Path(paths.run, name).exists() else ""
        return int(text.split()[0]) if text else None

    run.pid, run.paths = pid, paths
    yield run
    run("stop")


def test_start_is_idempotent_and_status_tells(runner):
    assert "started" in runner("start").stdout
    assert "already running" in runner("start").stdout
    server = wait_for(lambda: runner.pid("vllm.pid"))
    status = runner("status")
    assert status.returncode == 0 and f"vllm: running (pid {server})" in status.stdout


def test_a_killed_server_is_restarted_with_backoff(runner):
    runner("start")
    first = wait_for(lambda: runner.pid("vllm.pid"))
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (p := runner.pid("vllm.pid")) and p != first and p)
    assert second != first
    log = Path(runner.paths.log_file).read_text()
    assert "exited with status 137" in log and "restarting in 2s" in log
    assert Path(runner.paths.run, "crashes").read_text().strip() == "1"


def test_log_is_rotated_and_kept_copies_are_bounded(runner):
    runner("start")
    wait_for(lambda: runner.pid("vllm.pid"))
    log = Path(runner.paths.log_file)
    for _ in range(3):
        with log.open("a") as handle:
            handle.write("x" * 4096 + "\n")
        wait_for(lambda: log.stat().st_size < 2048, timeout=15)
    assert Path(f"{log}.1").exists() and Path(f"{log}.2").exists()
    assert not Path(f"{log}.3").exists()


def test_stop_ends_supervisor_and_server(runner):
    runner("start")
    server = wait_for(lambda: runner.pid("vllm.pid"))
    supervisor = runner.pid("runner.pid")
    assert "stopped" in runner("stop").stdout
    for pid in (server, supervisor):
        assert wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3])
    status = runner("status")
    assert status.returncode == 3 and "runner: stopped" in status.stdout
