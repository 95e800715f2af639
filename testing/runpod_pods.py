"""RunPod's objects as REST v2 answers them (``Pod``, ``GpuType``, ``NetworkVolume``), for the replay
(``testing/runpod_api.py``) and the tests: each made whole, every field the document requires
(``tests/fixtures/runpod/openapi-v2-subset.json``), and changed the way RunPod changes it.
"""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
#: The data center the stand-in pods and their volumes are in.
DATA_CENTER = "US-TX-3"


def now_text(epoch: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if epoch is None else epoch))


def actions_for(status: str) -> list[str]:
    """What the document says each status allows (``POST /v2/pods/{id}/action``)."""
    return {
        "RUNNING": ["stop", "restart", "terminate"],
        "EXITED": ["start", "terminate"],
        "ERROR": ["start", "terminate"],
        "PROVISIONING": ["stop", "terminate"],
        "STARTING": ["stop", "terminate"],
    }.get(status, [])


def pod(
    pod_id: str,
    name: str,
    ip: str | None,
    ssh_port: int | None,
    volume_path: str = "/workspace",
    served_port: int = 8000,
    cost: float = 0.79,
    gpu: str = "NVIDIA RTX A6000",
    gpu_count: int = 1,
    uptime: int = 36000,
    network_volume: str | None = None,
    data_center: str = DATA_CENTER,
    env: dict[str, str] | None = None,
    image: str = IMAGE,
) -> dict[str, Any]:
    """A running v2 ``Pod`` with 22/tcp and ``served_port``/tcp on a public IP (the served port mapped
    to itself), its volume a network volume (``network_volume``) or its own disk. Its ``env`` holds a
    token made now, which must never be printed."""
    mounts: dict[str, Any] = (
        {"network": [{"volumeId": network_volume, "path": str(volume_path)}]}
        if network_volume
        else {"persistent": {"size": 100, "path": str(volume_path)}}
    )
    made = {
        "id": pod_id,
        "name": name,
        "image": image,
        "args": "",
        "disk": 50,
        "ports": [f"{served_port}/tcp", "22/tcp"],
        "env": {"HF_TOKEN": f"hf_{secrets.token_urlsafe(24)}", **(env or {})},
        "registry": None,
        "status": "RUNNING",
        "actions": actions_for("RUNNING"),
        "mounts": mounts,
        "gpu": {"id": gpu, "count": gpu_count},
        "cloud": "SECURE",
        "dataCenterId": data_center,
        "cudaVersion": "12.8",
        "ssh": {
            "proxy": {
                "host": "ssh.runpod.io",
                "port": 22,
                "username": f"{pod_id}-64411eb2",
                "command": f"ssh {pod_id}-64411eb2@ssh.runpod.io",
            },
            "direct": None,
        },
        "template": None,
        "cost": cost,
        "locked": False,
        "globalNetworking": {"enabled": False},
        "runtime": None,
        "createdAt": now_text(time.time() - uptime - 60),
        "startedAt": None,
    }
    if ip is not None and ssh_port is not None:
        running(made, ip, ssh_port, served_port, uptime)
    else:
        made.update(status="EXITED", actions=actions_for("EXITED"), cost=0.0)
    return made


def running(pod: dict[str, Any], ip: str, ssh_port: int, served_port: int | None = None, uptime: int = 0) -> None:
    """The pod runs now at ``ip``, its 22/tcp on ``ssh_port`` (and the served port mapped to itself)."""
    served = served_port or next((int(p.split("/")[0]) for p in pod["ports"] if not p.startswith("22/")), 8000)
    pod.update(status="RUNNING", actions=actions_for("RUNNING"), startedAt=now_text(time.time() - uptime))
    pod["ssh"]["direct"] = {"host": ip, "port": ssh_port, "username": "root", "command": f"ssh root@{ip} -p {ssh_port}"}
    pod["runtime"] = {
        "uptime": uptime,
        "gpus": [{"util": 0, "memoryUtil": 0} for _ in range(pod.get("gpu", {}).get("count", 0))],
        "cpu": {"util": 3},
        "memory": {"util": 12},
        "ports": [
            {"private": 22, "public": ssh_port, "type": "tcp", "ip": ip},
            {"private": served, "public": served, "type": "tcp", "ip": ip},
        ],
    }
    pod["cost"] = pod["_cost"] if "_cost" in pod else pod.get("cost", 0.79)
    pod["_last"] = copy.deepcopy(pod["runtime"])  # where a start puts it back when no hook says otherwise


def stopped(pod: dict[str, Any]) -> None:
    """What a stop leaves: EXITED, no runtime, no direct SSH, nothing billed but the volume."""
    if pod.get("cost"):
        pod["_cost"] = pod["cost"]
    pod.update(status="EXITED", actions=actions_for("EXITED"), runtime=None, cost=0.0)
    pod["ssh"]["direct"] = None


def public(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API shows it (the replay's own bookkeeping left out)."""
    return {key: value for key, value in pod.items() if not key.startswith("_")}


def gpu_type(
    gpu_id: str,
    name: str,
    memory: int,
    price: float,
    stock: dict[str, str] | None = None,
    max_count: int = 8,
) -> dict[str, Any]:
    """A catalog entry (``GpuType``) with its stock per data center (``{dc: HIGH|MEDIUM|LOW|NONE}``),
    kept apart as ``_stock`` and answered per query by the replay."""
    return {
        "id": gpu_id,
        "name": name,
        "pool": None,
        "manufacturer": "NVIDIA",
        "memory": memory,
        "secure": True,
        "community": True,
        "price": {"secure": price, "community": round(price * 0.7, 2)},
        "maxCount": {"secure": max_count, "community": max_count},
        "_stock": dict(stock or {DATA_CENTER: "HIGH"}),
    }


def catalog_answer(gpu: dict[str, Any], count: int) -> dict[str, Any]:
    """One ``GpuType`` as ``GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&count=N`` answers it."""
    answer = public(gpu)
    levels = ["NONE", "LOW", "MEDIUM", "HIGH"]
    fits = count <= gpu["maxCount"]["secure"]
    centers = [(dc, level) for dc, level in gpu["_stock"].items() if fits and level != "NONE"]
    answer["availability"] = max((level for _, level in centers), key=levels.index, default="NONE")
    if centers:
        answer["dataCenters"] = [{"id": dc, "name": dc.replace("-", " "), "availability": lv} for dc, lv in centers]
    return answer


def network_volume(volume_id: str, size: int = 100, data_center: str = DATA_CENTER, name: str = "podkit") -> dict:
    return {"id": volume_id, "name": name, "size": size, "dataCenter": data_center, "type": "STANDARD"}
