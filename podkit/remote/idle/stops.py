"""What the watcher stops, and how: the pod with its own key (from the container's environment,
never argv) through RunPod's REST API v2, its runpodctl (new or old) as the fallback; or vLLM under
its supervisor; the marker that says why, and the state file ``podkit status`` reads. And the proof,
before any stop is needed, that the pod can stop itself: a read of the pod with the same key.
"""

import fcntl
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xmlrpc.client

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
STOPPING_SECONDS = 60  # after a stop was asked: no second ask within this (the pod is going down)
#: RunPod's REST API v2 (``POST /v2/pods/{id}/action``); ``RUNPOD_API_BASE_URL`` in the pod's
#: environment points elsewhere (the tests' replay). REST v1 (rest.runpod.io/v1) is retired.
API_URL = "https://api.runpod.io"
USER_AGENT = "podkit-idle (RunPod pod self-stop)"
#: runpodctl's two ways to say it: the v2 builds' (``pod stop``), then the old one (``stop pod``),
#: which new builds keep as an alias and old builds send to APIs RunPod has switched off.
RUNPODCTL_STOP = (("pod", "stop"), ("stop", "pod"))
RUNPODCTL_READ = (("pod", "get"), ("get", "pod"))


def container_env(proc_environ="/proc/1/environ", rp_environment="/etc/rp_environment"):
    """The container's own environment (RunPod sets RUNPOD_POD_ID and the pod-scoped
    RUNPOD_API_KEY there): PID 1's, else the ``export K="V"`` lines RunPod's images keep."""
    env = {}
    try:
        with open(proc_environ, "rb") as handle:
            for item in handle.read().split(b"\0"):
                name, sep, value = item.decode("utf-8", "replace").partition("=")
                if sep and name:
                    env[name] = value
    except OSError:
        pass
    if "RUNPOD_POD_ID" in env:
        return env
    try:
        with open(rp_environment) as handle:
            for line in handle:
                match = re.match(r'\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(?:"(.*)"|(\S*))\s*$', line)
                if match:
                    env.setdefault(match.group(1), match.group(2) if match.group(2) is not None else match.group(3))
    except OSError:
        pass
    return env


def pod_and_key(cfg, env):
    """(pod id, None) from the container's environment, or (None, why the pod cannot stop itself)."""
    pod_id = env.get("RUNPOD_POD_ID") or cfg.get("pod_id") or ""
    if not POD_ID.fullmatch(pod_id):
        return None, "no pod id (RUNPOD_POD_ID is not in the pod's environment and the deploy gave none)"
    if not env.get("RUNPOD_API_KEY"):
        return None, "the pod's environment has no RUNPOD_API_KEY (the pod-scoped key RunPod gives every pod)"
    return pod_id, None


def stop_pod(cfg, env=None):
    """Ask RunPod to stop this pod with the pod's own key: through REST v2 (``POST
    /v2/pods/{id}/action``), and where that fails through the pod's runpodctl, new form then old,
    so no one client build is needed. Returns (ok, one line)."""
    env = container_env() if env is None else env
    pod_id, why = pod_and_key(cfg, env)
    if pod_id is None:
        return False, why
    ok, rest = api_call(pod_id, env, "POST", {"action": "stop"})
    if ok:
        return True, "asked RunPod to stop pod %s (REST v2: %s)" % (pod_id, rest)
    ok, ctl = runpodctl(pod_id, env, RUNPODCTL_STOP)
    if ok:
        return True, "asked RunPod to stop pod %s (runpodctl: %s; REST v2 did not: %s)" % (pod_id, ctl, rest)
    return False, "%s; %s" % (rest, ctl)


def check_pod_stop(cfg, env=None):
    """Whether this pod could stop itself now, proven without stopping it: the same key and the same
    ways as :func:`stop_pod`, asked for a read of the pod. Returns a record for the state file:
    ``{"ok", "via": "v2" | "runpodctl" | None, "why", "pod_id", "checked_at"}``."""
    env = container_env() if env is None else env
    pod_id, why = pod_and_key(cfg, env)
    record = {"ok": False, "via": None, "why": why, "pod_id": pod_id, "checked_at": time.time()}
    if pod_id is None:
        return record
    ok, rest = api_call(pod_id, env, "GET", None)
    if ok:
        record.update(ok=True, via="v2", why=None)
        return record
    ok, ctl = runpodctl(pod_id, env, RUNPODCTL_READ)
    if ok:
        record.update(ok=True, via="runpodctl", why="REST v2 did not answer the pod's key (%s); runpodctl did" % rest)
        return record
    record["why"] = "%s; %s" % (rest, ctl)
    return record


def api_call(pod_id, env, method, body, timeout=30):
    """``GET /v2/pods/ID`` or ``POST /v2/pods/ID/action`` with the pod-scoped key in the header.
    Returns (ok, one line: the pod's status, or what RunPod said)."""
    base = (env.get("RUNPOD_API_BASE_URL") or API_URL).rstrip("/")
    path = "/v2/pods/%s%s" % (pod_id, "/action" if body is not None else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + env["RUNPOD_API_KEY"])
    request.add_header("User-Agent", USER_AGENT)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # a proxy the pod sets is honoured
            text = answer.read(4000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        said = error_words(exc.read(600).decode("utf-8", "replace"))
        refused = {401: " (RunPod refused the pod's key)", 403: " (RunPod refused this request)"}.get(exc.code, "")
        if "1010" in said:  # Cloudflare in front of RunPod's API, refusing this client by its User-Agent
            refused = " (Cloudflare refused this client, error 1010)"
        return False, "REST v2 answered %s %s with HTTP %d%s%s" % (
            method,
            path,
            exc.code,
            refused,
            ": " + said if said else "",
        )
    except (OSError, ValueError) as exc:
        return False, "REST v2 did not answer %s %s: %s" % (method, path, getattr(exc, "reason", exc))
    try:
        status = json.loads(text).get("status")
    except (ValueError, AttributeError):
        status = None
    return True, "RunPod says %s" % (status if isinstance(status, str) else "ok")


def pod_said(text):
    """A new runpodctl prints the pod as JSON: the status RunPod gave it, or None."""
    try:
        status = json.loads(text).get("status")
    except (ValueError, AttributeError):
        return None
    return "RunPod says %s" % status if isinstance(status, str) else None


def error_words(text):
    """RunPod's words in an error body: problem+json's title and detail, or ``{"error": ...}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:160]
    if not isinstance(data, dict):
        return ""
    words = [data.get("error")] if isinstance(data.get("error"), str) else [data.get("title"), data.get("detail")]
    return ": ".join(str(w) for w in words if isinstance(w, str) and w)[:200]


def runpodctl(pod_id, env, forms):
    """The pod's runpodctl with the key in its environment, never argv: each form in turn (``pod
    stop ID``, then ``stop pod ID``) until one works. Returns (ok, one line)."""
    path = os.pathsep.join(filter(None, [env.get("PATH"), DEFAULT_PATH]))
    found = shutil.which("runpodctl", path=path)
    if not found:
        return False, "runpodctl is not on the pod's PATH (RunPod's images carry it)"
    child = dict((k, v) for k, v in env.items() if k.startswith("RUNPOD_"))
    child.update(PATH=path, HOME=env.get("HOME") or "/root")
    tried = []
    for words in forms:
        argv = [found, words[0], words[1], pod_id]
        try:
            out = subprocess.run(
                argv, env=child, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120
            )
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append("runpodctl %s %s: %s" % (words[0], words[1], exc))
            continue
        text = out.stdout.decode("utf-8", "replace")
        said = " ".join(text.split())[:200]
        if out.returncode == 0 and "failed" not in said:  # an old runpodctl says "stop failed" and exits 0
            return True, "runpodctl %s %s: %s" % (words[0], words[1], pod_said(text) or said or "ok")
        tried.append("runpodctl %s %s %s exited %d: %s" % (words[0], words[1], pod_id, out.returncode, said))
    return False, "; ".join(tried)


def supervisor_argv(cfg, verb):
    """``supervisorctl -c CONF VERB vllm``, or ``systemctl VERB UNIT`` (``sudo -n`` when not root)."""
    if cfg.get("supervisor") == "systemd":
        argv = ["systemctl", verb, cfg["unit"]]
        return argv if os.geteuid() == 0 else ["sudo", "-n"] + argv
    return [cfg["supervisorctl"], "-c", cfg["supervisord_conf"], verb, "vllm"]


def run_quiet(argv, timeout=150, raise_missing=False):
    """Run ``argv`` with no input: (ok, its output on one line, or why it failed). With
    ``raise_missing``, a program that cannot run at all raises its OSError to the caller."""
    try:
        out = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
        )
    except OSError as exc:
        if raise_missing:
            raise
        return False, "%s: %s" % (" ".join(argv), exc)
    except subprocess.SubprocessError as exc:
        return False, "%s: %s" % (" ".join(argv), exc)
    said = " ".join(out.stdout.decode("utf-8", "replace").split())[-200:]
    if out.returncode != 0:
        return False, "%s exited %d: %s" % (" ".join(argv), out.returncode, said)
    return True, said


def stop_server(cfg):
    """Stop vLLM (not the edge) under the supervisor that runs it: ``supervisorctl stop vllm``,
    or ``systemctl stop`` of its unit (with ``sudo -n`` when not root). Returns (ok, one line)."""
    argv = supervisor_argv(cfg, "stop")
    try:
        ok, said = run_quiet(argv, raise_missing=cfg.get("supervisor") != "systemd")
    except OSError as exc:  # no supervisorctl (the venv deleted or being reinstalled): its socket
        return stop_through_socket(cfg.get("supervisor_socket"), "%s: %s" % (argv[0], exc))
    if not ok:
        return False, said
    return True, "stopped vLLM (%s); the edge answers 503 until the next start" % (said or " ".join(argv[-2:]))


def stop_through_socket(path, why):
    """``supervisorctl stop vllm`` without supervisorctl, which lives in the venv (deleted, or being
    reinstalled, while supervisord still runs): the same XML-RPC call, over supervisord's Unix socket
    at ``path``. ``why``: why supervisorctl could not run, said if this fails too."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(150)
        sock.connect(path or "")
        connection = http.client.HTTPConnection("localhost", timeout=150)
        connection.sock = sock
        body = xmlrpc.client.dumps(("vllm", True), "supervisor.stopProcess")
        connection.request("POST", "/RPC2", body, {"Content-Type": "text/xml"})
        xmlrpc.client.loads(connection.getresponse().read())
    except xmlrpc.client.Fault as fault:
        if "NOT_RUNNING" in fault.faultString:
            return True, "vLLM was not running; the edge answers 503 until the next start"
        return False, "%s; supervisord's socket: %s" % (why, fault.faultString)
    except (OSError, http.client.HTTPException, xmlrpc.client.Error) as exc:
        return False, "%s; supervisord's socket: %s" % (why, exc)
    return True, "stopped vLLM (through supervisord's socket: %s); the edge answers 503 until the next start" % why


def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def log(line):
    sys.stdout.write("%s podkit-idle: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), line))
    sys.stdout.flush()


def deploy_runs(cfg):
    """A deploy holds this host's lock now (an flock on the volume folder, podctl's, for the life of
    the deploy's connection): an idle stop meanwhile would race its start of the server (it ended
    stopped after a deploy that reported success). Tried without waiting, let go at once."""
    target = cfg.get("deploy_lock")
    if not target:
        return False
    try:
        fd = os.open(target, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # no flock here: the deploy took none either
    finally:
        os.close(fd)  # the flock, where taken, goes with it
    return False


def stop_on_purpose(cfg, by, why, stop, at=None, how="stop"):
    """Stop on purpose (idle, or ``podkit down``): first the marker the edge reads (who, why,
    when, ``how``: stop or sleep), then ``stop()``; a stop that fails takes the marker back, so
    the edge never says a server was stopped that still runs. Returns ``stop()``'s (ok, one line)."""
    marker = {"by": by, "at": time.time() if at is None else at, "why": why, "how": how}
    marker.update(action=cfg.get("action"), host=cfg.get("host"))
    write_json(cfg["stopped_file"], marker)
    ok, said = stop()
    if not ok:
        remove(cfg["stopped_file"])
    return ok, said
