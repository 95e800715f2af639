"""What podctl does to the programs: ``supervise`` (start supervisord, or restart the programs it runs,
strays stopped first), ``down`` (stop vLLM on purpose, under the deploy lock; the edge stays up and
answers 503 saying so) and ``restore`` (put back the files a working server ran, and restart it).
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xmlrpc.client

from podkit.remote.podctl.base import read_json_dict, starttime
from podkit.remote.podctl.lock import read_holder_file
from podkit.remote.podctl.processes import proc_table
from podkit.remote.podctl.supervisor import program_strays, supervisor_state, supervisord_pid, supervisord_rpc


def reset_crashes(run_dir):
    """vLLM's exit count starts again at 0 when the deploy starts it."""
    with open(os.path.join(run_dir, "crashes"), "w") as handle:
        handle.write("0\n")


def supervise(cfg):
    """Bring supervision to what the deploy asked, without waiting for a program's start to finish
    (readiness is the deploy's next step): ``reload`` stops supervisord (and its programs) first,
    its config having changed; a supervisord that is not running is started (it starts every
    program); otherwise each of ``restart`` is stopped and started, and each program that is not
    running (FATAL after its retries, or STOPPED) is started, one that another stop is ending
    (STOPPING: the idle watcher's) once it stopped. Restarting vLLM zeroes its exit count."""
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
                settled(rpc.supervisor.stopProcess, name, True)
            elif states[name] == "STOPPING":
                stopped(rpc, name)
            if name == cfg.get("program", "vllm"):
                reset_crashes(run_dir)
            settled(rpc.supervisor.startProcess, name, False)
            done.append(("restarted " if restart else "started ") + name)
    except (OSError, xmlrpc.client.Error) as exc:
        return {"ok": False, "error": "supervisord: %s" % str(exc)[:300]}
    return {"ok": True, "done": done}


def stopped(rpc, name, timeout=120):
    """Wait out a stop someone else began (the idle watcher's, ``podkit down``): supervisord takes a
    start asked meanwhile for a program still running and drops it ("already running"), so the
    program would end stopped after a deploy that asked for it to run."""
    deadline = time.time() + timeout
    while rpc.supervisor.getProcessInfo(name)["statename"] == "STOPPING" and time.time() < deadline:
        time.sleep(0.2)


def settled(call, name, wait):
    """A stop or start through supervisord, where the program's own moves are no error: a stop of one
    that exited since its state was read (NOT_RUNNING), a start of one its autorestart began
    (ALREADY_STARTED), and a start whose program exited at once (SPAWN_ERROR, when supervisord reaps
    it inside the call): readiness, the deploy's next step, reads that exit and puts back the files
    that served, as it does for a start that fails later."""
    try:
        call(name, wait)
    except xmlrpc.client.Fault as fault:
        if not any(word in fault.faultString for word in ("NOT_RUNNING", "ALREADY_STARTED", "SPAWN_ERROR")):
            raise


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


def self_stop(cfg):
    """Wait (up to ``window`` seconds) for the idle watcher's proof that pod ``pod_id`` can stop itself,
    newer than ``after`` (what the deploy's probe saw: the watcher restarted since proves again at
    its start). ``{"ok": True, "self_stop": record}``, or ``{"ok": False, "error"}`` when none came."""
    deadline = time.time() + float(cfg.get("window") or 60)
    while True:
        record = (read_json_dict(cfg["idle_state"]) or {}).get("self_stop")
        if (
            isinstance(record, dict)
            and record.get("pod_id") == cfg.get("pod_id")
            and (record.get("checked_at") or 0) > (cfg.get("after") or 0)
        ):
            return {"ok": True, "self_stop": record}
        if time.time() >= deadline:
            return {
                "ok": False,
                "error": "the idle watcher proved nothing about stopping pod %s within %g s (is it running? see %s)"
                % (cfg.get("pod_id"), float(cfg.get("window") or 60), cfg.get("idle_log")),
            }
        time.sleep(0.5)


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
