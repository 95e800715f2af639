"""A cluster's pure parts: ranks, the head's address, the private network, agreement across nodes,
the launch arguments and environment, and which node's state restarts the others."""

import dataclasses
import json

import pytest

from podkit.checks import SettingsError
from podkit.host.cluster import Member, cluster_of
from podkit.host.hoststate import Gpu
from tests.helpers import gpu_host, settings

HEAD, FOLLOWER = "10.65.0.1", "10.65.0.2"


def facts(address, interface="ens1", local=False, **more):
    return {"env": {}, "head": None, "address": address, "interface": interface, "local": local, "error": None, **more}


def node(name, rank=None, data=None, gpus=2, **probe):
    """A node of cluster "big" with ``gpus`` H100s; ``probe``: its cluster facts (defaults: a follower
    reaching the head over ens1)."""
    chosen = settings(
        **{"podkit_cluster": "big", "podkit_cluster_head": HEAD, "podkit_cluster_rank": rank, **(data or {})}
    )
    found = {**facts(HEAD if rank == 0 else FOLLOWER, local=rank == 0), **probe}
    return Member(name, chosen, dataclasses.replace(gpu_host(gpus), cluster=found))


def pair(**follower):
    return [node("a", 0), node("b", 1, **follower)]


PROBLEM_CASES = [
    {"id": "two nodes on one private network: nothing stops them", "members": pair(), "problems": []},
    {
        "id": "the follower has no route to the head",
        "members": [node("a", 0), node("b", 1, error="Network is unreachable", address=None, interface=None)],
        "problems": ["b has no route to the head's address 10.65.0.1 (Network is unreachable)"],
    },
    {
        "id": "the follower reaches the head through a gateway: not a network the nodes share",
        "members": pair(gateway="10.192.0.1", interface="eth0"),
        "problems": ["b reaches the head's address 10.65.0.1 only through the gateway 10.192.0.1 (eth0)"],
    },
    {
        "id": "the head's address is not rank 0's",
        "members": [node("a", 0, local=False, addresses={"ens1": ["10.65.0.9"]}), node("b", 1)],
        "problems": ["the head's address 10.65.0.1 is not an address of a, rank 0 (it has ens1 10.65.0.9)"],
    },
    {
        "id": "two heads",
        "members": [node("a", 0), node("b", 0)],
        "problems": ["the ranks are a 0, b 0; give the 2 nodes the ranks 0 to 1, each once"],
    },
    {
        "id": "no rank given and no NODE_RANK on the host",
        "members": [node("a", 0), node("b")],
        "problems": ["b has no rank (podkit_cluster_rank is not set and the host has no NODE_RANK)"],
    },
    {
        "id": "RunPod's NODE_RANK and PRIMARY_ADDR stand in for data",
        "members": [
            node(
                "a",
                data={"podkit_cluster_head": None},
                local=True,
                address=HEAD,
                env={"NODE_RANK": "0", "NUM_NODES": "2"},
                head=HEAD,
            ),
            node("b", data={"podkit_cluster_head": None}, env={"NODE_RANK": "1", "NUM_NODES": "2"}, head=HEAD),
        ],
        "problems": [],
    },
    {
        "id": "the Instant Cluster has a node the inventory lacks",
        "members": [node("a", 0, env={"NUM_NODES": "3"}), node("b", 1)],
        "problems": ["a says NUM_NODES=3 but the inventory has 2 nodes (a, b)"],
    },
    {
        "id": "a setting differs across the nodes",
        "members": [node("a", 0), node("b", 1, data={"vllm_max_model_len": 32768})],
        "problems": ["the nodes disagree on vllm_max_model_len (a 65536, b 32768): set vllm_max_model_len once"],
    },
    {
        "id": "the GPUs differ",
        "members": [node("a", 0), node("b", 1, gpus=1)],
        "problems": ["the nodes disagree on the GPUs (a 2x NVIDIA H100 80GB HBM3, b 1x NVIDIA H100 80GB HBM3)"],
    },
    {
        "id": "a node alone",
        "members": [node("a", 0)],
        "problems": ["a is its only node: add the other nodes to the inventory, or unset podkit_cluster"],
    },
    {
        "id": "a pipeline size that is not one stage per node",
        "members": [
            node("a", 0, data={"vllm_pipeline_parallel_size": 4}),
            node("b", 1, data={"vllm_pipeline_parallel_size": 4}),
        ],
        "problems": ["vllm_pipeline_parallel_size is 4 but the cluster has 2 nodes"],
    },
]


def cpu_node(name, rank, args):
    member = node(name, rank, data={"vllm_extra_args": args}, gpus=0)
    return dataclasses.replace(member, pod=dataclasses.replace(member.pod, gpus=[]))


PROBLEM_CASES.append(
    {
        "id": "systemd: the ranks could not restart together",
        "members": [
            node("a", 0, data={"podkit_supervisor": "systemd"}),
            node("b", 1, data={"podkit_supervisor": "systemd"}),
        ],
        "problems": ["its ranks must restart together, which podkit does under supervisord"],
    }
)
PROBLEM_CASES.append(
    {
        "id": "the CPU build with --enforce-eager: pipeline parallel's first request would fail",
        "members": [cpu_node("a", 0, ["--enforce-eager"]), cpu_node("b", 1, ["--enforce-eager"])],
        "problems": ["""--enforce-eager breaks pipeline parallel on vLLM's CPU build"""],
    }
)


@pytest.mark.parametrize("case", PROBLEM_CASES, ids=[c["id"] for c in PROBLEM_CASES])
def test_what_stops_a_cluster_is_said_with_its_fix(case):
    found = cluster_of(case["members"][0].name, case["members"])
    assert len(found.problems) == len(case["problems"]), found.problems
    for said, expected in zip(found.problems, case["problems"]):
        assert said.startswith("cluster big: ") and expected in said, (said, expected)
        assert any(fix in said for fix in ("set ", "add ", "give ", "put ", "unset ", "the nodes need", " use ")), said


def test_the_vllm_version_must_agree():
    a, b = pair()
    b = dataclasses.replace(b, settings=settings(**{**_data(b), "podkit_vllm_package": "vllm==0.32.0"}))
    problems = cluster_of("a", [a, b]).problems
    assert any("disagree on podkit_vllm_package" in p for p in problems), problems
    assert any("disagree on the vLLM version (a 0.33.0, b 0.32.0)" in p for p in problems), problems


def _data(member):
    return {
        "podkit_cluster": "big",
        "podkit_cluster_head": HEAD,
        "podkit_cluster_rank": member.settings.cluster_rank,
    }


def test_the_head_serves_and_the_follower_runs_headless_on_its_private_address():
    members = pair()
    head, follower = cluster_of("a", members), cluster_of("b", members)
    assert head.is_head and not follower.is_head
    assert head.launch_args() == [
        "--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "0",
        "--master-addr", HEAD, "--master-port", "29501",
    ]  # fmt: skip
    assert follower.launch_args()[-1] == "--headless" and "--node-rank" in follower.launch_args()
    assert follower.env() == {"VLLM_HOST_IP": FOLLOWER, "GLOO_SOCKET_IFNAME": "ens1", "NCCL_SOCKET_IFNAME": "ens1"}
    assert head.env()["VLLM_HOST_IP"] == HEAD
    assert (
        head.roster()
        == follower.roster()
        == [
            {"rank": 0, "name": "a", "address": HEAD, "interface": "ens1"},
            {"rank": 1, "name": "b", "address": FOLLOWER, "interface": "ens1"},
        ]
    )
    assert "rank 1 of big (2 nodes, PP 2): head 10.65.0.1:29501" in follower.summary()


def test_a_node_not_running_its_current_files_restarts_the_others():
    a, b = pair()
    # nothing runs anywhere: each node sees the other due (the first apply starts both anyway)
    assert cluster_of("a", [a, b]).peers_due() == ["b"]
    assert cluster_of("b", [a, b]).peers_due() == ["a"]


def test_each_nodes_vllm_is_chosen_once_for_the_checks_the_restarts_and_the_deploy(monkeypatch):
    from podkit.host import cluster as module

    chosen = []
    real = module.choose_vllm
    monkeypatch.setattr(module, "choose_vllm", lambda s, pod: chosen.append(pod) or real(s, pod))
    members = pair()
    found = cluster_of("a", members)
    found.peers_due()
    assert found.me.vllm == real(members[0].settings, members[0].pod)  # what the deploy installs and plans with
    assert len(chosen) == len(members), "one choice per node, however many readers"


def test_a_cluster_node_runs_only_what_its_rank_needs():
    from podkit.host.programs import FOLLOWER_PROGRAMS, PROGRAMS, programs_for

    assert programs_for(settings(), follower=True) == FOLLOWER_PROGRAMS == ("vllm", "idle")
    assert programs_for(settings()) == PROGRAMS


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("podkit_cluster_rank", -1, "must be a node rank"),
        ("podkit_cluster_head", "head.local", "must be an IP address"),
        ("vllm_distributed_backend", "ray", "must be one of"),
    ],
)
def test_cluster_data_is_checked(key, value, message):
    with pytest.raises(SettingsError) as raised:
        settings(**{key: value})
    assert key in str(raised.value) and message in str(raised.value), raised.value


def test_a_gpu_mismatch_names_both():
    a, b = pair()
    b = dataclasses.replace(b, pod=dataclasses.replace(b.pod, gpus=[Gpu(0, "NVIDIA A100-SXM4-80GB", 81920, "8.0")] * 2))
    assert any("b 2x NVIDIA A100-SXM4-80GB" in p for p in cluster_of("a", [a, b]).problems)


def test_a_ranks_vllm_is_left_down_when_it_exits_and_a_servers_is_restarted():
    from podkit.host.hostplan import HostPlan
    from podkit.host.render import host_files
    from podkit.wayin import way_in

    def conf(cluster):
        chosen = settings(vllm_model="/models/tiny")
        way = way_in("a", {"ssh_hostname": "127.0.0.1"}, chosen.edge_port)
        launch = HostPlan(
            model="/models/tiny",
            max_model_len=4096,
            tensor_parallel_size=1,
            tool_call_parser=None,
            reasoning_parser=None,
        )
        files = host_files(
            chosen, package=chosen.vllm_package, vllm_bin="/v/bin/vllm", launch=launch, way=way, cluster=cluster
        )
        program = files["supervisord"].content.split("[program:vllm]")[1].split("[program:")[0]
        return files, program

    alone, program = conf(None)
    assert "autorestart=true" in program and {"edge", "idle_config"} <= set(alone)
    head, program = conf(cluster_of("a", pair()))
    assert "autorestart=false" in program and "[program:edge]" in head["supervisord"].content
    follower, program = conf(cluster_of("b", pair()))
    assert "autorestart=false" in program and "[program:edge]" not in follower["supervisord"].content
    assert not {"edge", "caddyfile"} & set(follower)  # no API of its own: no edge
    # its idle watcher follows the head's store port: the head's idle stop stops the whole cluster
    assert "[program:idle]" in follower["supervisord"].content
    assert json.loads(follower["idle_config"].content)["follow"] == {"address": "10.65.0.1", "port": 29501}
    assert "follow" not in json.loads(head["idle_config"].content)
    assert "--headless" in follower["launch"].content and "--master-addr 10.65.0.1" in follower["launch"].content
    assert "export VLLM_HOST_IP=10.65.0.2" in follower["env"].content


@pytest.mark.proc
def test_the_probe_reads_runpods_cluster_variables_and_the_way_to_the_head(tmp_path, monkeypatch):
    """podctl run for real: a RunPod Instant Cluster's variables stand in for data, and the head's
    address on this host is local (loopback here: the kernel's own answer, no packet sent)."""
    import os
    import subprocess

    from podkit.host.podctl import podctl_command
    from podkit.host.probe import parse_probe, probe_config

    chosen = settings(podkit_volume=str(tmp_path / "vol"), podkit_cluster="big", vllm_port=1, podkit_edge_port=2)
    env = {**os.environ, "PRIMARY_ADDR": "127.0.0.1", "NODE_RANK": "0", "NUM_NODES": "2"}
    out = subprocess.run(
        ["sh", "-c", podctl_command("probe", probe_config(chosen))], capture_output=True, text=True, env=env, check=True
    )
    found = parse_probe(out.stdout).cluster
    assert found["env"] == {"PRIMARY_ADDR": "127.0.0.1", "NODE_RANK": "0", "NUM_NODES": "2"}
    assert found["head"] == "127.0.0.1" and found["address"] == "127.0.0.1" and found["local"] is True
    assert found["interface"] == "lo" and "127.0.0.1" in found["addresses"]["lo"]
    # no cluster: the probe reads none of it
    alone = subprocess.run(
        ["sh", "-c", podctl_command("probe", probe_config(settings(podkit_volume=str(tmp_path / "v2"))))],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert parse_probe(alone.stdout).cluster is None
