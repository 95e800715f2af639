"""The request for a new pod (v2's ``CreatePodRequest``): one created from the plan (``podkit
create``), or one that takes over a pod whose GPU is gone (the move).

A pod can move only when its volume is a network volume: a network volume outlives its pod and a
new pod in the same data center can mount it; a pod's own volume disk (``mounts.persistent``) is
tied to its machine. The new pod gets the old one's image, arguments, container disk, ports and env
(its ``PODKIT_DATA`` among them) and a GPU of the same type unless told otherwise; its name is the
old one's, so once the old pod is terminated the inventory calls it what it called the old one.
"""

from __future__ import annotations

import json
from typing import Any

from podkit.runpod.pods import DATA_ENV, Pod

#: The image ``podkit create`` starts from: RunPod's own, which starts sshd with the account's keys
#: (startSsh) and has the Python podkit's programs need on the host.
IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
#: The container disk (GB): the image and what the container writes outside the volume.
CONTAINER_DISK_GB = 30
VOLUME_PATH = "/workspace"


def cannot_move(pod: Pod, name: str) -> str | None:
    """Why ``pod`` cannot move to another machine (None: it can), with what to do next time."""
    if pod.network_volume:
        if not pod.data_center:
            return f"pod {name} ({pod.id}): RunPod does not say which data center it is in: look at it in the console"
        return None
    kept = f" ({pod.persistent_gb} GB)" if pod.persistent_gb else ""
    return (
        f"pod {name} ({pod.id}) keeps its volume on its own disk{kept}, which stays with its machine: it cannot "
        "move to another one. Wait for its GPU (podkit up again later), or next time create the pod on a network "
        "volume (podkit create does), which any new pod in the same data center can mount"
    )


def move_request(pod: Pod, gpu_id: str, gpu_count: int) -> dict[str, Any]:
    """A new pod like ``pod`` on the same network volume and data center, with ``gpu_count`` of ``gpu_id``."""
    raw = pod.raw
    body: dict[str, Any] = {
        "name": pod.name,
        "image": raw.get("image") or IMAGE,
        "gpu": {"id": gpu_id, "count": gpu_count},
        "cloud": pod.cloud or "SECURE",
        "dataCenterIds": [pod.data_center],
        "mounts": {"network": [{"volumeId": pod.network_volume, "path": pod.volume_path or VOLUME_PATH}]},
        "startSsh": True,
    }
    if isinstance(raw.get("args"), str) and raw["args"]:
        body["args"] = raw["args"]
    if isinstance(raw.get("disk"), int) and raw["disk"] >= 1:
        body["disk"] = raw["disk"]
    if isinstance(raw.get("ports"), list):
        body["ports"] = [p for p in raw["ports"] if isinstance(p, str)]
    if isinstance(raw.get("env"), dict):
        body["env"] = {k: v for k, v in raw["env"].items() if isinstance(k, str) and isinstance(v, str)}
    if isinstance(raw.get("registry"), str):
        body["registry"] = raw["registry"]
    return body


def create_request(
    name: str,
    gpu_id: str,
    gpu_count: int,
    cloud: str,
    data_center: str,
    volume_id: str,
    edge_port: int,
    data: dict[str, Any],
    image: str = IMAGE,
    volume_path: str = VOLUME_PATH,
) -> dict[str, Any]:
    """A new pod for the plan's choice: SSH (22/tcp, the account's keys) and the edge's port exposed,
    the network volume where the settings keep the volume (``podkit_volume``, /workspace by default),
    and the settings it was created for in its env."""
    return {
        "name": name,
        "image": image,
        "gpu": {"id": gpu_id, "count": gpu_count},
        "cloud": cloud,
        "dataCenterIds": [data_center],
        "disk": CONTAINER_DISK_GB,
        "ports": ["22/tcp", f"{edge_port}/tcp"],
        "mounts": {"network": [{"volumeId": volume_id, "path": volume_path}]},
        "env": {DATA_ENV: json.dumps(data, sort_keys=True)},
        "startSsh": True,
    }
