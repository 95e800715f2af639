"""A cluster's node: RunPod's Instant Cluster variables, the node's addresses, and its way to the head."""

import fcntl
import os
import socket
import struct

# What a RunPod Instant Cluster sets on each node (PID 1's environment; an SSH session may lack it).
CLUSTER_ENV = ("PRIMARY_ADDR", "NODE_RANK", "NUM_NODES", "NODE_ADDR", "WORLD_SIZE")


def container_env(names):
    """``names`` as the session has them, else as PID 1 (the container's init) has them."""
    found = {name: os.environ[name] for name in names if os.environ.get(name)}
    try:
        with open("/proc/1/environ", "rb") as handle:
            pairs = handle.read().split(b"\0")
    except OSError:
        return found
    for pair in pairs:
        name, _, value = pair.decode(errors="replace").partition("=")
        if name in names and value and name not in found:
            found[name] = value
    return found


def interface_addresses():
    """{interface: [address, ...]}: IPv4 from the kernel (SIOCGIFADDR), IPv6 from /proc/net/if_inet6."""
    found = {}  # type: dict[str, list[str]]
    probe_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe_socket.fileno(), 0x8915, name.encode()[:15].ljust(40, b"\0"))
            except OSError:  # no IPv4 address on it
                continue
            found.setdefault(name, []).append(socket.inet_ntoa(raw[20:24]))
    finally:
        probe_socket.close()
    try:
        with open("/proc/net/if_inet6") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) == 6 and not fields[0].startswith("fe80"):
                    packed = bytes.fromhex(fields[0])
                    found.setdefault(fields[5], []).append(socket.inet_ntop(socket.AF_INET6, packed))
    except OSError:
        pass
    return found


def ipv4_gateway(address):
    """The gateway the kernel's main IPv4 table sends ``address`` through (longest prefix wins), or
    None when it is on a link of this host; "" when no route matches."""
    try:
        target = struct.unpack("<I", socket.inet_aton(address))[0]
        with open("/proc/net/route") as handle:
            lines = handle.read().splitlines()[1:]
    except (OSError, ValueError):
        return None
    best = None
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        destination, gateway, flags, mask = (int(fields[i], 16) for i in (1, 2, 3, 7))
        if flags & 1 and target & mask == destination and (best is None or mask > best[0]):
            best = (mask, gateway if flags & 2 else None)
    if best is None:
        return ""
    return socket.inet_ntoa(struct.pack("<I", best[1])) if best[1] else None


def cluster_facts(cfg):
    """How this node reaches its cluster's head: the Instant Cluster variables, the head's address
    (the deploy's, else PRIMARY_ADDR), the local address and interface the kernel would use to reach
    it (UDP connect: nothing is sent), whether that goes through a gateway, and the node's addresses."""
    env = container_env(CLUSTER_ENV)
    head = cfg.get("head") or env.get("PRIMARY_ADDR")
    addresses = interface_addresses()
    found = {"env": env, "head": head, "addresses": addresses, "address": None, "interface": None, "error": None}
    if not head:
        return found
    family = socket.AF_INET6 if ":" in head else socket.AF_INET
    route = socket.socket(family, socket.SOCK_DGRAM)
    try:
        route.connect((head, int(cfg.get("port") or 9)))
        found["address"] = route.getsockname()[0]
    except OSError as exc:
        found["error"] = exc.strerror or str(exc)
        return found
    finally:
        route.close()
    found["interface"] = next((name for name, held in addresses.items() if found["address"] in held), None)
    found["local"] = any(head in held for held in addresses.values())
    if family == socket.AF_INET and not found["local"]:
        found["gateway"] = ipv4_gateway(head)
    return found
