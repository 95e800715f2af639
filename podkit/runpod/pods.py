"""RunPod pods as SSH hosts: which pods to deploy to, and how to reach them.

``inventories/runpod.py`` lists the user's pods through the ``runpod`` package
(:func:`list_pods`) and turns each one into a pyinfra host (:func:`pod_host`).
A pod is reached over "full SSH": the public IP and the public port mapped to
its ``22/tcp`` (never the ``ssh.runpod.io`` gateway, which has no SFTP and
refuses non-interactive commands). IP and port are read from the API on
every run: a stopped and restarted or migrated pod comes back elsewhere.

A pod that cannot be deployed to (stopped, no public SSH port, back with zero
GPUs) becomes a :class:`Skipped` with a one-line reason. The pod's ``env``
may hold tokens: nothing here reads, keeps or prints it.
"""

from __future__ import annotations

import re
import sys
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

API_URL = "https://api.runpod.io"


class PodsError(RuntimeError):
    """The pod list could not be read; the message says what to fix."""


@dataclass
class PodHost:
    """One pod as a pyinfra inventory entry: ``(name, data)``."""

    name: str
    pod_id: str
    data: dict[str, Any] = field(default_factory=dict)
    #: when the pod's container last started (epoch seconds, from the API's uptimeSeconds)
    started_at: float | None = None
    #: the API's lastStatusChange ("Rented by User: <date>"): it changes at every stop and start
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
        return f"pod {self.name} ({self.pod_id}): {self.reason}"


def public_tcp_ports(pod: dict[str, Any]) -> tuple[str | None, dict[str, int]]:
    """The pod's public IP and its public TCP ports, as ``{private port: public port}``."""
    ip = None
    ports: dict[str, int] = {}
    for port in (pod.get("runtime") or {}).get("ports") or []:
        if port.get("isIpPublic") and port.get("type") == "tcp" and port.get("publicPort"):
            ports[str(port["privatePort"])] = int(port["publicPort"])
            ip = ip or port.get("ip")
    return ip, ports


def pod_host(
    pod: dict[str, Any],
    name: str | None = None,
    allow_no_gpu: bool = False,
    now: float | None = None,
) -> PodHost | Skipped:
    """The SSH host for a RunPod pod (a ``get_pods()`` entry), or why it is left out.
    ``now`` (epoch seconds, default the clock) dates the container's start from ``uptimeSeconds``.
    RunPod's HTTP proxy address is not stored: the endpoint rule makes it from the pod id and
    the served port (``podkit.wayin``), so it follows ``vllm_port``."""
    pod_id = str(pod.get("id") or "?")
    name = name or pod.get("name") or pod_id
    status = pod.get("desiredStatus")
    if status != "RUNNING":
        return Skipped(
            name, pod_id, f"is {str(status).lower()}, not running: start it (runpodctl start pod {pod_id}) and re-run"
        )
    if not pod.get("runtime"):
        return Skipped(name, pod_id, "is starting (no runtime yet): re-run in a minute")
    if not pod.get("gpuCount") and not allow_no_gpu:
        return Skipped(
            name,
            pod_id,
            (
                "came back with zero GPUs (its GPU was taken while it was stopped): "
                "migrate it to a new pod with the same volume, or wait and restart it"
            ),
        )
    ip, ports = public_tcp_ports(pod)
    if "22" not in ports or not ip:
        return Skipped(
            name,
            pod_id,
            (
                "has no public SSH port: expose 22/tcp with a public IP in the pod's settings "
                "(the ssh.runpod.io gateway cannot run commands)"
            ),
        )
    data: dict[str, Any] = {
        "ssh_hostname": ip,
        "ssh_port": ports["22"],
        "ssh_user": "root",
        "runpod_pod_id": pod_id,
        "runpod_gpu_name": (pod.get("machine") or {}).get("gpuDisplayName"),
        "runpod_gpu_count": int(pod.get("gpuCount") or 0),
        "runpod_cost_per_hr": pod.get("costPerHr"),
        "runpod_public_ip": ip,
        "runpod_tcp_ports": ports,
    }
    if pod.get("volumeMountPath"):
        data["podkit_volume"] = pod["volumeMountPath"]
    uptime = pod.get("uptimeSeconds")
    started_at = (time.time() if now is None else now) - uptime if isinstance(uptime, (int, float)) else None
    return PodHost(name, pod_id, data, started_at, pod.get("lastStatusChange") or None)


def by_prefix(prefix: str) -> Callable[[dict[str, Any]], bool]:
    """A pod filter: pods whose name starts with ``prefix`` (every pod for "")."""
    return lambda pod: str(pod.get("name") or "").startswith(prefix)


def selected(pods: Iterable[dict[str, Any]], select: Callable[[dict[str, Any]], bool]) -> list[tuple[str, dict]]:
    """The selected pods, whatever their state, each with its host name: the pod's name, made
    unique with the pod id where two pods share a name."""
    chosen = [pod for pod in pods if select(pod)]
    names = [str(pod.get("name") or pod.get("id")) for pod in chosen]
    return [
        (_host_name(name if names.count(name) == 1 else f"{name}-{pod.get('id')}"), pod)
        for pod, name in zip(chosen, names)
    ]


def hosts_for(
    pods: Iterable[dict[str, Any]],
    select: Callable[[dict[str, Any]], bool],
    allow_no_gpu: bool = False,
) -> tuple[list[PodHost], list[Skipped]]:
    """The selected pods as hosts, and the selected pods left out (named as :func:`selected`)."""
    hosts: list[PodHost] = []
    skipped: list[Skipped] = []
    for name, pod in selected(pods, select):
        entry = pod_host(pod, name, allow_no_gpu)
        if isinstance(entry, PodHost):
            hosts.append(entry)
        else:
            skipped.append(entry)
    return hosts, skipped


def _host_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", str(name))


def _quiet_cpuinfo() -> None:
    """``import runpod`` loads its serverless worker, whose debugger asks py-cpuinfo
    for the CPU's brand at import time: a subprocess that costs about 1.1 s of a
    1.6 s import. Listing pods never uses it, so when nothing has imported
    cpuinfo yet, give that one module a cpuinfo that answers at once."""
    if "cpuinfo" not in sys.modules:
        stub = types.ModuleType("cpuinfo")
        setattr(stub, "get_cpu_info", lambda: {"brand_raw": "unknown (not probed by podkit)"})  # noqa: B010
        sys.modules["cpuinfo"] = stub


def list_pods(api_key: str | None) -> list[dict[str, Any]]:
    """Every pod of the account, through the ``runpod`` package.

    The package does not read ``RUNPOD_API_KEY`` itself: the key is set on it
    here. ``RUNPOD_API_BASE_URL`` (read by the package on each call) points it
    at another endpoint, e.g. a local replay server in tests.
    """
    runpod = _package(api_key)
    from runpod import error as runpod_error

    try:
        return list(runpod.get_pods() or [])
    except runpod_error.AuthenticationError:
        raise PodsError("RunPod refused RUNPOD_API_KEY (401): make a new key under Settings > API Keys") from None
    except runpod_error.QueryError as exc:
        raise PodsError(f"RunPod rejected the pod query: {exc}") from None
    except Exception as exc:  # requests' connection errors, bad JSON: one line, no trace
        raise PodsError(f"cannot list pods from RunPod ({type(exc).__name__}: {str(exc)[:200]})") from None


def _package(api_key: str | None):
    if not api_key:
        raise PodsError("RUNPOD_API_KEY is not set: export your RunPod API key (Settings > API Keys) and re-run")
    _quiet_cpuinfo()
    import runpod

    runpod.api_key = api_key
    return runpod


def stop_pod(api_key: str | None, pod_id: str, name: str) -> str:
    """Stop a pod through the ``runpod`` package (the user's key, on the controller): the GPU is
    released and billing stops; the volume stays. Returns the status RunPod answered."""
    runpod = _package(api_key)
    try:
        answer = runpod.stop_pod(pod_id) or {}
    except Exception as exc:  # AuthenticationError, QueryError, connection errors: one line
        raise PodsError(f"pod {name} ({pod_id}): RunPod did not stop it: {_said(exc)}") from None
    return str(answer.get("desiredStatus") or "EXITED")


# What RunPod answers a resume when the machine's GPUs were rented out while the pod was stopped.
_NO_GPUS = ("not enough free gpus", "no longer any instances available", "no gpus available")


def resume_pod(api_key: str | None, pod_id: str, name: str, gpu_count: int) -> str:
    """Resume a stopped pod with ``gpu_count`` GPUs through the ``runpod`` package. A pod whose
    GPUs were taken while it was stopped cannot come back: said with the fix."""
    runpod = _package(api_key)
    try:
        answer = runpod.resume_pod(pod_id, gpu_count) or {}
    except Exception as exc:
        said = _said(exc)
        if any(marker in said.lower() for marker in _NO_GPUS):
            raise PodsError(
                f"pod {name} ({pod_id}) cannot come back: its machine has no free GPU now ({said}); "
                "wait and run podkit up again, or migrate it: a new pod on the same network volume"
            ) from None
        raise PodsError(f"pod {name} ({pod_id}): RunPod did not resume it: {said}") from None
    return str(answer.get("desiredStatus") or "RUNNING")


def _said(exc: Exception) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
