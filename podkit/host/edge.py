"""The edge's sites: the addresses Caddy serves and binds for a host reached a given way, the names
a certificate can carry, and where a router host's edge forwards each replica's hop.

The Caddyfile gets no datum but numbers, the names checked here to be IP addresses or DNS
names, and the host's name through the ``caddy_text`` filter (letters, digits, ``_.-``).
"""

from __future__ import annotations

from dataclasses import dataclass

from podkit.host.router import Replica
from podkit.settings import Settings
from podkit.wayin import WayIn, host_address


@dataclass(frozen=True)
class EdgeSites:
    """What the Caddyfile serves: its site addresses, the addresses it binds, the name a client
    without SNI gets a certificate for, and the TLS mode (``internal``, ``acme`` or ``off``)."""

    sites: tuple[str, ...]
    bind: tuple[str, ...]
    default_sni: str | None
    tls: str


def edge_problems(way: WayIn) -> list[str]:
    """Why the edge cannot serve a certificate a client would accept at its address (an address
    that is neither an IP address nor a DNS name, e.g. ``my_box``): said before anything changes."""
    if way.tls in ("internal", "acme") and way.address and host_address(way.address) is None:
        return [
            f"clients reach this host as {way.address!r}, which a TLS certificate cannot name (it is neither "
            "an IP address nor a DNS name): set ssh_hostname to its address, or podkit_endpoint_url, or "
            "podkit_tls = 'off' behind a proxy of your own"
        ]
    return []


def edge_sites(settings: Settings, way: WayIn) -> EdgeSites:
    """The edge's sites for a host reached ``way``: plain HTTP on the port for any name when TLS
    is off; with TLS, a certificate for each name a client may use (the way's address, the
    domain, and loopback for ``podkit tunnel`` and the host's own checks)."""
    port = settings.edge_port
    bind = () if settings.public else ("127.0.0.1",)
    if way.tls == "off":
        return EdgeSites((f"http://:{port}",), bind, None, "off")
    names: list[str] = []
    for name in (settings.domain, way.address, "127.0.0.1", "localhost"):
        checked = host_address(name) if name else None
        if checked and checked not in names:
            names.append(checked)
    sites = tuple(f"https://[{n}]:{port}" if ":" in n else f"https://{n}:{port}" for n in names)
    # a client that connects by IP sends no SNI: it gets the certificate of the name it used
    sni = next((n for n in names if n not in ("localhost",)), None)
    return EdgeSites(sites, bind, sni, way.tls)


def hop_upstream(replica: Replica) -> str:
    """Where the router host's edge forwards replica ``replica``'s hop: its base URL, with a host
    that is an IP address or a DNS name (checked, so a datum cannot add a directive)."""
    scheme, _, rest = replica.way.base_url.partition("://")
    authority = rest.split("/", 1)[0]
    if "/" in rest.strip("/"):
        raise ValueError(
            f"replica {replica.name}: its URL {replica.way.base_url} has a path, which the router's edge cannot "
            "forward to: give it a base URL of scheme, host and port"
        )
    host, _, port = authority.rpartition(":") if authority.count(":") == 1 or "]" in authority else (authority, "", "")
    if host_address(host or authority) is None or (port and not port.isdigit()) or scheme not in ("http", "https"):
        raise ValueError(f"replica {replica.name}: {replica.way.base_url} is not an http(s) URL of a host and port")
    return f"{scheme}://{authority}"
