"""RunPod pods to SSH hosts, through the real runpod package against a local replay server."""

import json
import secrets
from pathlib import Path

import pytest

from podkit.runpod.pods import PodsError, by_prefix, hosts_for, list_pods, pod_host
from testing.runpod_api import RunPodReplay, load_pods

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "runpod"


def with_generated_env(pods):
    """The recorded pods, each env name given a secret-looking value made for this run."""
    for pod in pods:
        pod["env"] = [f"{name}={secrets.token_urlsafe(24)}" for name in pod["env"]]
    return pods


PODS = with_generated_env(load_pods(FIXTURES / "pods.json"))
POD = {pod["name"]: pod for pod in PODS}


@pytest.fixture
def api(monkeypatch):
    with RunPodReplay(api_key="rp-test-key", pods=PODS) as server:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", server.url)
        yield server


def test_the_runpod_package_lists_pods_from_the_replay_server(api):
    pods = list_pods("rp-test-key")
    assert [pod["name"] for pod in pods] == [pod["name"] for pod in PODS]
    assert "myself" in api.requests[-1]["query"]


@pytest.mark.parametrize(
    "key, message",
    [
        (None, "RUNPOD_API_KEY is not set"),
        ("", "RUNPOD_API_KEY is not set"),
        ("wrong", "RunPod refused RUNPOD_API_KEY (401)"),
    ],
)
def test_a_missing_or_wrong_key_is_one_clear_line(api, key, message):
    with pytest.raises(PodsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        list_pods(key)


def test_an_unreachable_api_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("RUNPOD_API_BASE_URL", "http://127.0.0.1:9")
    with pytest.raises(PodsError, match="cannot list pods from RunPod"):
        list_pods("rp-test-key")


def test_a_running_pod_is_reached_by_its_public_ip_and_mapped_ssh_port():
    host = pod_host(POD["coder-1"])
    assert host.name == "coder-1" and host.pod_id == "k3x9pq2m7a1b4c"
    assert host.data == {
        "ssh_hostname": "203.0.113.10",
        "ssh_port": 40122,
        "ssh_user": "root",
        "runpod_pod_id": "k3x9pq2m7a1b4c",
        "runpod_gpu_name": "H100 SXM",
        "runpod_gpu_count": 1,
        "runpod_cost_per_hr": 2.69,
        "runpod_public_ip": "203.0.113.10",
        "runpod_tcp_ports": {"22": 40122},  # the http port is not a public TCP port
        "podkit_volume": "/workspace",
    }


def test_the_containers_start_is_dated_from_the_apis_uptime():
    assert pod_host(POD["coder-1"], now=1_000_000.0).started_at == 1_000_000.0 - 5131
    assert pod_host({**POD["coder-1"], "uptimeSeconds": None}).started_at is None


def test_an_exposed_tcp_port_and_another_volume_path_are_carried():
    host = pod_host(POD["coder-2"])
    assert host.data["runpod_tcp_ports"] == {"22": 22091, "8000": 22092}
    assert host.data["podkit_volume"] == "/runpod-volume"
    assert host.data["runpod_gpu_count"] == 2


@pytest.mark.parametrize(
    "name, reason",
    [
        ("coder-3", "is exited, not running: start it (runpodctl start pod s0t0p9e8d7x6y5) and re-run"),
        ("coder-4", "came back with zero GPUs"),
        ("coder-5", "has no public SSH port: expose 22/tcp with a public IP"),
    ],
)
def test_pods_that_cannot_be_deployed_to_say_why_in_one_line(name, reason):
    skipped = pod_host(POD[name])
    line = skipped.line()
    assert line.startswith(f"pod {name} ({POD[name]['id']}): ") and reason in line
    assert "\n" not in line


def test_a_pod_with_zero_gpus_can_be_allowed():
    assert pod_host(POD["coder-4"], allow_no_gpu=True).data["runpod_gpu_count"] == 0


def test_selection_by_prefix_and_the_reasons_for_the_rest():
    hosts, skipped = hosts_for(PODS, by_prefix("coder-"))
    assert [h.name for h in hosts] == ["coder-1", "coder-2"]
    assert [s.name for s in skipped] == ["coder-3", "coder-4", "coder-5"]
    assert "notebook" not in {h.name for h in hosts} | {s.name for s in skipped}


def test_pods_sharing_a_name_get_unique_host_names():
    twin = {**POD["coder-1"], "id": "twin00000000"}
    hosts, _ = hosts_for([POD["coder-1"], twin], by_prefix(""))
    assert [h.name for h in hosts] == ["coder-1-k3x9pq2m7a1b4c", "coder-1-twin00000000"]


def test_the_pods_env_never_reaches_host_data_or_messages():
    hosts, skipped = hosts_for(PODS, by_prefix(""))
    text = json.dumps([h.data for h in hosts]) + " ".join(s.line() for s in skipped)
    for pod in PODS:
        for item in pod["env"]:
            assert item.split("=", 1)[1] not in text


def test_the_replay_server_answers_one_pod_and_refuses_other_queries(api):
    import runpod

    runpod.api_key = "rp-test-key"
    assert runpod.get_pod("w8e2r5t1y6u3i9")["name"] == "coder-2"
    assert runpod.get_pod("nope") is None
    with pytest.raises(runpod.error.QueryError):
        runpod.get_gpus()
