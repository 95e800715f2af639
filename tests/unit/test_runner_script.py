"""runner.sh for real: a rendered runner supervising a stand-in server (a shell that sleeps)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podkit.host.render import host_files
from podkit.plan.hostplan import HostPlan
from podkit.settings import PackageSpec
from tests.helpers import settings_for, zombie


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


def test_status_lines_of_a_running_runner_name_each_pid_once(runner):
    runner("start")
    server = wait_for(lambda: runner.pid("vllm.pid"))
    lines = runner("status").stdout.splitlines()
    assert lines[:2] == [f"runner: running (pid {runner.pid('runner.pid')})", f"vllm: running (pid {server})"]


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
        assert wait_for(lambda pid=pid: state(pid) in ("Z", None))
    status = runner("status")
    assert status.returncode == 3 and "runner: stopped" in status.stdout


def test_a_dead_unreaped_runner_reads_as_stopped_and_start_starts_one(runner):
    proc, line = zombie()
    try:
        Path(runner.paths.run).mkdir(parents=True, exist_ok=True)
        Path(runner.paths.run, "runner.pid").write_text(line)
        status = runner("status")
        assert status.returncode == 3 and "runner: stopped" in status.stdout
        assert "started" in runner("start").stdout
        assert runner.pid("runner.pid") != proc.pid
    finally:
        proc.wait()


# Starts the runner from a child subreaper that never reaps, as PID 1 of many
# containers does: the detached supervisor is re-parented here and, once it
# exits, stays a zombie.
NON_REAPING_PARENT = """
import ctypes, subprocess, sys
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print("started", flush=True)
sys.stdin.read()
"""


def state(pid):
    """A process's state letter from /proc, None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_stop_returns_once_the_supervisor_is_dead_even_if_nobody_reaps_it(runner):
    parent = subprocess.Popen(
        [sys.executable, "-c", NON_REAPING_PARENT, "/bin/sh", runner.paths.runner_script, "start"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout.readline().strip() == "started"
        server = wait_for(lambda: runner.pid("vllm.pid"))
        supervisor = runner.pid("runner.pid")
        # kill -0 finds a zombie, so a stop polling with it would sit out its whole 70 s limit
        stopped = subprocess.run(
            ["/bin/sh", runner.paths.runner_script, "stop"], capture_output=True, text=True, timeout=30
        )
        assert f"podkit runner stopped (pid {supervisor})" in stopped.stdout
        assert state(supervisor) == "Z"  # dead, and left unreaped
        assert state(server) in ("Z", None)
        assert runner("status").returncode == 3
    finally:
        parent.communicate("", timeout=30)


# A stand-in server that starts an engine child as vLLM does (VLLM::EngineCore in its argv), then serves.
WITH_ENGINE = """#!/bin/sh
echo "stand-in server up"
bash -c 'exec -a VLLM::EngineCore sleep 300' &
exec sleep 300
"""


def engine_of(server):
    """The pid of the stand-in engine whose parent is ``server``."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and state(entry.name) not in (None, "Z"):
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            if argv0 == b"VLLM::EngineCore" and parent == server:
                return int(entry.name)
    return None


@pytest.fixture
def runner_with_engine(runner):
    Path(runner.paths.launch_script).write_text(WITH_ENGINE)
    return runner


def test_an_engine_does_not_outlive_its_server_killed_with_sigkill(runner_with_engine):
    """The OOM killer's SIGKILL leaves the engine re-parented to PID 1: the runner ends the server's
    whole process group before it starts the next server, so the old engine never holds memory."""
    runner = runner_with_engine
    runner("start")
    first = wait_for(lambda: runner.pid("vllm.pid"))
    engine = wait_for(lambda: engine_of(first))
    assert Path(f"/proc/{first}/stat").read_text().rsplit(")", 1)[1].split()[2] == str(first), "own group"
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (p := runner.pid("vllm.pid")) and p != first and p)
    wait_for(lambda: engine_of(second))
    assert state(engine) in ("Z", None), "the killed server's engine is still running"


def test_stop_ends_the_engine_too(runner_with_engine):
    runner = runner_with_engine
    runner("start")
    server = wait_for(lambda: runner.pid("vllm.pid"))
    engine = wait_for(lambda: engine_of(server))
    runner("stop")
    assert state(engine) in ("Z", None) and state(server) in ("Z", None)


def test_stop_after_the_supervisor_was_killed_ends_the_orphaned_engine(runner_with_engine):
    """A supervisor killed with SIGKILL and then its server: only the engine is left, in the server's group."""
    runner = runner_with_engine
    runner("start")
    server = wait_for(lambda: runner.pid("vllm.pid"))
    engine = wait_for(lambda: engine_of(server))
    os.kill(runner.pid("runner.pid"), signal.SIGKILL)
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: state(server) in ("Z", None))
    assert "left without its supervisor" in runner("stop").stdout
    assert state(engine) in ("Z", None)


def test_a_volume_path_with_a_space_or_a_dollar_is_summed_as_it_is(tmp_path):
    """The runner records the sums of what the server was started from; a path with a space once
    left that record empty (so every re-apply restarted vLLM), and a $(...) in it ran."""
    from podkit.host.probe import parse_probe, podctl_command, probe_config

    marker = tmp_path / "ran"
    settings = settings_for(tmp_path / f"my volume $(touch {marker})")
    paths = settings.paths
    files = host_files(
        settings,
        package=PackageSpec("vllm", "0.33.0"),
        vllm_bin="vllm",
        launch=HostPlan(settings.model, 2048, 1, None, None),
    )
    for folder in (paths.bin, paths.run, paths.logs):
        Path(folder).mkdir(parents=True, exist_ok=True)
    Path(paths.runner_script).write_text(files["runner"].content)
    Path(paths.launch_script).write_text("#!/bin/sh\nexec sleep 300\n")
    os.chmod(paths.launch_script, 0o755)
    try:
        subprocess.run(["/bin/sh", paths.runner_script, "start"], capture_output=True, timeout=60, check=True)
        record = Path(paths.run, "serving.sha256")
        wait_for(lambda: record.exists() and paths.launch_script in record.read_text())
        probed = subprocess.run(
            ["sh", "-c", podctl_command("probe", probe_config(settings))], capture_output=True, text=True, check=True
        )
        assert parse_probe(probed.stdout).serving_current_files()
        assert not marker.exists()
    finally:
        subprocess.run(["/bin/sh", paths.runner_script, "stop"], capture_output=True, timeout=120)


def test_stop_ends_a_server_an_older_runner_left_without_a_group_of_its_own(runner):
    """Before the server had a process group of its own it shared the supervisor's: one left behind
    by a killed supervisor of that kind is still stopped by its pid (an upgrade's first restart)."""
    server = subprocess.Popen(["sleep", "300"])  # in pytest's group, as in the old supervisor's
    try:
        start = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        Path(runner.paths.run, "vllm.pid").write_text(f"{server.pid} {start}\n")
        assert "left without its supervisor" in runner("stop").stdout
        assert server.wait(timeout=10) == -signal.SIGTERM
    finally:
        server.kill()
