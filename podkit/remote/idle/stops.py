"""What the watcher stops, and how: the pod through runpodctl with the pod's own key (from the
container's environment, never argv), or vLLM under its supervisor; the marker that says why, and
the state file ``podkit status`` reads.
"""

import configparser
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import xmlrpc.client

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
STOPPING_SECONDS = 60  # after a stop was asked: no second ask within this (the pod is going down)


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


def stop_pod(cfg, env=None):
    """Ask RunPod to stop this pod with the pod's own runpodctl and key. Returns (ok, one line)."""
    env = container_env() if env is None else env
    pod_id = env.get("RUNPOD_POD_ID") or cfg.get("pod_id") or ""
    if not POD_ID.fullmatch(pod_id):
        return False, "no pod id (RUNPOD_POD_ID is not in the pod's environment and the deploy gave none)"
    if not env.get("RUNPOD_API_KEY"):
        return False, "the pod's environment has no RUNPOD_API_KEY (the pod-scoped key RunPod gives every pod)"
    path = os.pathsep.join(filter(None, [env.get("PATH"), DEFAULT_PATH]))
    runpodctl = shutil.which("runpodctl", path=path)
    if not runpodctl:
        return False, "runpodctl is not on the pod's PATH (RunPod's images carry it)"
    child = dict((k, v) for k, v in env.items() if k.startswith("RUNPOD_"))
    child.update(PATH=path, HOME=env.get("HOME") or "/root")
    try:
        out = subprocess.run(
            [runpodctl, "stop", "pod", pod_id],
            env=child,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, "runpodctl: %s" % exc
    said = " ".join(out.stdout.decode("utf-8", "replace").split())[:300]
    if out.returncode != 0:
        return False, "runpodctl stop pod %s exited %d: %s" % (pod_id, out.returncode, said)
    return True, "asked RunPod to stop pod %s (runpodctl: %s)" % (pod_id, said or "ok")


def stop_server(cfg):
    """Stop vLLM (not the edge) under the supervisor that runs it: ``supervisorctl stop vllm``,
    or ``systemctl stop`` of its unit (with ``sudo -n`` when not root). Returns (ok, one line)."""
    if cfg.get("supervisor") == "systemd":
        argv = ["systemctl", "stop", cfg["unit"]]
        if os.geteuid() != 0:
            argv = ["sudo", "-n"] + argv
    else:
        argv = [cfg["supervisorctl"], "-c", cfg["supervisord_conf"], "stop", "vllm"]
    try:
        out = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=150
        )
    except OSError as exc:
        if cfg.get("supervisor") == "systemd":
            return False, "%s: %s" % (" ".join(argv), exc)
        return stop_through_socket(cfg["supervisord_conf"], "%s: %s" % (argv[0], exc))
    except subprocess.SubprocessError as exc:
        return False, "%s: %s" % (" ".join(argv), exc)
    said = " ".join(out.stdout.decode("utf-8", "replace").split())[-200:]
    if out.returncode != 0:
        return False, "%s exited %d: %s" % (" ".join(argv), out.returncode, said)
    return True, "stopped vLLM (%s); the edge answers 503 until the next start" % (said or " ".join(argv[-2:]))


def stop_through_socket(conf, why):
    """``supervisorctl stop vllm`` without supervisorctl, which lives in the venv (deleted, or being
    reinstalled, while supervisord still runs): the same XML-RPC call, over the Unix socket that
    supervisord.conf names. ``why``: why supervisorctl could not run, said if this fails too."""
    parser = configparser.RawConfigParser()
    try:
        parser.read(conf)
        path = parser.get("unix_http_server", "file").replace("%%", "%")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(150)
        sock.connect(path)
        connection = http.client.HTTPConnection("localhost", timeout=150)
        connection.sock = sock
        body = xmlrpc.client.dumps(("vllm", True), "supervisor.stopProcess")
        connection.request("POST", "/RPC2", body, {"Content-Type": "text/xml"})
        xmlrpc.client.loads(connection.getresponse().read())
    except xmlrpc.client.Fault as fault:
        if "NOT_RUNNING" in fault.faultString:
            return True, "vLLM was not running; the edge answers 503 until the next start"
        return False, "%s; supervisord's socket: %s" % (why, fault.faultString)
    except (OSError, configparser.Error, http.client.HTTPException, xmlrpc.client.Error) as exc:
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


def log(line):
    sys.stdout.write("%s podkit-idle: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), line))
    sys.stdout.flush()


def stop_on_purpose(cfg, by, why, stop, at=None):
    """Stop on purpose (idle, or ``podkit down``): first the marker the edge reads (who, why,
    when), then ``stop()``; a stop that fails takes the marker back, so the edge never says a
    server was stopped that still runs. Returns ``stop()``'s (ok, one line)."""
    marker = {"by": by, "at": time.time() if at is None else at, "why": why}
    marker.update(action=cfg.get("action"), host=cfg.get("host"))
    write_json(cfg["stopped_file"], marker)
    ok, said = stop()
    if not ok:
        try:
            os.unlink(cfg["stopped_file"])
        except OSError:
            pass
    return ok, said
