"""The server and the edge as a client on loopback sees them, what vLLM logged of its starts (each ready
start kept), what it serves (argv, generation config, routes, a router's workers) and where the API
key leaked.
"""

import glob
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request

from podkit.remote.podctl.base import http_get, local_address, log_lines, read_json_dict, read_text, write_atomically


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
        if not cfg.get("health_path"):  # vLLM itself (a router host's router has no /version)
            result["version"] = answered_version(http_get(base + "/version"))
    return result


def answered_version(answer):
    """The version in vLLM's ``/version`` answer ``(status, body)``; None for anything else."""
    status, body = answer
    try:
        version = json.loads(body.decode()).get("version") if status == 200 else None
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) else None


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


def since_last_start(lines):
    """``lines`` after the last start marker in them (all of them when there is none)."""
    for index in range(len(lines) - 1, -1, -1):
        if any(marker in lines[index] for marker in START_MARKERS):
            return lines[index + 1 :]
    return lines


def start_lines(path, count):
    """The last ``count`` lines of the server log since the last start marker: the
    current start's, so a failure of an earlier start (or an earlier run) is not blamed."""
    return since_last_start(log_lines(path, 1 << 20))[-count:]


# launch.sh's start line, and the one podkit's own runner wrote before supervisord (a log from then)
START_MARKERS = ("podkit: starting vLLM", "podkit-runner: starting vLLM", "podkit: starting the router")
# what launch.sh logs when the server it started has exited
EXIT_LINE = re.compile(r"podkit(-runner)?: (vLLM|the router) exited with status")


def failed_start_lines(path):
    """The lines of the last start that exited: from its start marker to launch.sh's line saying it
    exited (the supervisor may have begun the next start since); [] when none exited."""
    lines = log_lines(path, 1 << 20)
    for end in range(len(lines) - 1, -1, -1):
        if EXIT_LINE.search(lines[end]):
            return since_last_start(lines[: end + 1])
    return []


#: The server programs whose log tail status and verify read when the supervisor does not say they run
SERVER_PROGRAMS = ("vllm", "router")


def server_tail(cfg, runner, count=200):
    """The lines of the server's last failed start (else its current start's), clipped, when its
    supervisor says it does not run: the controller names the cause from them (``podkit.host.start.diagnose``).
    None while it runs, or where no server program has a log."""
    logs = cfg.get("program_logs") or {}
    for name in SERVER_PROGRAMS:
        if name in logs:
            if runner["programs"].get(name) in ("RUNNING", "ACTIVE"):
                return None
            lines = failed_start_lines(logs[name]) or start_lines(logs[name], count)
            return [line[-500:] for line in lines[-count:]]
    return None


def lasting_failure(lines, patterns):
    """The first line of ``lines`` that one of ``patterns`` (regular expressions, ignoring case) finds:
    a failure every start of the same launch meets again; None when no pattern matches."""
    compiled = [re.compile(pattern, re.IGNORECASE) for pattern in patterns]
    for line in lines:
        if any(pattern.search(line) for pattern in compiled):
            return line[-400:]
    return None


def record_accepted(accept):
    """A launch that served without a check before its start (no server ran for the check to keep)
    added to the record of accepted launches, as vLLM's check adds one it read
    (``podkit/remote/vllmcheck.py``): newest last, the last ``keep``, written whole; a record that
    cannot be written only costs the next deploy a check."""
    kept = [line for line in (read_text(accept["record"]) or "").split() if line != accept["digest"]]
    try:
        write_atomically(accept["record"], "\n".join((kept + [accept["digest"]])[-accept["keep"] :]) + "\n")
    except OSError:
        pass


def record_start(cfg, lines, began):
    """A start that passed readiness, kept for ``podkit status`` (the last :data:`STARTS_KEPT` in
    ``starts_file``, one JSON line each; the same start seen again replaces its line), and the KV
    cache size it measured in ``profile.file`` as ``KEY BYTES WHEN`` for the launch script to pass
    back (podkit/host/start/profile.py). ``began``: when this call started, on this host's clock."""
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


def serve_args(argv):
    """The arguments after ``serve`` (model first), or None when argv is not a vllm serve."""
    if not argv or "serve" not in argv:
        return None
    return argv[argv.index("serve") + 1 :]


def lines_with(needle, path, most=5):
    """Line numbers (the first ``most``) and the count of lines of ``path`` holding ``needle``; None when unreadable."""
    found, count = [], 0  # type: list[int], int
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
    """A log and the copies supervisord rotated it into (``LOG.1`` ... ``LOG.N``), or Caddy
    (``NAME-<time>.EXT``)."""
    copies = [p for p in glob.glob(glob.escape(log_file) + ".*") if p.rsplit(".", 1)[1].isdigit()]
    stem, ext = os.path.splitext(log_file)
    rolled = sorted(glob.glob(glob.escape(stem) + "-*" + glob.escape(ext))) if ext else []
    return [log_file] + sorted(copies, key=lambda p: int(p.rsplit(".", 1)[1])) + rolled


#: How much of the edge's access log the refusals are read from (its end), and how many are listed.
ACCESS_TAIL_BYTES = 512 * 1024
REFUSED_LISTED = 20


def refused_requests(path):
    """The requests the edge answered 4xx, from the end of its access log (Caddy's JSON lines, which
    podkit's Caddyfile keeps to method, path, status, size and time): {"file", "read", "counts":
    {"STATUS METHOD PATH": n}, "last": [{"at", "method", "path", "status", "size", "seconds"}]},
    or None when there is no log yet."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - ACCESS_TAIL_BYTES))
            tail = handle.read().decode("utf-8", "replace").splitlines()
    except (OSError, TypeError):
        return None
    if size > ACCESS_TAIL_BYTES:
        tail = tail[1:]  # the first line read may be cut
    counts = {}  # type: dict[str, int]
    last, read = [], 0
    for line in tail:
        try:
            entry = json.loads(line)
            request = entry.get("request") or {}
            status = int(entry.get("status") or 0)
        except (ValueError, AttributeError, TypeError):
            continue
        read += 1
        if not 400 <= status < 500:
            continue
        method, where = str(request.get("method") or "?"), str(request.get("uri") or "?").split("?", 1)[0]
        key = "%d %s %s" % (status, method, where)
        counts[key] = counts.get(key, 0) + 1
        last.append(
            {
                "at": entry.get("ts"),
                "method": method,
                "path": where,
                "status": status,
                "size": entry.get("size"),
                "seconds": entry.get("duration"),
            }
        )
    return {"file": path, "read": read, "counts": counts, "last": last[-REFUSED_LISTED:]}


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
    result = {"argv": argv, "processes": processes, "unreadable": unreadable}  # type: dict
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
    found = []  # type: list[str]
    for folder in folders:
        for parent, _, names in os.walk(folder):
            found.extend(os.path.join(parent, name) for name in sorted(names))
    return [path for path in found if os.path.isfile(path) and not os.path.islink(path)]


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


#: Seconds for vLLM's ``/openapi.json``: its first answer builds the schema of every route (FastAPI,
#: cached after), which took over 10 s on two busy cores right after a start (verify then failed)
OPENAPI_TIMEOUT = 30


def openapi_routes(port):
    """The paths the running vLLM serves, from its own ``/openapi.json`` on loopback (None when
    it does not answer)."""
    status, body = http_get("http://127.0.0.1:%d/openapi.json" % port, timeout=OPENAPI_TIMEOUT)
    if status != 200:
        return None
    try:
        return sorted(json.loads(body.decode()).get("paths", {}))
    except (ValueError, AttributeError):
        return None
