"""Refuse before touching a working server: what podkit checks itself before a restart (a pipeline
a lone host cannot run, a router that is its own replica, a cluster's store port), each refusal one
line with its fix."""

import dataclasses

import pytest

from podkit.client.targets import way_in
from podkit.host.cluster import cluster_of
from podkit.host.probe import probe_config
from podkit.host.router import replicas_of, self_problems
from tests.helpers import default_data, settings
from tests.helpers import gpu_host as host
from tests.helpers import host_plan as plan
from tests.unit.test_cluster import node, pair

# -- a pipeline on one host ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpus, data, refused",
    [
        (0, {"vllm_pipeline_parallel_size": 2}, "this host has no GPU and serves alone"),
        (1, {"vllm_pipeline_parallel_size": 2}, "needs 2 GPUs, more than the 1 here"),
        (0, {}, None),
        (0, {"vllm_pipeline_parallel_size": 1}, None),
        (2, {"vllm_pipeline_parallel_size": 2}, None),  # a stage per GPU: vLLM runs that on one node
    ],
)
def test_a_pipeline_a_lone_host_cannot_run_is_refused_with_its_fix(hub, gpus, data, refused):
    found = plan(hub, "acme/Coder-7B", host(gpus=gpus), **data)
    if refused is None:
        assert found.problems == []
        return
    assert len(found.problems) == 1 and refused in found.problems[0], found.problems
    assert "vllm_pipeline_parallel_size" in found.problems[0] or "shapes that use them all" in found.problems[0]


# -- a router in its own group ---------------------------------------------------------------------

ROUTER = {"podkit_role": "router", "podkit_router_group": "fleet", "vllm_served_model_name": "coder"}


def _member(name, **data):
    return name, default_data(**{"vllm_served_model_name": "coder", **data})


@pytest.mark.parametrize(
    "members, named",
    [
        ([_member("gw", ssh_hostname="10.0.0.1"), _member("gpu-1", ssh_hostname="10.0.0.5")], "gw"),
        # another inventory name for the same address: clients (and the router) would reach itself
        ([_member("gw-again", ssh_hostname="10.0.0.1")], "gw-again"),
        ([_member("gpu-1", ssh_hostname="10.0.0.5"), _member("gpu-2", ssh_hostname="10.0.0.6")], None),
    ],
)
def test_a_router_whose_group_holds_itself_is_refused(members, named):
    chosen = settings(**ROUTER)
    way = way_in("gw", {"ssh_hostname": "10.0.0.1"}, chosen.edge_port)
    problems = self_problems("gw", way, "fleet", replicas_of(chosen, members))
    if named is None:
        assert problems == []
        return
    assert len(problems) == 1, problems
    assert f"the router's group 'fleet' holds this host itself ({named}" in problems[0]
    assert "take it out of podkit_router_group" in problems[0]


# -- a cluster's store port ------------------------------------------------------------------------


def _ports(member, held):
    return dataclasses.replace(member, pod=dataclasses.replace(member.pod, ports_held=held))


STRANGER = {"port": 29501, "held": True, "podkit": False, "pid": 4242, "program": "nc", "user": "root"}


@pytest.mark.parametrize(
    "members, said",
    [
        (
            [node("a", 0, data={"podkit_cluster_port": 8000}), node("b", 1, data={"podkit_cluster_port": 8000})],
            "podkit_cluster_port is 8000, which is a's podkit_edge_port too",
        ),
        (
            [node("a", 0, data={"podkit_cluster_port": 8001}), node("b", 1, data={"podkit_cluster_port": 8001})],
            "podkit_cluster_port is 8001, which is a's vllm_port too",
        ),
        (
            [_ports(node("a", 0), {29501: STRANGER}), node("b", 1)],
            "port 29501 (podkit_cluster_port, the head's store) is already in use on a by a process podkit did not "
            "start (pid 4242 (nc))",
        ),
        # the head's own vLLM holds it (a running cluster): podkit's, not a stranger
        ([_ports(node("a", 0), {29501: {**STRANGER, "podkit": True}}), node("b", 1)], None),
        # a follower does not listen on the head's port: a process there is none of the cluster's business
        ([node("a", 0), _ports(node("b", 1), {29501: STRANGER})], None),
    ],
)
def test_a_clusters_store_port_is_checked_against_the_hosts_ports_and_listeners(members, said):
    problems = [p for p in cluster_of("b", members).problems if "port" in p]
    if said is None:
        assert problems == []
        return
    assert problems and said in problems[0], problems  # each node that clashes is named
    assert all(p.startswith("cluster big: ") for p in problems)


def test_a_cluster_nodes_probe_names_who_listens_on_the_store_port():
    head = pair()[0].settings
    assert probe_config(head)["extra_ports"] == [head.cluster_port]
    assert "extra_ports" not in probe_config(settings())
    assert probe_config(head, extra_ports=[9]).get("extra_ports") == [9, head.cluster_port]
