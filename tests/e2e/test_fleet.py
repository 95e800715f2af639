"""A fleet behind one endpoint, for real: two replicas behind vLLM's router on a router host.

Two replicas serve the tiny model with the CPU build: the session sandbox itself (on loopback,
plain HTTP) and a stand-in host in a network namespace of its own (testing/netpods.py: its own
address, sshd and host key, a copy of the sandbox's volume; its edge serves TLS from its own CA).
A third host, this machine behind a private sshd on loopback, has
``podkit_role = "router"``: the deploy installs vLLM's router (PyPI ``vllm-router``), Caddy and
supervisord into its own fresh venv, and points the router at the replicas' edges (the
stand-in's over HTTPS, trusting exactly the CA certificate its deploy pinned in the same pyinfra
run).

Through the router's one URL: requests from several agents at once reach both replicas; an agent's session (a growing
prefix) stays on one replica; the router's own admin routes are not reachable; with one replica
killed, requests keep succeeding; the replica, moved to a new address, is picked up by a
re-apply that restarts the router host's edge but not the router. A converged re-apply costs one
remote command per host.
"""

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from podkit import PROJECT_ROOT
from podkit.sandbox.sshd import PrivateSshd, free_port
from testing.netpods import NetnsPod, client_key, copy_volume

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.apart,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (netns)"),
]

PORT = 8000


class Fleet:
    def __init__(self, pod, root: Path):
        self.pod = pod
        self.root = root
        self.state = root / "state"
        self.client_key = client_key(root / "client")
        self.replicas: dict[str, NetnsPod] = {}
        self.addresses: dict[str, object] = {}
        self.router_sshd = PrivateSshd(root / "router-sshd")
        self.router_volume = root / "router-volume"
        self.router_ports = {"edge": free_port(), "router": free_port()}
        self.folder = root / "inventory"
        self.folder.mkdir(parents=True)

    @property
    def inventory(self) -> Path:
        return self.folder / "fleet.py"

    def write_inventory(self) -> None:
        """A static inventory: the group "sandbox" (group_data/sandbox.py's CPU settings) holds both
        replicas, the session sandbox and the stand-in; a router host in front of that group."""
        box = self.pod.box
        shared = {
            "vllm_model": str(box.model_dir),
            "vllm_served_model_name": "tiny-coder",
            "podkit_api_key_file": str(box.api_key_file),  # one key for the fleet
        }
        stand_ins = [
            (
                name,
                {
                    **ssh.pyinfra_data(),
                    **shared,
                    "podkit_volume": str(box.volume),
                    "podkit_public": True,  # its edge on its own address, TLS from its own CA
                    "podkit_edge_port": PORT,
                },
            )
            for name, ssh in self.addresses.items()
        ]
        router = self.router_sshd.start()
        routers = [
            (
                "router",
                {
                    **router.pyinfra_data(),
                    **shared,
                    "podkit_role": "router",
                    "podkit_router_group": "sandbox",
                    "podkit_volume": str(self.router_volume),
                    "podkit_public": False,
                    "podkit_edge_port": self.router_ports["edge"],
                    "vllm_port": self.router_ports["router"],
                },
            )
        ]
        replicas = [("sandbox", box.host_data()), *stand_ins]
        self.inventory.write_text(f"sandbox = {replicas!r}\nrouters = {routers!r}\n")

    def apply(self):
        return self.pod.box.apply(inventory=str(self.inventory), env={"PODKIT_STATE_DIR": str(self.state)})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.router_ports['edge']}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.pod.key()}"}

    def chat(self, messages: list[dict], max_tokens: int = 8) -> httpx.Response:
        body = {"model": "tiny-coder", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        return httpx.post(f"{self.url}/v1/chat/completions", json=body, headers=self.headers(), timeout=120)

    def metrics_url(self, name: str) -> tuple[str, ssl.SSLContext | bool]:
        if name == "sandbox":
            return f"http://127.0.0.1:{self.pod.box.host_data()['podkit_edge_port']}/metrics", True
        ca = ssl.create_default_context(cafile=str(self.state / "ca" / f"{name}.crt"))
        return f"https://{self.replicas[name].address}:{PORT}/metrics", ca

    def served(self) -> dict[str, float]:
        """Requests each live replica's vLLM has finished, from its own /metrics through its edge."""
        counts = {}
        for name in ("sandbox", *self.replicas):
            url, verify = self.metrics_url(name)
            try:
                text = httpx.get(url, headers=self.headers(), verify=verify, timeout=10).text
            except httpx.HTTPError:
                continue
            counts[name] = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:request_success_total{")
            )
        return counts

    def verify(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "cli.py", "verify", str(self.inventory), "--json", *args],
            cwd=PROJECT_ROOT,
            env={**self.pod.box.env(), "PODKIT_STATE_DIR": str(self.state)},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def out(self) -> list[str]:
        """The replicas the router has taken out, by name: what verify's replicas check reads on the
        router host (the router's /workers on loopback, the deploy's roster), without verify's requests."""
        podkit = self.router_volume / "podkit"
        roster = json.loads((podkit / "bin" / "replicas.json").read_text())["replicas"]
        names = {replica["worker"]: replica["name"] for replica in roster}
        workers = httpx.get(f"http://127.0.0.1:{self.router_ports['router']}/workers", timeout=10).json()["workers"]
        return [names.get(worker["url"], worker["url"]) for worker in workers if not worker["is_healthy"]]

    def router_pid(self) -> str:
        return (self.router_volume / "podkit" / "run" / "vllm.pid").read_text().split()[0]

    def close(self) -> None:
        for pod in self.replicas.values():
            pod.destroy()
        subprocess.run(
            [
                str(self.router_volume / "podkit" / "venv" / "bin" / "supervisorctl"),
                "-c",
                str(self.router_volume / "podkit" / "bin" / "supervisord.conf"),
                "shutdown",
            ],
            capture_output=True,
        )
        self.router_sshd.stop()


def served_by(fleet: Fleet, before: dict[str, float]) -> list[str]:
    after = fleet.served()
    return [name for name in after if after[name] > before.get(name, 0)]


@pytest.fixture(scope="module")
def fleet(pod, tmp_path_factory):
    applied = pod.apply()  # the session sandbox serves with its default data: replica one
    assert applied.rc == 0, applied.stderr[-3000:]
    root = tmp_path_factory.mktemp("router")
    fleet = Fleet(pod, root)
    copy_volume(pod.box.volume, root / "volume-rpb")
    fleet.replicas["rpb"] = NetnsPod("rpb", 242, root / "rpb", root / "volume-rpb", pod.box.volume, fleet.client_key)
    fleet.addresses["rpb"] = fleet.replicas["rpb"].start(host=2, port=2201)
    fleet.write_inventory()
    yield fleet
    fleet.close()  # the session sandbox was a replica with its own data: it serves as before


def test_one_apply_puts_two_replicas_behind_the_router_and_requests_reach_both(fleet):
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    changed = applied.changed("router")
    assert any("vllm-router==" in name for name in changed), changed  # installed from PyPI into its venv
    assert any("trusts exactly each replica's pinned edge CA" in name for name in changed), changed
    assert applied.changed("sandbox") == []  # a serving host joins a fleet unchanged
    caddyfile = (fleet.router_volume / "podkit" / "bin" / "Caddyfile").read_text()
    assert f"reverse_proxy http://127.0.0.1:{fleet.pod.box.host_data()['podkit_edge_port']}" in caddyfile
    b = fleet.replicas["rpb"]
    assert f"reverse_proxy https://{b.address}:{PORT}" in caddyfile
    pinned = (fleet.state / "ca" / "rpb.crt").read_text()
    assert (fleet.router_volume / "podkit" / "replicas" / "rpb.crt").read_text() == pinned
    launch = (fleet.router_volume / "podkit" / "bin" / "launch.sh").read_text()
    assert "--worker-urls" in launch and "--policy cache_aware" in launch
    assert fleet.pod.key() not in launch
    assert Path(f"/proc/{fleet.router_pid()}").exists()  # the router runs (its title is vllm::router)

    models = httpx.get(f"{fleet.url}/v1/models", headers=fleet.headers(), timeout=30)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny-coder"
    assert httpx.get(f"{fleet.url}/v1/models", timeout=30).status_code == 401  # the router's edge checks the key
    for admin in ("/workers", "/list_workers", "/add_worker?url=http://10.0.0.9:1", "/flush_cache"):
        answer = httpx.post(f"{fleet.url}{admin}", headers=fleet.headers(), timeout=30)
        assert answer.status_code == 404, (admin, answer.status_code)  # the router's admin routes stay inside

    before = fleet.served()

    def unrelated(index):  # no shared prefix: the router spreads them over the replicas by load
        prompt = f"request {index}: " + " ".join(f"w{index}x{i}" for i in range(40))
        return fleet.chat([{"role": "user", "content": prompt}], max_tokens=32)

    with ThreadPoolExecutor(4) as pool:  # four agents at once, as a team's would be
        answers = list(pool.map(unrelated, range(8)))
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    after = fleet.served()
    assert sum(after.values()) - sum(before.values()) == 8
    assert set(after) == {"sandbox", "rpb"} and all(after[n] > before[n] for n in after), (before, after)


def test_an_agent_session_stays_on_one_replica(fleet):
    messages = [{"role": "system", "content": "You are a coding agent. " + " ".join(f"rule{i}" for i in range(120))}]
    replicas = []
    for turn in range(4):
        messages.append({"role": "user", "content": f"step {turn}: edit file_{turn}.py"})
        before = fleet.served()
        answer = fleet.chat(messages)
        assert answer.status_code == 200, answer.text
        replicas += served_by(fleet, before)
        messages.append({"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"] or "ok"})
    assert len(replicas) == 4 and len(set(replicas)) == 1, replicas


def test_a_dead_replica_is_routed_around_and_a_moved_one_is_picked_up_by_a_reapply(fleet):
    fleet.replicas["rpb"].stop()  # every process of replica B dies
    for index in range(6):
        answer = fleet.chat([{"role": "user", "content": f"while B is down {index} " + "z " * index}])
        assert answer.status_code == 200, (index, answer.text)
    deadline = time.monotonic() + 40  # the router's own health checks take B out within about 10 s
    while fleet.out() != ["rpb"] and time.monotonic() < deadline:
        time.sleep(1)
    verify = fleet.verify("--host", "router")
    replicas = next(c for c in json.loads(verify.stdout)["router"]["checks"] if c["name"] == "replicas")
    assert verify.returncode == 0, verify.stdout[-3000:]  # one replica out: the endpoint still serves
    assert replicas["ok"] and replicas["detail"].startswith("1 of 2 replicas in"), replicas
    assert "out: rpb" in replicas["detail"], replicas

    router_pid = fleet.router_pid()
    fleet.addresses["rpb"] = fleet.replicas["rpb"].start(host=3, port=2202)  # back at a new address
    fleet.write_inventory()
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    changed = applied.changed("router")
    assert any("Caddyfile" in name for name in changed), changed
    assert fleet.router_pid() == router_pid  # the router's list (loopback hops) is the same: it kept running
    assert (
        f"reverse_proxy https://{fleet.replicas['rpb'].address}:{PORT}"
        in (fleet.router_volume / "podkit" / "bin" / "Caddyfile").read_text()
    )

    # the router's health check puts B back within seconds; a team's agents at once reach it
    deadline = time.monotonic() + 60
    reached_b, round_ = False, 0
    while time.monotonic() < deadline and not reached_b:
        before = fleet.served()
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(
                    lambda i, r=round_: fleet.chat(
                        [
                            {
                                "role": "user",
                                "content": f"after the move {r}.{i} " + " ".join(f"q{i}y{j}" for j in range(30)),
                            }
                        ],
                        max_tokens=32,
                    ),
                    range(4),
                )
            )
        assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
        reached_b = "rpb" in served_by(fleet, before)
        round_ += 1
    assert reached_b, "no request reached the moved replica within 60 s"


def test_a_converged_fleet_costs_one_remote_command_per_host(fleet):
    sshds = {"sandbox": fleet.pod.box.sshd, "rpb": fleet.replicas["rpb"].sshd, "router": fleet.router_sshd}
    before = {name: len(sshd.sessions()) for name, sshd in sshds.items()}
    applied = fleet.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert all(not applied.changed(host) for host in sshds), applied.stdout[-3000:]
    assert {name: len(sshd.sessions()) - before[name] for name, sshd in sshds.items()} == {name: 1 for name in sshds}
