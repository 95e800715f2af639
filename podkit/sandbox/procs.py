"""Processes and ports on this machine, as the private sshd needs them: is a pid alive, its
descendants, signals, reaping, starting detached, ending a tree; is a port free.

Linux only (processes are read from ``/proc``); standard library only.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie.

    An sshd whose starter has exited is re-parented to PID 1, which in some
    containers reaps late or never, so after it exits it lingers as a zombie
    that ``kill(pid, 0)`` still finds.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # Format: "pid (comm) state ..."; comm may contain spaces and parentheses.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


#: Servers started by this process, so they are reaped (no zombie, no
#: ResourceWarning) when this process also stops them.
STARTED: dict[int, subprocess.Popen] = {}


def reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if this process started it."""
    proc = STARTED.pop(pid, None)
    if proc is not None:
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


def unreaped(pid: int) -> bool:
    """True if ``pid`` still exists and is not a zombie orphaned to PID 1."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return not (fields[0] in ("Z", "X") and fields[1] == "1")


def descendants(pid: int) -> list[list[int]]:
    """Live descendants of ``pid`` by depth: children, grandchildren, ..."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    levels = []
    level = children.get(pid, [])
    while level:
        levels.append(level)
        level = [c for p in level for c in children.get(p, [])]
    return levels


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def spawn_detached(argv: list[str]) -> subprocess.Popen:
    """Start ``argv`` in a session of its own, kept in :data:`STARTED`.

    The new session detaches it from this process's session and terminal, so it
    outlives this Python process (it is re-parented) and ignores a Ctrl-C aimed
    at the caller.
    """
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    STARTED[proc.pid] = proc
    return proc


def end_tree(pid: int, deadline_s: float) -> bool:
    """End ``pid`` and the processes under it, deepest first; True once ``pid`` is gone.

    Each level gets SIGTERM and, when it outlives ``deadline_s`` (counted from the
    start), SIGKILL. Processes detached from the tree (``setsid``, double fork) are
    not under ``pid`` and keep running.
    """
    # Children first, while their parents still live to reap them: a
    # process re-parented to PID 1 may stay a zombie in containers.
    deadline = time.monotonic() + deadline_s
    for level in [*reversed(descendants(pid)), [pid]]:
        for p in level:
            send_signal(p, signal.SIGTERM)
        while any(alive(p) for p in level) and time.monotonic() < deadline:
            time.sleep(0.01)
        for p in level:
            if alive(p):
                send_signal(p, signal.SIGKILL)
        # Let the parents reap them before the parents go in turn.
        reap_deadline = time.monotonic() + 0.5
        while level != [pid] and any(unreaped(p) for p in level) and time.monotonic() < reap_deadline:
            time.sleep(0.01)
    kill_deadline = time.monotonic() + 1.0
    while alive(pid) and time.monotonic() < kill_deadline:
        time.sleep(0.01)
    if alive(pid):
        return False
    reap(pid)
    return True


def family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_free(host: str, port: int) -> bool:
    """True if sshd could bind ``host:port`` now.

    Binds with SO_REUSEADDR like sshd does, so connections lingering in
    TIME_WAIT from a previous run do not count as taken.
    """
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                return False
            raise
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing listens on right now.

    The kernel picks it (bind to port 0); another process may still take it
    before the caller binds it, so callers should be ready to retry.
    """
    with socket.socket(family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
