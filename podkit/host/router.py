"""A router host: vLLM's router (PyPI ``vllm-router``) in front of a group of replicas.

The router takes vLLM's place on the router host: it listens on ``127.0.0.1:vllm_port`` behind
the same edge a replica has (the key checked, only the OpenAI API and ``/health`` let through,
TLS or RunPod's proxy on the way in). Its workers are the hosts of the inventory group
``podkit_router_group``, reached the way a client reaches them (:func:`podkit.wayin.way_in`:
their own edge, TLS verified against the CA certificate pinned when each was deployed, RunPod's
proxy, or a URL of the user's own).

The router itself speaks plain HTTP to one loopback port per replica, ``vllm_port + 1 + i``,
where the router host's Caddy forwards to that replica's edge: Caddy sets the replica's own
``Host``, verifies its certificate against exactly its pinned CA, and streams unbuffered. So the
router needs no TLS settings of its own, and a replica that moved (a migrated pod: a new address)
changes only the edge's config: the router's worker list, and what it has learnt about the
replicas' caches, stay.

The client's ``Authorization`` header passes through the router (checked by the router host's
edge first, then by each replica's), so the key is in no file and on no command line here either.
vllm-router 0.1.17 forwards ``/v1/responses`` and ``/v1/messages`` with none of the client's
headers, so a loopback hop sets the key again on a request that comes without one, from the
edge's environment (``{env.PODKIT_API_KEY}``); verify's Responses and Messages checks prove it.

Everything here is pure: the deploy gives it the group's hosts and their data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podkit.host.probe import listener_holder
from podkit.settings import Settings, SettingsError
from podkit.wayin import WayIn, ca_path, way_in

# How often the router asks each replica's /health, and after how many failures in a row it takes
# a replica out (one success puts it back): a dead replica is out within about 10 s.
HEALTH_INTERVAL_SECONDS = 5
HEALTH_FAILURES = 2
# A router starting while a replica is down waits this long for it before serving with the others.
WORKER_STARTUP_SECONDS = 30
# A request that fails on a replica is retried (vllm-router: 5 tries); the policy would pick the
# same replica again (it holds the prefix), so after this many failures in a row the replica's
# circuit opens and the remaining tries go elsewhere; it is tried again after CIRCUIT_OPEN_SECONDS.
# With vllm-router's own default (10), a replica killed mid-session answered that session's next
# request with a 502 (tests/e2e/test_fleet.py).
CIRCUIT_FAILURES = 2
CIRCUIT_OPEN_SECONDS = 15


@dataclass(frozen=True)
class Replica:
    """One worker of a router: its inventory name, how it is reached, and where the router host's
    edge listens on loopback for it (``hop_port``) with its pinned CA (``ca``, a path on the router
    host; None unless the replica serves TLS from its own CA)."""

    name: str
    way: WayIn
    served_model_name: str
    hop_port: int
    ca: str | None
    key_file: str | None = None  # its podkit_api_key_file: the router passes the client's key through

    @property
    def hop_url(self) -> str:
        return f"http://127.0.0.1:{self.hop_port}"

    @property
    def controller_ca(self) -> str | None:
        """The certificate pinned on the controller that ``ca`` copies."""
        return str(ca_path(self.name)) if self.ca else None


def replicas_of(settings: Settings, members: list[tuple[str, dict[str, Any]]]) -> list[Replica]:
    """The router's replicas, in the group's order, from each member's ``(name, host data)``.

    A member whose data does not validate is still listed (its problem is its own deploy's);
    its served model name then comes from the raw datum."""
    paths = settings.paths
    replicas = []
    port = settings.port
    for name, data in members:
        port += 1
        while port in (settings.edge_port, settings.port):
            port += 1
        way = way_in(name, data)
        internal = way.tls == "internal"
        key_file: str | None
        try:
            member = Settings.from_mapping(data)
            served, key_file = member.served_model_name, member.api_key_file
        except SettingsError:
            served, key_file = str(data.get("vllm_served_model_name") or ""), data.get("podkit_api_key_file")
        replicas.append(
            Replica(
                name=name,
                way=way,
                served_model_name=served,
                hop_port=port,
                ca=paths.replica_ca(name) if internal else None,
                key_file=key_file,
            )
        )
    return replicas


def router_problems(settings: Settings, group: str, replicas: list[Replica], found: bool) -> list[str]:
    """Why this router cannot converge, each with its fix: said before anything is changed."""
    if not found:
        return [
            f"podkit_router_group names {group!r}, which is not a group of this inventory: name the group "
            "whose hosts are the replicas (a Python inventory's list name, or a group_data file's)"
        ]
    if not replicas:
        return [f"the group {group!r} has no hosts: add the replicas to it"]
    problems = []
    unnamed = [r.name for r in replicas if r.served_model_name == ""]
    if unnamed:
        problems.append(f"replica {', '.join(unnamed)} has no served model name: check its host data")
    other_keys = [r.name for r in replicas if r.key_file is not None and r.key_file != settings.api_key_file]
    if other_keys:
        problems.append(
            f"replica {', '.join(other_keys)} uses another API key file than the router ({settings.api_key_file}): "
            "the router passes each client's key through to the replicas, so the router and its replicas need "
            "one key; give them the same podkit_api_key_file"
        )
    names = sorted({r.served_model_name for r in replicas if r.served_model_name})
    if len(names) > 1:
        problems.append(
            f"the replicas of {group!r} serve different names ({', '.join(names)}): one endpoint serves one "
            "model; give them the same vllm_served_model_name"
        )
    elif names and names[0] != settings.served_model_name:
        problems.append(
            f"the router serves {settings.served_model_name!r} but its replicas serve {names[0]!r}: set "
            f"vllm_served_model_name = {names[0]!r} for the router (clients name it in each request)"
        )
    if settings.supervisor != "supervisord":
        problems.append(
            "a router host runs under supervisord only (podkit_supervisor = 'systemd' is for servers): set "
            "podkit_supervisor = 'supervisord' for the router"
        )
    return problems


def self_problems(name: str, way: WayIn, group: str, replicas: list[Replica]) -> list[str]:
    """A router host that is one of its own replicas (by inventory name, or by the address clients
    reach it at): its router would replace the vLLM it forwards to and wait for itself."""
    mine = [r.name for r in replicas if r.name == name or r.way.base_url == way.base_url]
    if not mine:
        return []
    return [
        f"the router's group {group!r} holds this host itself ({', '.join(mine)}, reached at {way.base_url}): a "
        "router takes the place of the host's vLLM and would wait for itself; take it out of podkit_router_group, "
        "or run the router on a host of its own"
    ]


def metrics_port(settings: Settings, replicas: list[Replica]) -> int:
    """The router's Prometheus port: the first after vLLM's port and the hops that is not the edge's."""
    port = max([settings.port, *(r.hop_port for r in replicas)]) + 1
    return port + 1 if port == settings.edge_port else port


def router_ports(settings: Settings, replicas: list[Replica]) -> dict[int, str]:
    """The loopback ports a router host uses beside vLLM's and the edge's, each with what it is for."""
    ports = {r.hop_port: f"the edge's hop to replica {r.name}" for r in replicas}
    return {**ports, metrics_port(settings, replicas): "the router's metrics"}


def port_problems(settings: Settings, ports: dict[int, str], held: dict[int, dict[str, Any]]) -> list[str]:
    """A port the router host needs that a process podkit did not start holds: said with who holds it."""
    problems = []
    for port, use in sorted(ports.items()):
        found = held.get(port) or {}
        if found.get("held") and not found.get("podkit"):
            problems.append(
                f"port {port} ({use}) is already in use by a process podkit did not start "
                f"({listener_holder(found)}); "
                f"stop it, or set vllm_port (the router's ports follow it: {settings.port}-{max(ports)})"
            )
    return problems


def router_argv(settings: Settings, replicas: list[Replica], router_bin: str) -> list[str]:
    """The ``vllm-router`` command line: loopback only, one worker URL per replica's edge hop.
    Holds no secret (the router never needs the key: the client's header passes through)."""
    return [
        router_bin,
        "--host",
        "127.0.0.1",
        "--port",
        str(settings.port),
        "--worker-urls",
        *(r.hop_url for r in replicas),
        "--policy",
        settings.router_policy,
        "--health-check-endpoint",
        "/health",
        "--health-check-interval-secs",
        str(HEALTH_INTERVAL_SECONDS),
        "--health-failure-threshold",
        str(HEALTH_FAILURES),
        "--health-success-threshold",
        "1",
        "--worker-startup-timeout-secs",
        str(WORKER_STARTUP_SECONDS),
        "--cb-failure-threshold",
        str(CIRCUIT_FAILURES),
        "--cb-timeout-duration-secs",
        str(CIRCUIT_OPEN_SECONDS),
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port(settings, replicas)),
    ]
