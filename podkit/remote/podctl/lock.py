"""The deploy lock: one deploy per host at a time, an flock on the volume folder held for the life of
the deploy's SSH connection, with its holder named.
"""

import fcntl
import hashlib
import json
import os
import tempfile
import time

from podkit.remote.podctl.base import read_json_dict, starttime

SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh", "busybox", "sudo", "su", "env", "timeout", "nohup", "setsid")


def parent_of(pid):
    """(ppid, comm) of ``pid``; None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            head, _, tail = handle.read().rpartition(")")
        return int(tail.split()[1]), head.partition("(")[2]
    except (OSError, IndexError, ValueError):
        return None


def connection_process():
    """The process whose life is the controller's connection, or None: the first ancestor of
    this command that is not a shell.

    Over SSH it is the sshd session the command runs under (``sshd`` / ``sshd-session``): pyinfra
    keeps one connection per host for the whole run, each command a channel of it, so the session
    ends when the run ends, however it ends (done, failed, Ctrl-C, the controller killed). With
    ``@local`` it is pyinfra itself. None when no ancestor shows (a container exec, whose parent
    is outside this pid namespace)."""
    pid = os.getppid()
    for _ in range(16):
        found = parent_of(pid) if pid > 1 else None
        if found is None:
            return None
        if found[1] not in SHELLS:
            return pid
        pid = found[0]
    return None


def hold_lock(fd, target, info_path, anchor, start):
    """The lock's holder (a child detached from the command): keeps the flock on ``target`` (the
    volume folder) while the connection process lives, then empties the holder file it wrote."""
    os.setsid()
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for name in (0, 1, 2):  # the SSH channel ends only when nothing holds its pipes
        os.dup2(devnull, name)
    for open_fd in os.listdir("/proc/self/fd"):
        if int(open_fd) > 2 and int(open_fd) != fd:
            try:
                os.close(int(open_fd))
            except OSError:
                pass

    def same_target():
        try:
            return os.path.samestat(os.fstat(fd), os.stat(target))
        except OSError:
            return False

    try:
        while starttime(anchor) == start and same_target():
            time.sleep(0.25)
        for candidate in (info_path, holder_stand_in(info_path)):
            if ((read_json_dict(candidate) or {}).get("holder") or [None])[0] == os.getpid():
                try:
                    with open(candidate, "w"):
                        pass
                except OSError:
                    pass
    finally:
        os._exit(0)


def read_holder_file(path):
    """The holder named in ``path``, or in its stand-in in the system's temporary folder (used
    until podkit's run folder exists on the volume), whichever names one."""
    for candidate in (path, holder_stand_in(path)):
        data = read_json_dict(candidate)
        if data is not None:
            return data
    return None


def holder_stand_in(path):
    """Where the holder is named before podkit's run folder exists: never on the volume, whose
    first deploy may still fail its preflight and must leave it as it was."""
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "podkit-deploy-lock-%s.json" % digest)


def deploy_lock(cfg):
    """Take the deploy lock of this volume for this deploy, in the probe's one command.

    The lock is an flock on the volume folder itself, held by a small process the probe leaves
    behind, which lives exactly as long as the controller's connection (:func:`connection_process`):
    the run ends, fails, is interrupted or its controller dies, the connection closes, the holder
    exits and the kernel drops the flock. Nothing has to remember to release it, there is no expiry
    to tune, and nothing is created on a host that fails its preflight. Once podkit's run folder
    exists, ``<volume>/podkit/run/deploy.lock`` names the holder (controller host, pid and user,
    since when, the holder's pid here) so a second deploy can say who holds the host; a holder
    that was killed lets go with it, and the next run takes over with a note. Returns
    {"state": "acquired" | "ours" | "held" | "off", ...}: "ours" when this connection already
    holds it, "off" (never a refusal) where no lock can be taken: no connection process to tie
    it to, no volume folder yet, no flock on its filesystem."""
    spec = cfg.get("lock")
    if not spec:
        return None
    path = spec["path"]
    target = spec.get("volume") or os.path.dirname(os.path.dirname(os.path.dirname(path)))
    anchor = connection_process()
    if anchor is None or starttime(anchor) is None:
        return {"state": "off", "path": path, "why": "no connection process to tie the lock to"}
    anchor = [anchor, starttime(anchor)]
    try:
        fd = os.open(target, os.O_RDONLY)
    except OSError as exc:
        return {"state": "off", "path": path, "why": str(exc)}
    deadline = time.time() + 3
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            holder = read_holder_file(path) or {}
            if not isinstance(exc, BlockingIOError):
                os.close(fd)
                return {"state": "off", "path": path, "why": "no flock here (%s)" % exc}
            if holder.get("anchor") == anchor:
                os.close(fd)
                return {"state": "ours", "path": path}
            # a run that just ended: its holder lets go within a moment of its connection's end
            ended = holder.get("anchor") and starttime(holder["anchor"][0]) != holder["anchor"][1]
            if not ended or time.time() > deadline:
                os.close(fd)
                return {"state": "held", "path": path, "holder": holder}
            time.sleep(0.1)
    previous = read_holder_file(path)
    child = os.fork()
    if child == 0:
        hold_lock(fd, target, path, anchor[0], anchor[1])
    os.close(fd)
    now = time.time()
    info = {
        "controller": spec.get("controller") or {},
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "since_epoch": int(now),
        "anchor": anchor,
        "holder": [child, starttime(child)],
    }
    # podkit's run folder is made by the deploy, never here: until it exists, a stand-in in /tmp
    named = path if os.path.isdir(os.path.dirname(path)) else holder_stand_in(path)
    try:
        with open(named, "w") as handle:
            handle.write(json.dumps(info, sort_keys=True) + "\n")
    except OSError:
        pass
    return {"state": "acquired", "path": path, "holder_pid": child, "took_over": previous}
