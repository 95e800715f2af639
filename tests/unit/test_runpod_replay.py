"""The replay of RunPod's API plays a pod that stops itself and is resumed: the real runpod
package's stop_pod/resume_pod/get_pods, pod-scoped keys, the stand-in runpodctl, and (as root)
a stand-in pod whose PID 1 carries the container's environment stopping itself with it."""

import json
import os
import shutil
import subprocess
import time

import pytest

from podkit.runpod.pods import _quiet_cpuinfo
from testing.netpods import DEFAULT_PATH, STANDINS, NetnsPod
from testing.runpod_api import NO_FREE_GPUS, RunPodReplay, running_pod

ACCOUNT_KEY = "rp-account-key"
A, B = "poda0000000001", "podb0000000001"
POD_KEYS = {A: "rp-pod-key-a", B: "rp-pod-key-b"}
RUNPODCTL = STANDINS / "runpodctl"
#: what on_resume hands back: the pod at a new address and SSH port, as after a RunPod resume
RESUMED = {"ports": [{"ip": "203.0.113.77", "isIpPublic": True, "privatePort": 22, "publicPort": 41022, "type": "tcp"}]}


def runpod_package():
    _quiet_cpuinfo()  # before the first import: the package probes the CPU at import time
    import runpod

    return runpod


@pytest.fixture
def calls():
    """The hooks' calls, in order: ("stop", pod_id) and ("resume", pod_id)."""
    return []


@pytest.fixture
def api(monkeypatch, calls):
    """The replay with pods A and B running, each with its own key; the runpod package pointed at it
    with the account key."""
    pods = [
        running_pod(A, "coder-a", "203.0.113.10", 40122, "/workspace"),
        running_pod(B, "coder-b", "203.0.113.11", 40222, "/workspace"),
    ]
    server = RunPodReplay(
        api_key=ACCOUNT_KEY,
        pods=pods,
        pod_keys=POD_KEYS,
        on_stop=lambda pod_id: calls.append(("stop", pod_id)),
        on_resume=lambda pod_id: calls.append(("resume", pod_id)) or RESUMED,
    )
    monkeypatch.setenv("RUNPOD_API_BASE_URL", server.url)
    monkeypatch.setattr(runpod_package(), "api_key", ACCOUNT_KEY)
    with server:
        yield server


def pod(api, pod_id):
    return next(p for p in runpod_package().get_pods() if p["id"] == pod_id)


def test_a_stop_exits_the_pod_and_calls_on_stop_after_the_answer(api, calls):
    runpod = runpod_package()
    answer = runpod.stop_pod(A)
    answered_before_the_hook = calls == []
    assert api.wait_for_hooks()
    assert answered_before_the_hook and calls == [("stop", A)]
    assert answer["id"] == A and answer["desiredStatus"] == "EXITED"
    stopped = pod(api, A)
    assert stopped["desiredStatus"] == "EXITED" and stopped["runtime"] is None and stopped["uptimeSeconds"] == 0
    assert stopped["lastStatusChange"].startswith("Exited by user: ")
    assert stopped["lastStatusChange"].endswith(" GMT+0000 (Coordinated Universal Time)")
    assert pod(api, B)["desiredStatus"] == "RUNNING"
    assert api.requests[0]["key"] == "account" and "podStop" in api.requests[0]["query"]


def test_stopping_a_stopped_pod_answers_exited_without_a_second_hook(api, calls):
    runpod = runpod_package()
    runpod.stop_pod(A)
    assert runpod.stop_pod(A)["desiredStatus"] == "EXITED"
    assert api.wait_for_hooks() and calls == [("stop", A)]


def test_a_resume_runs_the_pod_with_the_runtime_on_resume_gives(api, calls):
    runpod = runpod_package()
    runpod.stop_pod(A)
    api.wait_for_hooks()
    answer = runpod.resume_pod(A, 2)
    assert calls == [("stop", A), ("resume", A)]
    assert answer["id"] == A and answer["desiredStatus"] == "RUNNING"
    assert answer["machine"]["podHostId"].startswith(f"{A}-")
    resumed = pod(api, A)
    assert resumed["desiredStatus"] == "RUNNING" and resumed["runtime"] == RESUMED
    assert resumed["gpuCount"] == 2 and resumed["uptimeSeconds"] == 0
    assert resumed["lastStatusChange"].startswith("Rented by User: ")


def test_without_on_resume_a_pod_comes_back_where_it_was(api):
    runpod = runpod_package()
    before = pod(api, A)["runtime"]
    api.on_resume = None
    runpod.stop_pod(A)
    runpod.resume_pod(A, 1)
    assert pod(api, A)["runtime"] == before


@pytest.mark.parametrize(
    "stop_first, no_gpu, pod_id, message",
    [
        (True, {A}, A, NO_FREE_GPUS),
        (False, set(), A, f"pod {A} is already running"),
        (True, set(), "nosuchpod00001", "pod nosuchpod00001 not found"),
    ],
    ids=["gpus-gone", "already-running", "unknown-pod"],
)
def test_a_resume_that_cannot_happen_is_a_query_error(api, calls, stop_first, no_gpu, pod_id, message):
    runpod = runpod_package()
    if stop_first:
        runpod.stop_pod(A)
    api.no_gpu = no_gpu
    with pytest.raises(runpod.error.QueryError) as raised:
        runpod.resume_pod(pod_id, 1)
    assert str(raised.value) == message
    assert ("resume", pod_id) not in calls
    assert pod(api, A)["desiredStatus"] == ("EXITED" if stop_first else "RUNNING")


def test_the_gpus_gone_message_is_runpods_own():
    # as runpod-python reported it: https://github.com/runpod/runpod-python/issues/168
    assert NO_FREE_GPUS == "There are not enough free GPUs on the host machine to start this pod."


def test_stopping_an_unknown_pod_is_a_query_error(api, calls):
    runpod = runpod_package()
    with pytest.raises(runpod.error.QueryError, match="pod nosuchpod00001 not found"):
        runpod.stop_pod("nosuchpod00001")
    assert api.wait_for_hooks() and calls == []


@pytest.mark.parametrize(
    "call, allowed",
    [
        (lambda runpod: runpod.stop_pod(A), True),
        (lambda runpod: runpod.get_pod(A), True),
        (lambda runpod: runpod.stop_pod(B), False),
        (lambda runpod: runpod.get_pod(B), False),
        (lambda runpod: runpod.resume_pod(A, 1), False),
        (lambda runpod: runpod.get_gpus(), False),
    ],
    ids=["stop-own", "read-own", "stop-another", "read-another", "resume-own", "anything-else"],
)
def test_a_pod_key_may_read_and_stop_its_own_pod_only(api, monkeypatch, call, allowed):
    runpod = runpod_package()
    monkeypatch.setattr(runpod, "api_key", POD_KEYS[A])
    before = len(api.requests)
    if allowed:
        call(runpod)
    else:
        with pytest.raises(runpod.error.QueryError, match="^forbidden: "):
            call(runpod)
    assert [r["key"] for r in api.requests[before:]] == [f"pod:{A}"]


def test_a_pod_key_lists_only_its_own_pod_and_a_stranger_gets_401(api, monkeypatch):
    runpod = runpod_package()
    monkeypatch.setattr(runpod, "api_key", POD_KEYS[B])
    assert [p["id"] for p in runpod.get_pods()] == [B]
    monkeypatch.setattr(runpod, "api_key", "rp-someone-else")
    with pytest.raises(runpod.error.AuthenticationError):
        runpod.get_pods()
    assert [r["key"] for r in api.requests] == [f"pod:{B}", None]


def test_no_key_reaches_the_request_log(api, monkeypatch):
    runpod = runpod_package()
    runpod.stop_pod(B)
    monkeypatch.setattr(runpod, "api_key", POD_KEYS[A])
    runpod.stop_pod(A)
    logged = json.dumps(api.requests)
    assert ACCOUNT_KEY not in logged and not any(key in logged for key in POD_KEYS.values())


def test_a_failing_hook_is_kept_for_the_test(api):
    runpod = runpod_package()
    api.on_stop = lambda pod_id: 1 / 0
    runpod.stop_pod(A)
    assert api.wait_for_hooks()
    assert api.hook_errors == [f"on_stop({A}): ZeroDivisionError: division by zero"]


def runpodctl(api, log, *argv, key=None):
    env = {"PATH": os.environ["PATH"], "RUNPOD_API_BASE_URL": api.url, "RUNPODCTL_STANDIN_LOG": str(log)}
    if key is not None:
        env["RUNPOD_API_KEY"] = key
    return subprocess.run([str(RUNPODCTL), *argv], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.proc
@pytest.mark.parametrize(
    "argv, key, code, said, kind",
    [
        (["stop", "pod", A], POD_KEYS[A], 0, f'pod "{A}" stopped', f"pod:{A}"),
        (["pod", "stop", A], POD_KEYS[A], 0, '"desiredStatus": "EXITED"', f"pod:{A}"),
        (["stop", "pod", A], ACCOUNT_KEY, 0, f'pod "{A}" stopped', "account"),
        (["stop", "pod", B], POD_KEYS[A], 1, "Error: forbidden: ", f"pod:{A}"),
        (["stop", "pod", A], "rp-wrong", 1, "Error: statuscode 401", None),
        (["stop", "pod", A], None, 1, "Error: api key not found. get your key at ", "no request"),
        (["get", "pod"], POD_KEYS[A], 1, 'plays only "runpodctl stop pod <podId>"', "no request"),
    ],
    ids=["legacy-syntax", "new-syntax", "account-key", "another-pod", "wrong-key", "no-key", "other-command"],
)
def test_the_stand_in_runpodctl_stops_a_pod_as_the_real_one_does(api, tmp_path, calls, argv, key, code, said, kind):
    log = tmp_path / "runpodctl.log"
    out = runpodctl(api, log, *argv, key=key)
    assert out.returncode == code, out.stderr
    assert said in (out.stdout if code == 0 else out.stderr)
    if code:
        assert out.stderr.count("\n") == 1 and out.stdout == ""
    assert [r["key"] for r in api.requests] == ([] if kind == "no request" else [kind])
    assert api.wait_for_hooks() and calls == ([("stop", A)] if code == 0 else [])
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["argv"] == argv and line["api_key_set"] is (key is not None) and line["exit"] == code
    assert set(line) == {"time", "argv", "api_key_set", "exit", "outcome"}
    for secret in [ACCOUNT_KEY, *POD_KEYS.values()]:
        assert secret not in log.read_text() + out.stdout + out.stderr


CAN_NETNS = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "unshare", "ssh", "ssh-keygen"))


@pytest.mark.proc
@pytest.mark.skipif(not CAN_NETNS, reason="needs root, iproute2, unshare and OpenSSH (a stand-in pod)")
def test_a_stand_in_pod_stops_itself_with_the_key_in_its_pid_1_environment(tmp_path):
    key = tmp_path / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "workspace").mkdir()
    netns_pod = NetnsPod("pkrpl", 247, tmp_path / "pod", tmp_path / "volume", tmp_path / "workspace", key)
    try:
        netns_pod.ensure_namespace()
        with RunPodReplay(
            ACCOUNT_KEY, host=netns_pod.gateway, pod_keys=POD_KEYS, on_stop=lambda pod_id: netns_pod.stop()
        ) as api:
            env = {
                "RUNPOD_POD_ID": A,
                "RUNPOD_API_KEY": POD_KEYS[A],
                "RUNPOD_API_BASE_URL": f"http://{netns_pod.gateway}:{api.port}",
                "PATH": f"{STANDINS}:{DEFAULT_PATH}",
                "RUNPODCTL_STANDIN_LOG": str(tmp_path / "runpodctl.log"),
            }
            ssh = netns_pod.start(host=2, port=2201, container_env=env)
            api.pods = [running_pod(A, "coder-a", ssh.hostname, ssh.port, "/workspace")]

            def run(command):
                return subprocess.run(ssh.ssh_argv(command), capture_output=True, text=True, timeout=30)

            environ = run("cat /proc/1/environ").stdout
            assert dict(item.split("=", 1) for item in environ.split("\0") if item) == env
            run("nohup sleep 600 >/dev/null 2>&1 & setsid sleep 601 </dev/null >/dev/null 2>&1 &")
            stop = run(f"env -i $(tr '\\0' ' ' < /proc/1/environ) runpodctl stop pod {A}")
            assert stop.returncode == 0 and stop.stdout == f'pod "{A}" stopped\n', stop.stderr
            assert api.wait_for_hooks(10) and api.hook_errors == []
            deadline = time.monotonic() + 5
            while netns_pod.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert netns_pod.pids() == []  # the daemons too: PID 1 went, and everything in the pod with it
            assert [r["key"] for r in api.requests] == [f"pod:{A}"]
            assert api.pods[0]["desiredStatus"] == "EXITED"
            assert json.loads((tmp_path / "runpodctl.log").read_text())["api_key_set"] is True
            assert not list((tmp_path / "pod").glob("*/container-env.json"))  # the init deleted the key file

            migrated = netns_pod.start(host=3, port=2202, container_env={**env, "RUNPOD_POD_ID": B})
            environ = subprocess.run(migrated.ssh_argv("cat /proc/1/environ"), capture_output=True, text=True).stdout
            assert f"RUNPOD_POD_ID={B}\0" in environ
    finally:
        netns_pod.destroy()
