"""The way in to each host: where a client reaches its edge, how (plain HTTP or TLS), with which CA.

One rule for every front end (``verify``, ``bench``, ``eval``, ``client``) and for the deploy's
Caddyfile, from the host data the deploy saw:

1. ``podkit_endpoint_url`` when the inventory or group_data sets it (a proxy or
   tunnel of the user's own: plain HTTP to the edge unless ``podkit_tls`` says);
2. a RunPod pod (host data from ``inventories/runpod.py``): the public IP and
   mapped port when the edge's port is exposed as TCP (direct: TLS), else
   RunPod's HTTPS proxy ``https://{pod id}-{port}.proxy.runpod.net`` (plain HTTP
   from the proxy to the edge; Cloudflare cuts a request that sends nothing for
   about 100 s there: stream long answers);
3. otherwise the SSH address and the edge's port: direct (TLS), or loopback
   (the sandbox: plain HTTP, nothing leaves the machine).

``podkit_tls = "auto"`` is TLS from Caddy's internal CA exactly for the direct
ways; ``podkit_domain`` makes it an ACME certificate for that name instead.

What the deploy leaves on the controller for clients lives here too: each host's edge CA
(pinned over SSH) and its rank in a cluster (clients skip followers, which serve no API).
The deploy, ``podkit.host`` and ``podkit.client`` all read it; it imports nothing above
``podkit``'s own root.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podkit import state_dir

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
RUNPOD_PROXY_NOTE = (
    "through RunPod's HTTPS proxy (Cloudflare), which cuts a request that sends nothing for about 100 s: "
    "stream long answers, or use the pod's TCP port or podkit tunnel"
)


def proxy_url(pod_id: str, port: int) -> str:
    """RunPod's HTTP proxy address for ``port`` of pod ``pod_id``."""
    return f"https://{pod_id}-{port}.proxy.runpod.net"


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def host_address(value: str) -> str | None:
    """``value`` when it is an IP address or a DNS name (what a certificate and a Caddyfile can
    name), else None."""
    text = str(value).strip()
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return text if _HOSTNAME.fullmatch(text) else None


@dataclass(frozen=True)
class WayIn:
    """How a client reaches one host's edge.

    kind: ``custom`` (podkit_endpoint_url), ``runpod-proxy``, ``direct`` or ``loopback``;
    address/port: where a direct or loopback client connects (None for the other kinds);
    tls: ``internal``, ``acme`` or ``off``, as the edge serves it."""

    kind: str
    tls: str
    base_url: str  # no /v1
    address: str | None = None
    port: int | None = None

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def note(self) -> str | None:
        return RUNPOD_PROXY_NOTE if self.kind == "runpod-proxy" else None


def way_in(name: str, data: dict[str, Any], port: int | None = None) -> WayIn:
    """The way in to host ``name`` whose edge listens on ``port`` (default: its ``podkit_edge_port``)."""
    port = int(port or data.get("podkit_edge_port") or 8000)
    tls_setting = data.get("podkit_tls") or "auto"
    domain = data.get("podkit_domain")
    if data.get("podkit_endpoint_url"):
        tls = "acme" if domain else ("internal" if tls_setting == "internal" else "off")
        return WayIn("custom", tls, str(data["podkit_endpoint_url"]).rstrip("/"))
    pod_id = data.get("runpod_pod_id")
    if pod_id:
        mapped = (data.get("runpod_tcp_ports") or {}).get(str(port))
        if mapped and data.get("runpod_public_ip"):
            kind, address, client_port = "direct", str(data["runpod_public_ip"]), int(mapped)
        else:
            tls = "acme" if domain else ("internal" if tls_setting == "internal" else "off")
            return WayIn("runpod-proxy", "off" if tls == "internal" else tls, proxy_url(pod_id, port))
    else:
        address = str(data.get("ssh_hostname") or name)
        kind = "loopback" if is_loopback(address) else "direct"
        client_port = port
    if domain:
        tls, address = "acme", domain
    elif tls_setting == "auto":
        tls = "internal" if kind == "direct" else "off"
    else:
        tls = tls_setting
    scheme = "https" if tls != "off" else "http"
    shown = f"[{address}]" if ":" in address else address
    return WayIn(kind, tls, f"{scheme}://{shown}:{client_port}", address, client_port)


def endpoint_url(name: str, data: dict[str, Any], port: int | None = None) -> str:
    """The base URL (no ``/v1``) a client uses for host ``name``."""
    return way_in(name, data, port).base_url


def ca_path(name: str) -> Path:
    """Where the controller keeps host ``name``'s edge CA root certificate (internal TLS)."""
    return state_dir() / "ca" / f"{name}.crt"


def pin_ca(name: str, pem: str) -> Path:
    """Keep host ``name``'s edge CA root certificate (public; read over the pinned SSH connection)
    where every podkit client command looks for it; rewritten only when it changed."""
    path = ca_path(name)
    text = pem.strip() + "\n"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def role_path(name: str) -> Path:
    """Where the controller keeps host ``name``'s place in a cluster, as its last deploy found it."""
    return state_dir() / "cluster" / f"{name}.json"


def record_role(name: str, cluster: str | None, rank: int | None) -> None:
    """Keep (or, outside a cluster, forget) host ``name``'s rank: on RunPod it comes from the pod's
    ``NODE_RANK``, which only the deploy reads, and client commands must skip followers."""
    path = role_path(name)
    if cluster is None or rank is None:
        path.unlink(missing_ok=True)
        return
    text = json.dumps({"cluster": cluster, "rank": rank}) + "\n"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def cluster_rank(name: str, cluster: str | None, rank: int | None) -> int | None:
    """Host ``name``'s rank in ``cluster``: the data's, else what its last deploy recorded."""
    if cluster is None or rank is not None:
        return rank
    try:
        recorded = json.loads(role_path(name).read_text())
    except (OSError, ValueError):
        return None
    return recorded.get("rank") if isinstance(recorded, dict) and recorded.get("cluster") == cluster else None
