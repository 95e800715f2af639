"""RunPod pods (REST v2's ``Pod``) to SSH hosts: what each pod is read as, which can be deployed to and
why the others cannot, in one line each; the pod's env never read but PODKIT_DATA, never printed."""

import json

import pytest

from podkit.runpod.pods import Pod, by_prefix, hosts_for, pod_host, selected, settings_hosts, status_of
from testing import runpod_pods as pods

VOLUME = "/runpod-volume"


def running(pod_id="k3x9pq2m7a1b4c", name="coder-1", **changes):
    env = changes.pop("env", {})
    made = pods.pod(
        pod_id, name, "127.0.0.1", 40122, VOLUME, gpu="NVIDIA H100 80GB HBM3", cost=2.69, uptime=5131, env=env
    )
    made.update(changes)
    return made


def stopped(pod_id="s0t0p9e8d7x6y5", name="coder-3"):
    made = running(pod_id, name)
    pods.stopped(made)
    return made


def test_a_running_pod_is_reached_by_ssh_direct():
    host = pod_host(Pod.of(running()))
    assert host.name == "coder-1" and host.pod_id == "k3x9pq2m7a1b4c"
    assert host.data == {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": 40122,
        "ssh_user": "root",
        "runpod_pod_id": "k3x9pq2m7a1b4c",
        "runpod_gpu_name": "NVIDIA H100 80GB HBM3",
        "runpod_gpu_count": 1,
        "runpod_cost_per_hr": 2.69,
        "runpod_public_ip": "127.0.0.1",
        "runpod_tcp_ports": {"22": 40122, "8000": 8000},
        "podkit_volume": VOLUME,
    }


def test_the_containers_start_is_dated_from_started_at_else_the_uptime():
    pod = running()
    assert pod_host(Pod.of(pod)).started_at == Pod.of(pod).started_epoch
    assert pod_host(Pod.of({**pod, "startedAt": None}), now=1_000_000.0).started_at == 1_000_000.0 - 5131
    assert pod_host(Pod.of(pod)).status_change == pod["startedAt"]


def without_direct(pod, ip="127.0.0.7"):
    pod["ssh"]["direct"] = None
    for port in pod["runtime"]["ports"]:
        port["ip"] = ip
    return pod


SKIPPED = {
    "stopped": (stopped(), "is stopped (EXITED): start it with podkit up INV --host coder-3"),
    "provisioning": (
        {**stopped(), "status": "PROVISIONING"},
        "is starting (RunPod says PROVISIONING): re-run in a minute",
    ),
    "in error": ({**stopped(), "status": "ERROR"}, "is error (RunPod says ERROR): look at it in RunPod's console"),
    "back without its GPU (runtime.gpus)": (
        {**running(), "runtime": {**running()["runtime"], "gpus": []}},
        "runs without its GPU (the GPU was taken while it was stopped): move it to a new pod on the same "
        "network volume with podkit up INV --host coder-1 --move",
    ),
    "back without its GPU (no gpu)": (
        {k: v for k, v in running().items() if k != "gpu"},
        "runs without its GPU",
    ),
    "no public 22/tcp": (
        without_direct(running(), ip="100.65.12.7"),  # RunPod's proxy range is not public
        "has no public SSH address (ssh.direct is null): expose 22/tcp on a public IP",
    ),
    "a PODKIT_DATA that is not JSON": (
        running(env={"PODKIT_DATA": "{vllm_model"}),
        "its env PODKIT_DATA is not a JSON object of settings: fix it in the pod's settings",
    ),
    "a PODKIT_DATA that sets SSH": (
        running(env={"PODKIT_DATA": json.dumps({"ssh_hostname": "elsewhere"})}),
        "its env PODKIT_DATA names unknown settings ['ssh_hostname']: fix them",
    ),
}


@pytest.mark.parametrize("raw, reason", SKIPPED.values(), ids=SKIPPED.keys())
def test_a_pod_that_cannot_be_deployed_to_says_why_in_one_line(raw, reason):
    skipped = pod_host(Pod.of(raw), inventory="INV")
    line = skipped.line()
    assert line.startswith(f"pod {raw['name']} ({raw['id']}): ") and reason in line, line
    assert "\n" not in line


def test_without_ssh_direct_the_runtimes_public_22_is_used():
    host = pod_host(Pod.of(without_direct(running())))
    assert host.address == ("127.0.0.7", 40122)


def test_podkit_data_in_the_pods_env_is_its_settings():
    data = {"vllm_model": "Qwen/Qwen3-8B", "vllm_max_model_len": 32768}
    host = pod_host(Pod.of(running(env={"PODKIT_DATA": json.dumps(data), "HF_TOKEN": "hf_x"})))
    assert {k: host.data[k] for k in data} == data and "HF_TOKEN" not in json.dumps(host.data)


READ = {
    "fields of the wrong type read as absent": (
        {
            "id": "p",
            "name": 7,
            "status": "RUNNING",
            "gpu": "H100",
            "cost": "0.5",
            "runtime": {"uptime": "x"},
            "mounts": {"network": "vol"},
            "ssh": {"direct": {"host": "1.2.3.4", "port": "22"}},
            "actions": "stop",
        },
        dict(name="p", gpu_count=0, cost=None, uptime=None, ssh=None, volume_path=None, actions=()),
    ),
    "a price that is not finite": ({"id": "p", "status": "RUNNING", "cost": float("nan")}, dict(cost=None)),
    "a network volume": (
        {"id": "p", "status": "EXITED", "mounts": {"network": [{"volumeId": "v1", "path": "/w"}]}},
        dict(network_volume="v1", volume_path="/w", persistent_gb=None, state="stopped"),
    ),
    "the pod's own disk": (
        {"id": "p", "status": "EXITED", "mounts": {"persistent": {"size": 100, "path": "/workspace"}}},
        dict(network_volume=None, volume_path="/workspace", persistent_gb=100),
    ),
    "a status RunPod may add later": ({"id": "p", "status": "PAUSED"}, dict(state="unknown", running=False)),
    "a CPU pod never lost a GPU": (
        {"id": "p", "status": "RUNNING", "cpu": {"flavorId": "cpu3c"}},
        dict(lost_gpu=False),
    ),
}


@pytest.mark.parametrize("raw, expected", READ.values(), ids=READ.keys())
def test_a_pod_is_read_defensively(raw, expected):
    pod = Pod.of(raw)
    assert {key: getattr(pod, key) for key in expected} == expected


def test_selection_by_prefix_and_the_reasons_for_the_rest():
    listed = [running(), running("w8e2r5t1y6u3i9", "coder-2"), stopped(), running("n0t3b00k000000", "notebook")]
    hosts, skipped = hosts_for(listed, by_prefix("coder-"))
    assert [h.name for h in hosts] == ["coder-1", "coder-2"]
    assert [s.name for s in skipped] == ["coder-3"]


SELECTIONS = {
    "every state, in the API's order, a terminated pod aside": (
        [
            running("p1", "tst-a"),
            stopped("p2", "tst-b"),
            {**stopped("p4", "tst-c"), "status": "TERMINATED"},
            running("p3", "notebook"),
        ],
        by_prefix("tst-"),
        [("tst-a", "p1"), ("tst-b", "p2")],
    ),
    "two pods with one name get their ids (as during a move)": (
        [running("p1", "coder"), stopped("p2", "coder"), running("p3", "coder-2")],
        by_prefix(""),
        [("coder-p1", "p1"), ("coder-p2", "p2"), ("coder-2", "p3")],
    ),
    "a name no host name may carry": ([running("p1", "my coder/1")], lambda entry: True, [("my-coder-1", "p1")]),
    "nothing selected": ([running("p1", "notebook")], by_prefix("tst-"), []),
}


@pytest.mark.parametrize("listed, select, expected", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_selected_names_every_selected_pod(listed, select, expected):
    assert [(name, pod.id) for name, pod in selected(listed, select)] == expected


def test_the_pods_env_never_reaches_host_data_status_or_messages():
    listed = [running(), stopped(), running("w8e2r5t1y6u3i9", "coder-2", env={"PODKIT_DATA": "nope"})]
    hosts, skipped = hosts_for(listed, by_prefix(""))
    text = json.dumps([h.data for h in hosts]) + " ".join(s.line() for s in skipped)
    text += json.dumps([status_of(Pod.of(p)) for p in listed]) + json.dumps(
        settings_hosts(listed, by_prefix(""), "all")
    )
    for pod in listed:
        assert pod["env"]["HF_TOKEN"] not in text


def test_the_settings_mode_lists_every_selected_pod_without_an_address():
    data = {"vllm_model": "Qwen/Qwen3-8B"}
    listed = [running(env={"PODKIT_DATA": json.dumps(data)}), stopped()]
    assert settings_hosts(listed, by_prefix(""), "all") == [
        ("coder-1", {**data, "podkit_volume": VOLUME}),
        ("coder-3", {"podkit_volume": VOLUME}),
    ]
    assert settings_hosts([], by_prefix(""), "new:My Coder") == [("My-Coder", {})]


def test_what_status_reads_of_a_pod():
    assert status_of(Pod.of(stopped())) == {
        "id": "s0t0p9e8d7x6y5",
        "state": "stopped",
        "runpod_status": "EXITED",
        "usd_per_hour": 0.0,
        "uptime_seconds": None,
        "started_at": stopped()["startedAt"],
        "lost_gpu": False,
        "has_runtime": False,
    }
