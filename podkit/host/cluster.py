"""One model across several hosts: a cluster's nodes, who is the head, and whether they agree.

The hosts of an inventory that share a ``podkit_cluster`` name serve one model together, on vLLM's
own multi-node runtime: tensor parallel within a node, pipeline parallel across nodes. Rank 0 is
the head: it runs the API (behind its edge, like any server) and the others run ``vllm serve
--headless`` and join it. Each node's probe says how it reaches the head (the address and interface
the kernel would use, whether a gateway is on the way) and carries a RunPod Instant Cluster's own
variables (``PRIMARY_ADDR``, ``NODE_RANK``, ``NUM_NODES``), which stand in for data not given.

:func:`cluster_of` puts every node's settings and probe side by side, on every node's turn in the
deploy, and says what would stop the cluster (each with its fix) before anything is installed:
ranks, the head's address, a private network between the nodes, and one vLLM, one kind of GPU and
one checkpoint across them. It also says whether another node is due a restart: the ranks of a
vLLM server start together, so one node's restart is every node's (a node that restarts alone
never rejoins; the head keeps answering ``/health`` while its requests hang).

Pure: tests feed it probe snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from podkit.host.hoststate import HostState, VllmInstall
from podkit.host.preflight import choose_vllm
from podkit.host.probe import listener_holder
from podkit.host.programs import programs_for
from podkit.settings import FLAGS, SETTINGS, PackageSpec, Settings

# Settings every node of a cluster must share: what is served and how (a node's own volume, ports
# and supervisor may differ; its rank and address are its own).
SHARED = tuple(
    s.name
    for s in SETTINGS
    if s.name.startswith("vllm_")
    or s.name in ("podkit_vllm_package", "podkit_vllm_cpu_package", "podkit_prefer_fp8", "podkit_cluster_port")
)


@dataclass(frozen=True)
class Member:
    """One inventory host as the deploy sees it: its data and its probe (a host outside any cluster
    is a member of none, seen the same way)."""

    name: str
    settings: Settings
    pod: HostState

    @cached_property
    def vllm(self) -> tuple[PackageSpec, VllmInstall | None]:
        """The vLLM this host needs and an install that already satisfies it (or None), chosen once:
        the deploy's install, its plan and the cluster's checks all read this one choice."""
        return choose_vllm(self.settings, self.pod)

    @property
    def facts(self) -> dict[str, Any]:
        return self.pod.cluster or {}

    @property
    def rank(self) -> int | None:
        if self.settings.cluster_rank is not None:
            return self.settings.cluster_rank
        value = self.facts.get("env", {}).get("NODE_RANK", "")
        return int(value) if value.strip().isdigit() else None

    @property
    def head(self) -> str | None:
        """The head's address as this node was told it (data, else its PRIMARY_ADDR)."""
        return self.settings.cluster_head or self.facts.get("head")

    @property
    def address(self) -> str | None:
        """This node's own address on the way to the head (the head's: the head address itself)."""
        return self.facts.get("address")

    @property
    def interface(self) -> str | None:
        return self.facts.get("interface")


@dataclass
class Cluster:
    name: str
    me: Member
    members: list[Member]  # by rank, then name
    head: str | None
    port: int
    problems: list[str] = field(default_factory=list)

    @property
    def nnodes(self) -> int:
        return len(self.members)

    @property
    def rank(self) -> int:
        return self.me.rank or 0

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @property
    def pipeline_parallel_size(self) -> int:
        return self.me.settings.pipeline_parallel_size or self.nnodes

    def summary(self) -> str:
        """``rank 1 of big (2 nodes, PP 2): head 10.65.0.1:29501, this node 10.65.0.2 on ens1``"""
        return (
            f"rank {self.rank} of {self.name} ({self.nnodes} nodes, PP {self.pipeline_parallel_size}): head "
            f"{self.head}:{self.port}, this node {self.me.address} on {self.me.interface}"
        )

    def launch_args(self) -> list[str]:
        """What ``vllm serve`` needs on this node, besides the model and the TP size."""
        args = [
            FLAGS["pipeline_parallel_size"],
            str(self.pipeline_parallel_size),
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.rank),
            "--master-addr",
            str(self.head),
            "--master-port",
            str(self.port),
        ]
        return args if self.is_head else [*args, "--headless"]

    def env(self) -> dict[str, str]:
        """The node's private address for vLLM, and its interface for Gloo (CPU) and NCCL (GPU):
        without them vLLM picks the first address it finds and Gloo meshes over loopback."""
        found = {"VLLM_HOST_IP": str(self.me.address)}
        if self.me.interface:
            found |= {"GLOO_SOCKET_IFNAME": self.me.interface, "NCCL_SOCKET_IFNAME": self.me.interface}
        return found

    def roster(self) -> list[dict[str, Any]]:
        """Every node by rank: its name, address and interface. Each node's launch script carries
        it, so a change at any node (a moved follower) changes every node's script: they restart together."""
        return [{"rank": m.rank, "name": m.name, "address": m.address, "interface": m.interface} for m in self.members]

    def peers_due(self) -> list[str]:
        """The other nodes whose vLLM is not running from its current files (or will be installed):
        each restarts in this run, so this node must too."""
        due = []
        for member in self.members:
            if member is self.me:
                continue
            pod, settings = member.pod, member.settings
            _, found = member.vllm
            running = pod.supervised(settings.supervisor, programs_for(settings, follower=member.rank != 0))
            if found is None or not running or not pod.serving_current_files():
                due.append(member.name)
        return due


def cluster_of(me: str, members: list[Member]) -> Cluster:
    """The cluster ``me`` belongs to, from every member's data and probe, with what stops it."""
    mine = next(m for m in members if m.name == me)
    ordered = sorted(members, key=lambda m: (m.rank if m.rank is not None else 1 << 30, m.name))
    if mine.settings.cluster is None:
        raise ValueError(
            f"{me} is in no cluster: podkit_cluster is not set"
        )  # the deploy asks for a cluster's node only
    cluster = Cluster(mine.settings.cluster, mine, ordered, mine.head, mine.settings.cluster_port)
    cluster.problems = _problems(cluster)
    return cluster


def _problems(cluster: Cluster) -> list[str]:
    name, members, me = cluster.name, cluster.members, cluster.me
    unread = [m.name for m in members if m.pod.unreadable]
    if unread:
        return [f"cluster {name}: {', '.join(unread)} could not be read (see its own line); fix it first"]
    problems = []
    # ranks: each node its own, 0..n-1; a RunPod cluster's NUM_NODES matches the inventory
    for member in members:
        if member.rank is None:
            problems.append(
                f"cluster {name}: {member.name} has no rank (podkit_cluster_rank is not set and the host has no "
                "NODE_RANK): give each node its rank, 0 for the head"
            )
    ranks = sorted(m.rank for m in members if m.rank is not None)
    if len(ranks) == len(members) and ranks != list(range(len(members))):
        problems.append(
            f"cluster {name}: the ranks are {', '.join(f'{m.name} {m.rank}' for m in members)}; "
            f"give the {len(members)} nodes the ranks 0 to {len(members) - 1}, each once"
        )
    for member in members:
        said = member.facts.get("env", {}).get("NUM_NODES", "")
        if said.strip().isdigit() and int(said) != len(members):
            problems.append(
                f"cluster {name}: {member.name} says NUM_NODES={said} but the inventory has {len(members)} "
                f"node{'s' if len(members) != 1 else ''} ({', '.join(m.name for m in members)}): "
                "put every node of the cluster in the inventory"
            )
    if len(members) < 2:
        problems.append(
            f"cluster {name}: {me.name} is its only node: add the other nodes to the inventory, or unset podkit_cluster"
        )
    problems += _network_problems(cluster)
    problems += _agreement_problems(cluster)
    problems += _port_problems(cluster)
    if me.settings.supervisor != "supervisord":
        problems.append(
            f"cluster {name}: its ranks must restart together, which podkit does under supervisord: set "
            "podkit_supervisor = 'supervisord' for the cluster"
        )
    package, _ = me.vllm
    if package.is_cpu_build and "--enforce-eager" in me.settings.extra_args:
        problems.append(
            f"cluster {name}: --enforce-eager breaks pipeline parallel on vLLM's CPU build ({package}: the first "
            "request fails on `assert self.intermediate_tensors is not None`): in vllm_extra_args use "
            """--compilation-config '{"mode": 2, "backend": "eager"}' instead"""
        )
    pp = cluster.pipeline_parallel_size
    if pp != len(members):
        problems.append(
            f"cluster {name}: vllm_pipeline_parallel_size is {pp} but the cluster has {len(members)} nodes: podkit "
            "runs tensor parallel within a node and one pipeline stage per node; unset vllm_pipeline_parallel_size"
        )
    return problems


def _port_problems(cluster: Cluster) -> list[str]:
    """The head's store port (``podkit_cluster_port``: vLLM's ``--master-port``) against each node's own
    ports and, on the head, against who listens there now: a clash kills the head's start after its
    restart, when the working server is already gone."""
    problems = []
    port = cluster.port
    for member in cluster.members:
        s = member.settings
        ours = {s.port: "vllm_port", s.edge_port: "podkit_edge_port"}
        if port in ours:
            problems.append(
                f"cluster {cluster.name}: podkit_cluster_port is {port}, which is {member.name}'s {ours[port]} too: "
                f"give the cluster's store a port of its own (podkit_cluster_port, default 29501)"
            )
            continue
        held = member.pod.ports_held.get(port) or {}
        if member.rank == 0 and held.get("held") and not held.get("podkit"):
            problems.append(
                f"cluster {cluster.name}: port {port} (podkit_cluster_port, the head's store) is already in use on "
                f"{member.name} by a process podkit did not start ({listener_holder(held)}): stop it, or set "
                "podkit_cluster_port to a free port"
            )
    return problems


def _network_problems(cluster: Cluster) -> list[str]:
    name, members = cluster.name, cluster.members
    heads = {m.head for m in members}
    if None in heads:
        missing = ", ".join(m.name for m in members if m.head is None)
        return [
            f"cluster {name}: the head's address is not known on {missing} (podkit_cluster_head is not set and "
            "the host has no PRIMARY_ADDR): set podkit_cluster_head to rank 0's address on the nodes' private network"
        ]
    if len(heads) > 1:
        return [
            f"cluster {name}: the nodes disagree on the head's address ("
            + ", ".join(f"{m.name} {m.head}" for m in members)
            + "): set podkit_cluster_head once for the cluster"
        ]
    problems = []
    head = cluster.head
    for member in members:
        facts = member.facts
        if member.rank == 0 and not facts.get("local"):
            held = ", ".join(
                f"{iface} {' '.join(addrs)}" for iface, addrs in sorted((facts.get("addresses") or {}).items())
            )
            problems.append(
                f"cluster {name}: the head's address {head} is not an address of {member.name}, rank 0 (it has "
                f"{held or 'none'}): set podkit_cluster_head to rank 0's address on the nodes' private network"
            )
        elif member.rank != 0 and (facts.get("error") or facts.get("gateway") == ""):  # "": no route matched
            why = f" ({facts['error']})" if facts.get("error") else ""
            problems.append(
                f"cluster {name}: {member.name} has no route to the head's address {head}{why}: the nodes need a "
                "private network between them; set podkit_cluster_head to the head's address on it"
            )
        elif member.rank != 0 and facts.get("gateway"):
            problems.append(
                f"cluster {name}: {member.name} reaches the head's address {head} only through the gateway "
                f"{facts['gateway']} ({facts.get('interface')}), not over a network the nodes share: the ranks' "
                "traffic is not encrypted; set podkit_cluster_head to the head's address on the private network"
            )
    return problems


def _agreement_problems(cluster: Cluster) -> list[str]:
    """One vLLM, one kind and number of GPUs, and the same served settings on every node."""
    name, members = cluster.name, cluster.members
    problems = []

    def differs(what: str, values: dict[str, str], fix: str) -> None:
        if len(set(values.values())) > 1:
            listed = ", ".join(f"{node} {value}" for node, value in values.items())
            problems.append(f"cluster {name}: the nodes disagree on {what} ({listed}): {fix}")

    for key in SHARED:
        attr = key.split("_", 1)[1]
        differs(
            key,
            {m.name: repr(getattr(m.settings, attr)) for m in members},
            f"set {key} once for the cluster (its group's data)",
        )
    versions = {}
    for member in members:
        package, found = member.vllm
        versions[member.name] = f"{package.version} ({'the system' if found and found.where == 'system' else 'venv'})"
    differs(
        "the vLLM version",
        {node: version.split(" ")[0] for node, version in versions.items()},
        "every node must run the same vLLM: set podkit_use_system_vllm = False so each gets the pinned one in its venv",
    )
    differs(
        "the GPUs",
        {m.name: f"{len(m.pod.gpus)}x {m.pod.gpus[0].name}" if m.pod.gpus else "none" for m in members},
        "give every node the same GPUs (one model, one number of them)",
    )
    snapshots = {
        m.name: (m.pod.checkpoint or {}).get("revision", "")[:12]
        for m in members
        if m.pod.checkpoint and m.pod.checkpoint.get("complete")
    }
    differs(
        "the checkpoint on the volume",
        snapshots,
        "every node must serve one snapshot: pin vllm_model to a revision (`repo@revision`) and re-apply",
    )
    return problems
