"""What supervises the programs and what it says: systemd's units, supervisord over its own XML-RPC
socket, the state the launch script recorded, each program's last log line, and podkit's programs
running outside the supervisor (strays a supervisord that died left).
"""

import os
import re
import socket
import subprocess
import time
import xmlrpc.client

from podkit.remote.podctl.base import log_lines, pid_alive, process_argv, read_json_dict, read_text, starttime
from podkit.remote.podctl.processes import engine_orphans, gpu_memory_mib, proc_table, subtree

UNIT_PROPERTIES = "LoadState,ActiveState,SubState,UnitFileState,MainPID,NRestarts"
SYSTEMD_RUNNING = "/run/systemd/system"  # exists only where systemd is PID 1


def unit_state(name):
    """The systemd unit's state from one ``systemctl show`` (None where systemd does not run)."""
    if not name or not os.path.isdir(SYSTEMD_RUNNING):
        return None
    try:
        out = subprocess.run(
            ["systemctl", "show", name, "--property=" + UNIT_PROPERTIES],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"name": name, "error": str(exc)}
    fields = dict(line.split("=", 1) for line in out.stdout.decode(errors="replace").splitlines() if "=" in line)
    pid = fields.get("MainPID", "0")
    restarts = fields.get("NRestarts", "0")
    return {
        "name": name,
        "load": fields.get("LoadState"),
        "active": fields.get("ActiveState"),
        "sub": fields.get("SubState"),
        "enabled": fields.get("UnitFileState") or None,
        "main_pid": int(pid) if pid.isdigit() and pid != "0" else None,
        "restarts": int(restarts) if restarts.isdigit() else 0,
    }


def unit_up(unit):
    return bool(unit) and unit.get("active") in ("active", "activating", "reloading")


# each program and the config key of its systemd unit
UNIT_KEYS = (("vllm", "unit"), ("edge", "edge_unit"), ("idle", "idle_unit"))


def supervisor_state(cfg, units=None):
    """What supervises the programs and what they run now, the same for both supervisors:
    ``pid`` (supervisord's, or 1 while the vLLM unit is up), ``programs`` ({name: state}, as
    supervisord or systemd says), and from the pid files the launch and edge scripts write:
    ``vllm_pid``, ``edge_pid``, what each was started from (``serving``, ``edge_serving``), and
    ``crashes`` (vLLM's exits since the deploy last started it). ``units``: the two units' states
    when the caller read them already (the probe does, for its own fields)."""
    state = server_state(cfg["run_dir"])
    if cfg.get("supervisor") == "systemd":
        if units is None:
            units = dict((name, unit_state(cfg.get(key))) for name, key in UNIT_KEYS)
        units = dict((name, unit or {}) for name, unit in units.items())
        state.update(
            pid=1 if unit_up(units["vllm"]) else None,
            programs=dict((name, (unit.get("active") or "inactive").upper()) for name, unit in units.items()),
            # a supervisord left from podkit_supervisor = "supervisord": it holds the ports until stopped
            supervisord=supervisord_pid(cfg.get("supervisord") or {}),
        )
        return state
    sup = cfg.get("supervisord") or {}
    pid = supervisord_pid(sup)
    state.update(pid=pid, programs=supervisord_programs(sup.get("socket")) if pid else {})
    return state


def supervisord_pid(sup):
    """supervisord's pid from its pid file, if that process is this config's supervisord (a pid
    file left by a pod restart names a pid that is now another process, or none)."""
    try:
        pid = int(read_text(sup.get("pidfile") or "") or "")
    except ValueError:
        return None
    argv = process_argv(pid) or []
    if starttime(pid) is None or not any("supervisord" in part for part in argv) or sup.get("conf") not in argv:
        return None
    return pid


class UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's Unix socket (standard library only)."""

    def __init__(self, path, timeout):
        xmlrpc.client.Transport.__init__(self)
        self.path, self.timeout = path, timeout

    def make_connection(self, host):
        import http.client

        connection = http.client.HTTPConnection("localhost", timeout=self.timeout)
        path, timeout = self.path, self.timeout

        def connect():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
            connection.sock = sock

        connection.connect = connect  # type: ignore[method-assign]  # the socket is supervisord's Unix one
        return connection


def settled_state(cfg, wait=3.0, step=0.2, clock=time.monotonic, sleep=time.sleep):
    """:func:`supervisor_state`, read again for up to ``wait`` seconds while a program other than
    the server is STARTING: the edge and the idle watcher count as started after 2 s (supervisord's
    startsecs), so one the deploy has just started is about to run, not failing. verify asks
    after a deploy; the server's own start is readiness's business."""
    server = cfg.get("program", "vllm")
    deadline = clock() + wait
    state = supervisor_state(cfg)
    while clock() < deadline and any(
        status == "STARTING" for name, status in state["programs"].items() if name != server
    ):
        sleep(step)
        state = supervisor_state(cfg)
    return state


def supervisord_rpc(path, timeout=10):
    return xmlrpc.client.ServerProxy("http://localhost/RPC2", transport=UnixTransport(path, timeout))


def supervisord_programs(path):
    """{program: state name} as supervisord reports them (RUNNING, STARTING, BACKOFF, FATAL, ...)."""
    try:
        return dict(
            (info["name"], info["statename"]) for info in supervisord_rpc(path, 5).supervisor.getAllProcessInfo()
        )
    except (OSError, xmlrpc.client.Error) as exc:
        return {"error": str(exc)[:200]}


def sums(path):
    """{path: sha256} from a ``sha256sum`` output file."""
    found = {}
    for line in (read_text(path) or "").splitlines():
        escaped = line.startswith("\\")  # sha256sum escapes a name holding a backslash or a line break
        digest, _, name = line[1 if escaped else 0 :].partition("  ")
        if escaped:
            name = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), name)
        if name:
            found[name] = digest
    return found


def server_state(run_dir):
    """What the launch and edge scripts recorded when they last started (pid files hold "PID
    STARTTIME": a pid reused after a pod restart is not mistaken for theirs)."""
    crashes = read_text(os.path.join(run_dir, "crashes")) or "0"
    return {
        "pid": None,
        "programs": {},
        "vllm_pid": pid_alive(read_text(os.path.join(run_dir, "vllm.pid"))),
        "edge_pid": pid_alive(read_text(os.path.join(run_dir, "edge.pid"))),
        "serving": sums(os.path.join(run_dir, "serving.sha256")),
        "edge_serving": sums(os.path.join(run_dir, "edge.sha256")),
        "crashes": int(crashes) if crashes.isdigit() else 0,
    }


def legacy_runner(cfg):
    """The pid of podkit's own runner (before supervisord), if one still runs: it holds the port."""
    run_dir = cfg.get("run_dir")
    return pid_alive(read_text(os.path.join(run_dir, "runner.pid"))) if run_dir else None


STRAY_TITLES = {
    "vllm": "the launch script",
    "edge": "the edge (Caddy)",
    "idle": "the idle watcher",
    "supervisord": "a second supervisord",
}


def program_kind(argv, files, conf):
    """Which of podkit's programs ``argv`` runs from this volume's files: the launch script
    (vLLM, or a router host's router), the edge (its script, or the Caddy it execs), the idle
    watcher, supervisord with this volume's config; None for anything else (``idle.py --stop``
    from ``podkit down``, podctl itself, whose JSON argument only mentions the paths)."""
    if not argv:
        return None
    if files.get("launch") and argv[-1] == files["launch"]:
        return "vllm"
    if files.get("edge") and argv[-1] == files["edge"]:
        return "edge"
    if files.get("caddyfile") and "run" in argv and files["caddyfile"] in argv:
        return "edge"
    if files.get("idle") and argv[-2:] == [files["idle"], files.get("idle_config")]:
        return "idle"
    if conf and conf in argv and any(os.path.basename(part) == "supervisord" for part in argv):
        return "supervisord"
    return None


def same_files(pid):
    """The process sees the files podctl sees: it is in podctl's mount namespace. One in another
    (a container or a test's namespace host on the same kernel, its own volume mounted at the same
    path) runs another host's files, whatever its argv says: never a stray of this volume. One that
    ended since the process table was read (another host's vLLM restarting beside this one, on a
    busy machine) runs nothing: no stray either."""
    try:
        return os.readlink("/proc/%d/ns/mnt" % pid) == os.readlink("/proc/self/ns/mnt")
    except PermissionError:
        return True  # unreadable here (another user's): judged by its argv alone, as before
    except OSError:
        return False  # gone (or exiting, its namespaces already let go)


def in_unit(pid, units):
    """The process runs in the cgroup of one of podkit's systemd ``units`` (systemd supervises it)."""
    text = read_text("/proc/%d/cgroup" % pid) or ""
    return any(unit and "/" + unit in text for unit in units)


def program_strays(cfg, table):
    """podkit's programs that run from this volume's files outside the supervisor that runs now:
    the programs of a supervisord that died (SIGKILL leaves them re-parented to PID 1, still
    serving, with the key they started with), their children, a leftover edge, a second
    supervisord. Under the live supervisord's tree, or in a podkit unit's cgroup, is supervised;
    podctl's own line of ancestors is left alone. Each stray: pid, start time, ``program``, its
    title, and every pid under it (what a reap stops), like an orphaned engine."""
    files = cfg.get("program_files") or {}
    sup = cfg.get("supervisord") or {}
    if not files and not sup.get("conf"):
        return []
    keep = set()
    live = supervisord_pid(sup)
    if live:
        keep |= subtree(table, live)
    pid = os.getpid()
    while pid in table and pid not in keep:
        keep.add(pid)
        pid = table[pid]["ppid"]
    units = [cfg.get(key) for _, key in UNIT_KEYS]
    uid = os.getuid()
    # the edge as its script recorded it (Caddy, whatever its argv), and every process run from the files
    edge = pid_alive(read_text(os.path.join(cfg["run_dir"], "edge.pid"))) if cfg.get("run_dir") else None
    kinds = {}
    for pid, info in table.items():
        if pid in keep or info["uid"] != uid:
            continue
        kind = "edge" if pid == edge else program_kind(info["argv"], files, sup.get("conf"))
        if kind and not in_unit(pid, units) and same_files(pid):
            kinds[pid] = kind

    def under_another(pid):
        parent = table[pid]["ppid"]
        seen = set()
        while parent in table and parent not in seen:
            if parent in kinds:
                return True
            seen.add(parent)
            parent = table[parent]["ppid"]
        return False

    found = []
    for pid in sorted(kinds):
        if under_another(pid):
            continue
        tree = sorted(subtree(table, pid))
        info = table[pid]
        found.append(
            {
                "pid": pid,
                "start": info["start"],
                "program": kinds[pid],
                "stray": True,
                "title": STRAY_TITLES[kinds[pid]],
                "command": " ".join(os.path.basename(part) for part in info["argv"])[:120],
                "pgid": info["pgid"],
                "pids": tree,
                "rss_bytes": sum(table[p]["rss_bytes"] for p in tree),
                "gpu_mib": None,
            }
        )
    return found


def leftovers(cfg, server_pid):
    """What the deploy stops before any start (``reap``), and status and verify name: podkit's
    programs outside its supervisor (:func:`program_strays`) first, then the vLLM engines that
    outlived their server (:func:`engine_orphans`) that are not under one of those."""
    table = proc_table()
    strays = program_strays(cfg, table)
    if strays:
        gpu = gpu_memory_mib()
        for stray in strays:
            stray["gpu_mib"] = sum(gpu.get(p, 0) for p in stray["pids"]) if gpu else None
    covered = set(pid for stray in strays for pid in stray["pids"])
    return strays + [o for o in engine_orphans(cfg, server_pid, table) if o["pid"] not in covered]


def stopped_on_purpose(cfg, runner):
    """The stop marker (by, why, at) when the server program is stopped and the marker says it was
    on purpose; None otherwise (a marker the next start has not removed yet is no stop)."""
    program = runner["programs"].get(cfg.get("program", "vllm"))
    if program not in ("STOPPED", "STOPPING", "INACTIVE", "DEACTIVATING") or runner["vllm_pid"]:
        return None
    return read_json_dict(cfg["stopped_file"]) if cfg.get("stopped_file") else None


def supervision(cfg, runner):
    """What status and verify say of the supervision itself: which supervisor, the last log line
    of each program that is not running (why it is not), and the processes that run outside it
    (:func:`leftovers`)."""
    return {
        "supervisor": cfg.get("supervisor") or "supervisord",
        "program_said": program_said(cfg, runner),
        "leftovers": leftovers(cfg, runner["vllm_pid"]),
    }


def program_said(cfg, runner):
    """{program: its log's last line} of each program the supervisor does not say runs."""
    said = {}
    for name, path in sorted((cfg.get("program_logs") or {}).items()):
        if runner["programs"].get(name) not in ("RUNNING", "ACTIVE"):
            tail = log_lines(path, 1)
            said[name] = tail[-1][-240:] if tail else None
    return said
