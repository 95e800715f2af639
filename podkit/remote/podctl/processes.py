"""Processes and sockets: the process table, vLLM engines that outlived their server, who listens on
a port; and the verb ``reap``, which stops the engines a probe listed (that very pid and start time).
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time

from podkit.remote.podctl.base import process_argv, read_text, starttime

ENGINE_TITLE = "VLLM::"  # vLLM titles its engine and workers VLLM::EngineCore, VLLM::Worker_TP0, ...


def proc_table():
    """{pid: {...}} of every live process (zombies left out): parent, group, session, start time,
    argv, comm, owner and resident bytes."""
    table = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        base = "/proc/" + name
        try:
            with open(base + "/stat") as handle:
                head, _, tail = handle.read().rpartition(")")
            fields = tail.split()
            with open(base + "/cmdline", "rb") as handle:
                argv = [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
            uid = os.stat(base).st_uid
        except (OSError, IndexError):
            continue
        if len(fields) < 22 or fields[0] in ("Z", "X"):
            continue
        table[int(name)] = {
            "ppid": int(fields[1]),
            "pgid": int(fields[2]),
            "sid": int(fields[3]),
            "start": fields[19],
            "rss_bytes": int(fields[21]) * page,
            "comm": head.partition("(")[2],
            "argv": argv,
            "uid": uid,
        }
    return table


def subtree(table, root):
    """``root`` and every live process descended from it."""
    children = {}  # type: dict[int, list[int]]
    for pid, info in table.items():
        children.setdefault(info["ppid"], []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def vllm_like(info):
    """A vLLM process: titled VLLM::..., or a ``vllm`` command line (the API server)."""
    argv0 = (info["argv"] or [""])[0].strip()
    if argv0.startswith(ENGINE_TITLE) or info["comm"].startswith(ENGINE_TITLE):
        return True
    return any(os.path.basename(arg) == "vllm" or "vllm.entrypoints" in arg for arg in info["argv"][:3])


def gpu_memory_mib():
    """{pid: MiB} of the processes holding GPU memory; empty without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used = {}  # type: dict[int, int]
    for line in out.stdout.decode(errors="replace").splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[int(parts[0])] = used.get(int(parts[0]), 0) + int(parts[1])
    return used


def started_here(pid, root):
    """The process runs with podkit's environment for the tree at ``root`` (``<volume>/podkit``):
    env.sh, which every launch sources, puts the hub cache, vLLM's cache and TMPDIR there."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            env = handle.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    keys = ("HF_HUB_CACHE=", "HF_HOME=", "VLLM_CACHE_ROOT=", "TMPDIR=")
    return any(item.startswith(keys) and item.split("=", 1)[1].startswith(root + "/") for item in env)


def engine_orphans(cfg, server_pid, table=None):
    """vLLM engines that outlived their server, each with everything under it.

    An orphan is a process of this user that a podkit launch on this volume started (its
    environment says so: another deployment's engines, or anyone else's, are left alone), titled
    ``VLLM::...`` (or in the process group of a server the launch script recorded and that is gone), that
    is not under the running server and whose parent is no vLLM process (its server was killed:
    it was re-parented to PID 1 or a subreaper). Each: pid, start time (so a kill hits that very
    process), title, the pids under it, and the memory they hold (resident bytes, and GPU MiB
    where nvidia-smi tells)."""
    table = proc_table() if table is None else table
    root = os.path.dirname(cfg["run_dir"].rstrip("/")) if cfg.get("run_dir") else None
    ours = subtree(table, server_pid) if server_pid else set()
    old = (read_text(os.path.join(cfg["run_dir"], "vllm.pid")) or "").split() if cfg.get("run_dir") else []
    gone = len(old) == 2 and old[0].isdigit() and old[1].isdigit() and int(old[0]) not in table
    uid = os.getuid()
    candidates = set()
    for pid, info in table.items():
        if pid in ours or info["uid"] != uid:
            continue
        titled = (info["argv"] or [""])[0].startswith(ENGINE_TITLE) or info["comm"].startswith(ENGINE_TITLE)
        in_old_group = gone and info["pgid"] == info["sid"] == int(old[0]) and int(info["start"]) >= int(old[1])
        if in_old_group or (titled and root and started_here(pid, root)):
            candidates.add(pid)
    roots = [
        pid
        for pid in sorted(candidates)
        if table[pid]["ppid"] not in candidates
        and not (table[pid]["ppid"] in table and vllm_like(table[table[pid]["ppid"]]))
    ]
    gpu = gpu_memory_mib() if roots else {}
    found = []
    for pid in roots:
        tree = sorted(subtree(table, pid))
        info = table[pid]
        found.append(
            {
                "pid": pid,
                "start": info["start"],
                "title": ((info["argv"] or [""])[0].strip() or info["comm"])[:80],
                "pgid": info["pgid"],
                "pids": tree,
                "rss_bytes": sum(table[p]["rss_bytes"] for p in tree),
                "gpu_mib": sum(gpu.get(p, 0) for p in tree) if gpu else None,
            }
        )
    return found


def reap(cfg):
    """Stop the orphans the probe listed (``{"pid", "start"}`` each: still that very process) and
    everything under them: SIGTERM, up to ``timeout`` seconds, then SIGKILL."""
    table = proc_table()
    targets = set()
    for item in cfg.get("orphans") or []:
        if table.get(item["pid"], {}).get("start") == item["start"]:
            targets |= subtree(table, item["pid"])
    starts = dict((pid, table[pid]["start"]) for pid in targets)
    errors = {}

    def send(pids, sig):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError as exc:
                if exc.errno != 3:  # ESRCH: gone already
                    errors[str(pid)] = exc.strerror

    def alive():
        return sorted(pid for pid in targets if starttime(pid) == starts[pid])

    send(sorted(targets), signal.SIGTERM)
    deadline = time.time() + cfg.get("timeout", 10)
    while alive() and time.time() < deadline:
        time.sleep(0.2)
    killed = alive()
    send(killed, signal.SIGKILL)
    time.sleep(0.2 if killed else 0)
    return {"stopped": sorted(targets), "killed": killed, "left": alive(), "errors": errors}


def listening_sockets(port):
    """{inode: uid} of the TCP sockets listening on ``port`` (IPv4 and IPv6), from /proc/net/tcp{,6};
    None when neither table can be read."""
    found, read = {}, False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for line in lines:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found[fields[9]] = int(fields[7])
            except ValueError:
                pass
    return found if read else None


def socket_holders(inodes):
    """{inode: [pids]} of the processes this user can see holding each socket in ``inodes``."""
    wanted = dict(("socket:[%s]" % inode, inode) for inode in inodes)
    held = dict((inode, []) for inode in inodes)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target in wanted and int(pid) not in held[wanted[target]]:
                held[wanted[target]].append(int(pid))
    return held


def process_tree(root):
    """``root`` and every process descended from it (the server's API and engine processes)."""
    children = {}  # type: dict[int, list[int]]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(pid))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return tree


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def listener(port, server_pid):
    """Who listens on the served ``port``, so a client sends the API key only to podkit's server:
    ``held`` (something listens), ``podkit`` (every listening socket is held by the server the
    supervisor started, ``server_pid``, or its descendants), and for a stranger its
    ``pid``, ``program`` and ``user`` (pid None when this user cannot see the process)."""
    result = {"port": port, "held": False, "podkit": False, "pid": None, "program": None, "user": None}
    sockets = listening_sockets(port)
    if sockets is None:
        result["error"] = "cannot read /proc/net/tcp to see who listens on port %s" % port
        return result
    if not sockets:
        return result
    result.update(held=True, user=user_name(sockets[sorted(sockets)[0]]))
    ours = process_tree(server_pid) if server_pid else set()
    holders = socket_holders(sockets)
    strangers = [inode for inode in sorted(sockets) if not any(pid in ours for pid in holders[inode])]
    if not strangers:
        mine = sorted(pid for pids in holders.values() for pid in pids)
        result.update(podkit=True, pid=server_pid if server_pid in mine else mine[0])
    else:
        pids = sorted(holders[strangers[0]])
        result.update(pid=pids[0] if pids else None, user=user_name(sockets[strangers[0]]))
    if result["pid"]:
        argv = process_argv(result["pid"]) or []
        comm = read_text("/proc/%d/comm" % result["pid"])
        result["program"] = comm or (os.path.basename(argv[0]) if argv else None)
    return result


def listen_addresses(root_pid):
    """Every TCP address the process tree at ``root_pid`` listens on: [{"address", "port"}]."""
    if not root_pid:
        return []
    tree = process_tree(root_pid)
    inodes = {}
    for table, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            with open(table) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":
                continue
            address, port = fields[1].rsplit(":", 1)
            inodes[fields[9]] = {"address": hex_address(address, family), "port": int(port, 16)}
    held = socket_holders(list(inodes))
    found = []
    for inode, pids in held.items():
        if any(pid in tree for pid in pids) and inodes[inode] not in found:
            found.append(inodes[inode])
    return sorted(found, key=lambda item: (item["port"], item["address"]))


def hex_address(text, family):
    """An address as /proc/net/tcp{,6} writes it (host-order 32-bit words in hex), as text."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if family == 4 else socket.AF_INET6, words)
