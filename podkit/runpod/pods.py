"""RunPod pods as SSH hosts: which pods to deploy to, and how to reach them.

``inventories/runpod.py`` lists the user's pods through RunPod's REST API v2
(:mod:`podkit.runpod.api`), reads each one as a :class:`Pod` and turns it into a pyinfra host
(:func:`pod_host`). A pod is reached over "full SSH": ``ssh.direct``, the public IP and the port
mapped to its ``22/tcp`` (never ``ssh.proxy``, the ``ssh.runpod.io`` gateway, which has no SFTP
and runs no commands). The address is read from the API on every run: a stopped and started or
moved pod comes back elsewhere.

A pod that cannot be deployed to (stopped, starting, no public SSH port, back without its GPU)
becomes a :class:`Skipped` with a one-line reason. The pod's ``env`` may hold tokens: nothing
here reads it but ``PODKIT_DATA`` (the settings ``podkit create`` gave the pod), and nothing
prints it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from podkit.settings import KEYS
from podkit.text import clean

#: RunPod's pod statuses (v2's ``PodStatus``), named once: what podkit calls each.
STATES = {
    "PROVISIONING": "starting",
    "STARTING": "starting",
    "RUNNING": "running",
    "EXITED": "stopped",
    "ERROR": "error",
    "TERMINATED": "terminated",
}
#: The pod env variable that carries podkit settings for that pod (JSON object), as `podkit create` sets it.
DATA_ENV = "PODKIT_DATA"
#: RunPod's proxy range: an address here is not the pod's public IP.
PROXY_RANGE = ipaddress.ip_network("100.64.0.0/10")


@dataclass
class Pod:
    """One v2 ``Pod``, read defensively: a field of the wrong type reads as absent."""

    id: str
    name: str
    status: str  # RunPod's own (RUNNING, EXITED, ...); "UNKNOWN" when the answer has none
    gpu_id: str | None = None
    gpu_count: int = 0
    #: GPUs the running container reports (runtime.gpus); None when the answer does not say
    gpus_seen: int | None = None
    cpu: bool = False
    cost: float | None = None  # USD an hour now (0 while EXITED)
    uptime: float | None = None  # seconds since the container started
    started_at: str | None = None  # RFC 3339; changes at every start
    ssh: tuple[str, int, str] | None = None  # ssh.direct: host, port, user
    ports: dict[str, tuple[str, int]] = field(default_factory=dict)  # private tcp port -> (public ip, port)
    volume_path: str | None = None
    network_volume: str | None = None  # mounts.network[0].volumeId
    persistent_gb: int | None = None  # mounts.persistent.size: the pod's own volume disk
    data_center: str | None = None
    cloud: str | None = None
    actions: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def state(self) -> str:
        """starting, running, stopped, error, terminated, or unknown."""
        return STATES.get(self.status, "unknown")

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def lost_gpu(self) -> bool:
        """A GPU pod that runs without the GPUs it was created with (taken while it was stopped)."""
        if self.cpu or not self.running:
            return False
        return self.gpu_count < 1 or (self.gpus_seen is not None and self.gpus_seen < self.gpu_count)

    @property
    def started_epoch(self) -> float | None:
        return _epoch(self.started_at)

    @classmethod
    def of(cls, pod: dict[str, Any], now: float | None = None) -> Pod:
        gpu = _dict(pod.get("gpu"))
        runtime = _dict(pod.get("runtime"))
        mounts = _dict(pod.get("mounts"))
        network = (
            [m for m in (mounts.get("network") or []) if isinstance(m, dict)]
            if isinstance(mounts.get("network"), list)
            else []
        )
        persistent = _dict(mounts.get("persistent"))
        direct = _dict(_dict(pod.get("ssh")).get("direct"))
        ssh = None
        if isinstance(direct.get("host"), str) and _port(direct.get("port")):
            ssh = (direct["host"], _port(direct.get("port")) or 22, _text(direct.get("username")) or "root")
        ports: dict[str, tuple[str, int]] = {}
        for port in runtime.get("ports") or [] if isinstance(runtime.get("ports"), list) else []:
            if not isinstance(port, dict) or port.get("type") != "tcp":
                continue
            private, public, ip = _port(port.get("private")), _port(port.get("public")), port.get("ip")
            if private and public and isinstance(ip, str) and _public(ip):
                ports[str(private)] = (ip, public)
        gpus = runtime.get("gpus")
        actions = pod.get("actions")
        return cls(
            id=_text(pod.get("id")) or "?",
            name=_text(pod.get("name")) or _text(pod.get("id")) or "?",
            status=_text(pod.get("status")) or "UNKNOWN",
            gpu_id=_text(gpu.get("id")),
            gpu_count=_count(gpu.get("count", 1 if gpu else 0)),
            gpus_seen=len(gpus) if isinstance(gpus, list) else None,
            cpu=isinstance(pod.get("cpu"), dict),
            cost=_number(pod.get("cost")),
            uptime=_number(runtime.get("uptime")),
            started_at=_text(pod.get("startedAt")),
            ssh=ssh,
            ports=ports,
            volume_path=_text((network[0] if network else persistent).get("path")),
            network_volume=_text(network[0].get("volumeId")) if network else None,
            persistent_gb=_count(persistent.get("size")) if persistent else None,
            data_center=_text(pod.get("dataCenterId")),
            cloud=_text(pod.get("cloud")),
            actions=tuple(a for a in actions if isinstance(a, str)) if isinstance(actions, list) else (),
            raw=pod,
        )

    def ssh_address(self) -> tuple[str, int, str] | None:
        """``ssh.direct``, else the runtime's public mapping of 22/tcp (never the proxy gateway)."""
        if self.ssh is not None:
            return self.ssh
        if "22" in self.ports:
            ip, port = self.ports["22"]
            return ip, port, "root"
        return None

    def data(self) -> tuple[dict[str, Any], str | None]:
        """The settings in the pod's ``PODKIT_DATA`` (a JSON object), and why it was refused, if it was."""
        env = self.raw.get("env")
        text = env.get(DATA_ENV) if isinstance(env, dict) else None
        if text is None:
            return {}, None
        try:
            data = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            return {}, f"its env {DATA_ENV} is not a JSON object of settings: fix it in the pod's settings"
        return data, None


@dataclass
class PodHost:
    """One pod as a pyinfra inventory entry: ``(name, data)``."""

    name: str
    pod_id: str
    data: dict[str, Any] = field(default_factory=dict)
    #: when the pod's container last started (epoch seconds)
    started_at: float | None = None
    #: RunPod's startedAt: it changes at every start
    status_change: str | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.data["ssh_hostname"], self.data["ssh_port"]


@dataclass
class Skipped:
    """A selected pod that is left out of this run, and why (one line, no secrets)."""

    name: str
    pod_id: str
    reason: str

    def line(self) -> str:
        return clean(f"pod {self.name} ({self.pod_id}): {self.reason}")


def pod_host(
    pod: Pod,
    name: str | None = None,
    allow_no_gpu: bool = False,
    now: float | None = None,
    inventory: str = "INVENTORY",
) -> PodHost | Skipped:
    """The SSH host for a pod, or why it is left out. A pod's ``PODKIT_DATA`` may set podkit's
    settings alone (never SSH's or the inventory's own data). RunPod's HTTP proxy address is not
    stored: the endpoint rule makes it from the pod id and the served port (``podkit.wayin``)."""
    name = name or pod.name
    if pod.state == "stopped":
        return Skipped(name, pod.id, f"is stopped (EXITED): start it with podkit up {inventory} --host {name}")
    if pod.state == "starting" or (pod.running and not pod.raw.get("runtime") and pod.ssh is None):
        return Skipped(name, pod.id, f"is starting (RunPod says {pod.status}): re-run in a minute")
    if not pod.running:
        return Skipped(name, pod.id, f"is {pod.state} (RunPod says {pod.status}): look at it in RunPod's console")
    if pod.lost_gpu and not allow_no_gpu:
        return Skipped(
            name,
            pod.id,
            "runs without its GPU (the GPU was taken while it was stopped): move it to a new pod on the "
            f"same network volume with podkit up {inventory} --host {name} --move",
        )
    address = pod.ssh_address()
    if address is None:
        return Skipped(
            name,
            pod.id,
            "has no public SSH address (ssh.direct is null): expose 22/tcp on a public IP in the pod's settings "
            "(the ssh.runpod.io gateway cannot run commands)",
        )
    pod_data, refused = pod.data()
    unknown = sorted(set(pod_data) - set(KEYS))
    if refused or unknown:
        return Skipped(name, pod.id, refused or f"its env {DATA_ENV} names unknown settings {unknown}: fix them")
    host, port, user = address
    data: dict[str, Any] = {
        **pod_data,
        "ssh_hostname": host,
        "ssh_port": port,
        "ssh_user": user,
        "runpod_pod_id": pod.id,
        "runpod_gpu_name": pod.gpu_id,
        "runpod_gpu_count": pod.gpu_count,
        "runpod_cost_per_hr": pod.cost,
        "runpod_public_ip": host,
        "runpod_tcp_ports": {private: public for private, (_, public) in pod.ports.items()},
    }
    if pod.volume_path:
        data["podkit_volume"] = pod.volume_path
    started = pod.started_epoch
    if started is None and pod.uptime is not None:
        started = (time.time() if now is None else now) - pod.uptime
    return PodHost(name, pod.id, data, started, pod.started_at)


#: The inventory's settings mode (``PODKIT_POD_SETTINGS``): ``all`` lists every selected pod, whatever
#: its state, ``new:NAME`` one pod that does not exist yet; with the data settings come from and
#: nothing to connect to (``podkit create`` and ``podkit up --move`` plan with the settings a pod has).
SETTINGS_ENV = "PODKIT_POD_SETTINGS"


def settings_hosts(pods: Iterable[dict[str, Any]], select: Callable[[dict[str, Any]], bool], mode: str) -> list:
    """The inventory's hosts in settings mode: ``(name, data)`` with the pod's own settings
    (``PODKIT_DATA``) and its volume path, never an address; a pod whose data is refused is left out."""
    if mode.startswith("new:"):
        return [(_host_name(mode[4:]) or "new-pod", {})]
    entries = []
    for name, pod in selected(pods, select):
        data, refused = pod.data()
        if refused is None and not set(data) - set(KEYS):
            entries.append((name, {**data, **({"podkit_volume": pod.volume_path} if pod.volume_path else {})}))
    return entries


def by_prefix(prefix: str) -> Callable[[dict[str, Any]], bool]:
    """A pod filter: pods whose name starts with ``prefix`` (every pod for "")."""
    return lambda pod: str(pod.get("name") or "").startswith(prefix)


def selected(pods: Iterable[dict[str, Any]], select: Callable[[dict[str, Any]], bool]) -> list[tuple[str, Pod]]:
    """The selected pods, whatever their state (a terminated one aside), each with its host name:
    the pod's name, made unique with the pod id where two pods share a name (as during a move)."""
    chosen = [Pod.of(pod) for pod in pods if isinstance(pod, dict) and select(pod)]
    chosen = [pod for pod in chosen if pod.state != "terminated"]
    names = [pod.name for pod in chosen]
    return [(_host_name(pod.name if names.count(pod.name) == 1 else f"{pod.name}-{pod.id}"), pod) for pod in chosen]


def hosts_for(
    pods: Iterable[dict[str, Any]],
    select: Callable[[dict[str, Any]], bool],
    allow_no_gpu: bool = False,
    inventory: str = "INVENTORY",
) -> tuple[list[PodHost], list[Skipped]]:
    """The selected pods as hosts, and the selected pods left out (named as :func:`selected`)."""
    hosts: list[PodHost] = []
    skipped: list[Skipped] = []
    for name, pod in selected(pods, select):
        entry = pod_host(pod, name, allow_no_gpu, inventory=inventory)
        (hosts if isinstance(entry, PodHost) else skipped).append(entry)  # type: ignore[arg-type]
    return hosts, skipped


def status_of(pod: Pod) -> dict[str, Any]:
    """What ``podkit status`` reads of a pod (``podkit.client.status``), in plain values."""
    return {
        "id": pod.id,
        "state": pod.state,
        "runpod_status": pod.status,
        "usd_per_hour": pod.cost,
        "uptime_seconds": pod.uptime,
        "started_at": pod.started_at,
        "lost_gpu": pod.lost_gpu,
        "has_runtime": pod.ssh_address() is not None,
    }


def _host_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", str(name))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) < 1e12 else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1000 else 0


def _port(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536 else None


def _public(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip) not in PROXY_RANGE
    except ValueError:
        return False


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
