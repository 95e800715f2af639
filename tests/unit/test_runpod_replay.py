"""The replay of RunPod's REST API v2 plays a pod's life as RunPod does: a stop and a start (with the
hooks that stop and start the stand-in pod, after the answer), the start that finds no free GPU, the
pod that comes back without one, the actions a status forbids, pod-scoped keys; the stand-in
runpodctl in its new and old builds; and (as root) a stand-in pod whose PID 1 carries the
container's environment stopping itself through v2 with its own key."""

import json
import os
import shutil
import subprocess
import time

import pytest

from podkit.runpod.api import RunPodApi, RunPodError
from podkit.runpod.pods import Pod
from testing import runpod_pods as pods
from testing.netpods import DEFAULT_PATH, NEW_RUNPODCTL, OLD_RUNPODCTL, NetnsPod
from testing.runpod_api import NO_FREE_GPUS, RunPodReplay

ACCOUNT_KEY = "rp-account-key"
A, B = "poda0000000001", "podb0000000001"
POD_KEYS = {A: "rp-pod-key-a", B: "rp-pod-key-b"}


@pytest.fixture
def calls():
    """The hooks' calls, in order: ("stop", pod_id) and ("start", pod_id)."""
    return []


@pytest.fixture
def api(calls):
    """The replay with pods A and B running, each with its own key."""
    listed = [pods.pod(A, "coder-a", "127.0.0.1", 40122), pods.pod(B, "coder-b", "127.0.0.1", 40222)]
    server = RunPodReplay(ACCOUNT_KEY, listed, pod_keys=POD_KEYS)
    server.on_stop = lambda pod_id: calls.append(("stop", pod_id))
    server.on_start = lambda pod_id: calls.append(("start", pod_id)) or ("127.0.0.9", 41022)
    with server:
        yield server


@pytest.fixture
def account(api):
    return RunPodApi(ACCOUNT_KEY, api.url)


def test_a_stop_exits_the_pod_and_calls_on_stop_after_the_answer(api, account, calls):
    answer = account.action(A, "stop")
    answered_before_the_hook = calls == []
    assert api.wait_for_hooks() and answered_before_the_hook and calls == [("stop", A)]
    assert answer["status"] == "EXITED" and answer["actions"] == ["start", "terminate"]
    stopped = Pod.of(account.pod(A))
    assert stopped.state == "stopped" and stopped.ssh is None and stopped.cost == 0.0
    assert Pod.of(account.pod(B)).running


def test_a_start_runs_the_pod_where_on_start_says_after_the_answer(api, account, calls):
    account.action(A, "stop")
    before = Pod.of(account.pod(A)).started_at
    answer = account.action(A, "start")
    assert answer["status"] == "STARTING" and answer["ssh"]["direct"] is None  # not yet: the hook runs after
    assert api.wait_for_hooks() and calls == [("stop", A), ("start", A)]
    started = Pod.of(account.pod(A))
    assert started.running and started.ssh_address() == ("127.0.0.9", 41022, "root") and started.cost == 0.79
    assert started.started_at >= before and not started.lost_gpu


def test_without_on_start_a_pod_comes_back_where_it_was(api, account):
    api.on_start = None
    before = Pod.of(account.pod(A)).ssh_address()
    account.action(A, "stop")
    account.action(A, "start")
    assert Pod.of(account.pod(A)).ssh_address() == before


def test_a_pod_whose_gpu_was_taken_comes_back_without_it(api, account):
    api.gpu_lost = {A}
    account.action(A, "stop")
    account.action(A, "start")
    assert api.wait_for_hooks() and Pod.of(account.pod(A)).lost_gpu


@pytest.mark.parametrize(
    "stop_first, no_gpu, pod_id, status, said",
    [
        (True, {A}, A, 400, NO_FREE_GPUS),  # the {"error"} shape, as seen live
        (False, set(), A, 409, "Conflict: action start is not valid for a pod that is RUNNING"),
        (True, set(), "nosuchpod00001", 404, "Not Found: pod not found"),
    ],
    ids=["gpus-gone", "already-running", "unknown-pod"],
)
def test_a_start_that_cannot_happen_says_why(api, account, calls, stop_first, no_gpu, pod_id, status, said):
    if stop_first:
        account.action(A, "stop")
    api.no_gpu = no_gpu
    with pytest.raises(RunPodError) as raised:
        account.action(pod_id, "start")
    assert (raised.value.status, raised.value.said) == (status, said)
    assert api.wait_for_hooks() and ("start", pod_id) not in calls
    assert api.pod(A)["status"] == ("EXITED" if stop_first else "RUNNING")


@pytest.mark.parametrize(
    "call, allowed",
    [
        (lambda api: api.action(A, "stop"), True),
        (lambda api: api.pod(A), True),
        (lambda api: api.action(B, "stop"), False),
        (lambda api: api.pod(B), False),
        (lambda api: api.action(A, "terminate"), False),
        (lambda api: api.pods(), False),
        (lambda api: api.ssh_keys(), False),
    ],
    ids=["stop-own", "read-own", "stop-another", "read-another", "terminate-own", "list", "account"],
)
def test_a_pod_key_may_read_and_stop_its_own_pod_only(api, call, allowed):
    own = RunPodApi(POD_KEYS[A], api.url)
    if allowed:
        call(own)
    else:
        with pytest.raises(RunPodError) as raised:
            call(own)
        assert raised.value.status == 403
    assert [r["key"] for r in api.requests] == [f"pod:{A}"]


def test_no_key_reaches_the_request_log(api, account):
    account.action(B, "stop")
    RunPodApi(POD_KEYS[A], api.url).action(A, "stop")
    logged = json.dumps(api.requests)
    assert ACCOUNT_KEY not in logged and not any(key in logged for key in POD_KEYS.values())


def test_a_failing_hook_is_kept_for_the_test(api, account):
    api.on_stop = lambda pod_id: 1 / 0
    account.action(A, "stop")
    assert api.wait_for_hooks()
    assert api.hook_errors == [f"on_stop({A}): ZeroDivisionError: division by zero"]


def test_a_created_pod_provisions_until_on_create_gives_it_an_address(api, account):
    api.catalog = [pods.gpu_type("NVIDIA L40S", "L40S", 48, 0.86)]
    api.volumes = [pods.network_volume("vol1")]
    api.ssh_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk me@laptop"]
    made = []
    api.on_create = lambda pod: made.append(pod) or ("127.0.0.11", 42022)
    body = {
        "name": "coder-c",
        "image": pods.IMAGE,
        "gpu": {"id": "NVIDIA L40S", "count": 1},
        "startSsh": True,
        "mounts": {"network": [{"volumeId": "vol1", "path": "/workspace"}]},
        "env": {"PODKIT_DATA": "{}"},
    }
    created = Pod.of(account.create_pod(body))
    assert created.status == "PROVISIONING" and created.ssh is None and created.network_volume == "vol1"
    assert api.wait_for_hooks()
    assert made[0]["_ssh_keys"] == api.ssh_keys  # startSsh: the account's keys reach the pod
    now = Pod.of(account.pod(created.id))
    assert now.running and now.ssh_address() == ("127.0.0.11", 42022, "root") and now.cost == 0.86
    assert now.raw["env"] == {"PODKIT_DATA": "{}"} and now.data_center == pods.DATA_CENTER


def runpodctl(api, log, build, *argv, key=None):
    env = {"PATH": os.environ["PATH"], "RUNPOD_API_BASE_URL": api.url, "RUNPODCTL_STANDIN_LOG": str(log)}
    if key is not None:
        env["RUNPOD_API_KEY"] = key
    program = (NEW_RUNPODCTL if build == "new" else OLD_RUNPODCTL) / "runpodctl"
    return subprocess.run([str(program), *argv], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.proc
@pytest.mark.parametrize(
    "build, argv, key, code, said, kind",
    [
        ("new", ["pod", "stop", A], POD_KEYS[A], 0, '"status": "EXITED"', f"pod:{A}"),
        ("new", ["stop", "pod", A], POD_KEYS[A], 0, '"status": "EXITED"', f"pod:{A}"),
        ("new", ["pod", "get", A], POD_KEYS[A], 0, '"status": "RUNNING"', f"pod:{A}"),
        ("new", ["pod", "stop", B], POD_KEYS[A], 1, "Error: statuscode 403", f"pod:{A}"),
        ("new", ["pod", "stop", A], "rp-wrong", 1, "Error: statuscode 401", None),
        ("new", ["pod", "stop", A], None, 1, "Error: api key not found. get your key at ", "no request"),
        ("old", ["stop", "pod", A], POD_KEYS[A], 1, "Error: statuscode 410", f"pod:{A}"),
        ("old", ["pod", "stop", A], POD_KEYS[A], 1, 'Error: unknown command "pod" for "runpodctl"', "no request"),
    ],
    ids=[
        "new",
        "new-old-syntax",
        "new-get",
        "another-pod",
        "wrong-key",
        "no-key",
        "old-graphql-gone",
        "old-new-syntax",
    ],
)
def test_the_stand_in_runpodctl_as_its_builds_behave(api, tmp_path, calls, build, argv, key, code, said, kind):
    log = tmp_path / "runpodctl.log"
    out = runpodctl(api, log, build, *argv, key=key)
    assert out.returncode == code, out.stderr
    assert said in (out.stdout if code == 0 else out.stderr)
    if code:
        assert out.stderr.count("\n") == 1 and out.stdout == ""
    assert [r["key"] for r in api.requests] == ([] if kind == "no request" else [kind])
    stopped = code == 0 and "stop" in argv
    assert api.wait_for_hooks() and calls == ([("stop", A)] if stopped else [])
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert line["argv"] == argv and line["build"] == build and line["api_key_set"] is (key is not None)
    for secret in [ACCOUNT_KEY, *POD_KEYS.values()]:
        assert secret not in log.read_text() + out.stdout + out.stderr


CAN_NETNS = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "unshare", "ssh", "ssh-keygen"))


@pytest.mark.proc
@pytest.mark.skipif(not CAN_NETNS, reason="needs root, iproute2, unshare and OpenSSH (a stand-in pod)")
def test_a_stand_in_pod_stops_itself_through_v2_with_the_key_in_its_pid_1_environment(tmp_path):
    key = tmp_path / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "workspace").mkdir()
    netns_pod = NetnsPod("pkrpl", 247, tmp_path / "pod", tmp_path / "volume", tmp_path / "workspace", key)
    try:
        netns_pod.ensure_namespace()
        with RunPodReplay(ACCOUNT_KEY, host=netns_pod.gateway, pod_keys=POD_KEYS) as api:
            api.on_stop = lambda pod_id: netns_pod.stop()
            env = {
                "RUNPOD_POD_ID": A,
                "RUNPOD_API_KEY": POD_KEYS[A],
                "RUNPOD_API_BASE_URL": f"http://{netns_pod.gateway}:{api.port}",
                "PATH": f"{NEW_RUNPODCTL}:{DEFAULT_PATH}",
                "RUNPODCTL_STANDIN_LOG": str(tmp_path / "runpodctl.log"),
            }
            ssh = netns_pod.start(host=2, port=2201, container_env=env)
            api.pods = [pods.pod(A, "coder-a", ssh.hostname, ssh.port)]

            def run(command):
                return subprocess.run(ssh.ssh_argv(command), capture_output=True, text=True, timeout=30)

            environ = run("cat /proc/1/environ").stdout
            assert dict(item.split("=", 1) for item in environ.split("\0") if item) == env
            run("nohup sleep 600 >/dev/null 2>&1 & setsid sleep 601 </dev/null >/dev/null 2>&1 &")
            stop = run(f"env -i $(tr '\\0' ' ' < /proc/1/environ) runpodctl pod stop {A}")
            assert stop.returncode == 0 and json.loads(stop.stdout)["status"] == "EXITED", stop.stderr
            assert api.wait_for_hooks(10) and api.hook_errors == []
            deadline = time.monotonic() + 5
            while netns_pod.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert netns_pod.pids() == []  # the daemons too: PID 1 went, and everything in the pod with it
            assert [(r["path"], r["key"]) for r in api.requests] == [(f"/v2/pods/{A}/action", f"pod:{A}")]
            assert api.pods[0]["status"] == "EXITED"
            assert not list((tmp_path / "pod").glob("*/container-env.json"))  # the init deleted the key file

            moved = netns_pod.start(host=3, port=2202, container_env={**env, "RUNPOD_POD_ID": B})
            environ = subprocess.run(moved.ssh_argv("cat /proc/1/environ"), capture_output=True, text=True).stdout
            assert f"RUNPOD_POD_ID={B}\0" in environ
    finally:
        netns_pod.destroy()
