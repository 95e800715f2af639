"""idle.py: podkit's idle watcher, run on the host by the same supervisor as vLLM.

    python3 idle.py /workspace/podkit/bin/idle.json

Every ``poll_seconds`` it reads vLLM's own counters over loopback (``/metrics``:
requests running and waiting, requests finished, prompt and generated tokens)
and keeps an idle clock: any request running or waiting, or any counter that
moved since the last read, is activity. The clock runs only while vLLM answers
(a server that is starting, loading a model or stopped is never idle), and
starts again whenever the server comes (back) up.

After ``idle_seconds`` of no activity (0: never; the clock is still kept, for
``podkit status``) it reads the counters once more and, if nothing runs or
waits, stops what costs money:

- ``action = "runpod"``: the pod itself, with ``runpodctl stop pod <id>``. The
  pod's id and its pod-scoped API key come from the container's environment
  (PID 1's, as RunPod sets it; ``/etc/rp_environment`` as a fallback); the key
  reaches runpodctl through its environment, never argv, and never the user's
  account key, which is not on the pod.
- ``action = "server"``: vLLM alone (bare metal), freeing the GPU, with
  ``supervisorctl stop vllm`` or ``systemctl stop``. The edge keeps answering,
  with a 503 that says how to start the server again.

Before it stops anything it writes ``stopped_file`` (why and when), which the
edge reads to say why it answers 503 and the launch script removes at the next
start. Every read leaves ``state_file`` (JSON: in flight, last request, the
deadline) for ``podkit status``; every decision is logged on stdout.

``idle.py CONFIG.json --stop`` is the same stop on purpose for ``podkit down`` (bare metal):
the marker, then the server, one JSON line out.

On a cluster's follower (``follow``: the head's address and store port) there are no counters
of its own to read: its vLLM runs headless for the head. It follows the head instead: once the
head's port answered, the clock runs while it does not (a TCP connect every poll, nothing sent),
and after ``idle_seconds`` (at most :data:`FOLLOW_GRACE_SECONDS`) the follower stops what costs
money the same way. So the head's idle stop (or ``podkit down``) stops the whole cluster.

Standard library only, any Python 3.8+; it never reads the API key.
"""

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

COUNTERS = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:request_success_total": "finished",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
}
MOVING = ("finished", "prompt_tokens", "generation_tokens")  # a change in any of these is a request
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
STOPPING_SECONDS = 60  # after a stop was asked: no second ask within this (the pod is going down)
FOLLOW_GRACE_SECONDS = 60  # a follower outlives its head by at most this (a head's restart takes longer)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")


def parse_metrics(text, counters=None):
    """The counters podkit watches (``counters``: metric -> name, default :data:`COUNTERS`), each
    summed over its labels (engines, finish reasons), from Prometheus text; a counter vLLM did not
    print is missing. None when none of them is there."""
    counters = counters or COUNTERS
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match or match.group(1) not in counters:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        name = counters[match.group(1)]
        found[name] = found.get(name, 0.0) + value
    return found or None


class Clock:
    """The idle clock. :meth:`observe` takes each read of the counters (None: vLLM did not
    answer) and says whether the host has been idle for ``idle_seconds``."""

    def __init__(self, idle_seconds):
        self.idle_seconds = idle_seconds
        self.idle_since = None  # the last activity, or the server's coming up; None while it is down
        self.last_request_at = None
        self.previous = None
        self.counts = None

    def observe(self, now, counts):
        """Record one read; True when the idle time is up (and nothing runs or waits)."""
        self.counts = counts
        if counts is None:
            self.idle_since, self.previous = None, None
            return False
        in_flight = counts.get("running", 0) + counts.get("waiting", 0)
        moved = self.previous is not None and any(counts.get(k) != self.previous.get(k) for k in MOVING)
        if in_flight > 0 or moved:
            self.idle_since = self.last_request_at = now
        elif self.idle_since is None:
            self.idle_since = now  # the server came (back) up: the clock starts now
        self.previous = counts
        return self.due(now)

    def in_flight(self):
        counts = self.counts or {}
        return int(counts.get("running", 0) + counts.get("waiting", 0))

    def due(self, now):
        return (
            self.idle_seconds > 0
            and self.counts is not None
            and self.in_flight() == 0
            and self.idle_since is not None
            and now - self.idle_since >= self.idle_seconds
        )

    def deadline(self):
        if self.idle_seconds <= 0 or self.idle_since is None:
            return None
        return self.idle_since + self.idle_seconds

    def up(self):
        return self.counts is not None

    def said(self, up):
        return "vLLM answers: the idle clock starts now" if up else "vLLM does not answer: the idle clock waits"

    def why(self):
        return "no request for %g min" % (self.idle_seconds / 60.0)


def follow_grace(idle_seconds):
    """How long a follower outlives a head that stopped answering: the idle time, at most
    :data:`FOLLOW_GRACE_SECONDS` (0: never)."""
    return min(idle_seconds, FOLLOW_GRACE_SECONDS) if idle_seconds > 0 else 0


class FollowClock(Clock):
    """A follower's clock: :meth:`observe` takes whether the head's port answered. Once the head
    was seen, the clock runs while it does not; due after ``idle_seconds`` (0: never)."""

    def __init__(self, idle_seconds, head):
        Clock.__init__(self, follow_grace(idle_seconds))
        self.head = head
        self.seen = False
        self.head_up = None

    def observe(self, now, up):
        self.head_up = bool(up)
        if up:
            self.seen, self.idle_since = True, None
            return False
        if self.seen and self.idle_since is None:
            self.idle_since = now  # the head stopped answering: the clock starts now
        return self.due(now)

    def in_flight(self):
        return 0

    def due(self, now):
        return (
            self.idle_seconds > 0
            and self.head_up is False
            and self.idle_since is not None
            and now - self.idle_since >= self.idle_seconds
        )

    def up(self):
        return bool(self.head_up)

    def said(self, up):
        return "the head at %s answers" % self.head if up else "the head at %s does not answer" % self.head

    def why(self):
        return "the head at %s stopped answering %g s ago" % (self.head, self.idle_seconds)


def head_answers(follow, timeout=2.0):
    """Whether the cluster's head still holds its store port: a TCP connect, nothing sent (torch's
    store takes a connection that closes at once in its stride)."""
    try:
        socket.create_connection((follow["address"], int(follow["port"])), timeout=timeout).close()
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def read_counts(url, timeout=5.0):
    """vLLM's counters from its loopback ``/metrics`` (no proxy, no key: it is not asked for there)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            if response.status != 200:
                return None
            return parse_metrics(response.read().decode("utf-8", "replace"))
    except (OSError, ValueError, urllib.error.URLError):
        return None


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
    except (OSError, subprocess.SubprocessError) as exc:
        return False, "%s: %s" % (" ".join(argv), exc)
    said = " ".join(out.stdout.decode("utf-8", "replace").split())[-200:]
    if out.returncode != 0:
        return False, "%s exited %d: %s" % (" ".join(argv), out.returncode, said)
    return True, "stopped vLLM (%s); the edge answers 503 until the next start" % (said or " ".join(argv[-2:]))


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


# The longest idle time and poll the watcher takes: a year (a larger one is a mistake, and an
# overflow waiting to happen in time.sleep or a deadline).
LONGEST_SECONDS = 366 * 24 * 3600


def _number(cfg, key, least, most, zero=True):
    """Why ``cfg[key]`` is not a finite number in [least, most] (``zero``: 0 allowed), or None."""
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "%s must be a number (got %s)" % (key, repr(value)[:60])
    if not math.isfinite(value) or value < least or value > most or (not zero and value == 0):
        return "%s must be a finite number from %s to %s%s (got %s)" % (
            key,
            least,
            most,
            "" if zero else ", not 0",
            "%.6g" % value,
        )
    return None


def config_problem(cfg):
    """Why the watcher cannot run with ``cfg`` (one line naming the key), or None: checked at its
    start, before it promises anything, and by the deploy before it writes the file."""
    if not isinstance(cfg, dict):
        return "the config is not a JSON object"
    for key in ("state_file", "stopped_file"):
        if not isinstance(cfg.get(key), str) or not cfg.get(key):
            return "%s must be a file path (got %r)" % (key, cfg.get(key))
    problem = _number(cfg, "idle_seconds", 0, LONGEST_SECONDS) or _number(cfg, "poll_seconds", 0.1, 3600, zero=False)
    if problem is None and cfg.get("retry_seconds") is not None:
        problem = _number(cfg, "retry_seconds", 1, LONGEST_SECONDS)
    if problem is None and cfg.get("usd_per_hour") is not None:
        problem = _number(cfg, "usd_per_hour", 0, 1000000)
    if problem:
        return problem
    if cfg.get("action") not in ("runpod", "server"):
        return "action must be runpod or server (got %r)" % (cfg.get("action"),)
    follow = cfg.get("follow")
    if follow is not None:
        port = follow.get("port") if isinstance(follow, dict) else None
        if (
            not isinstance(follow, dict)
            or not follow.get("address")
            or isinstance(port, bool)
            or not isinstance(port, int)
        ):
            return "follow must name the head's address and port (got %r)" % (follow,)
    elif not isinstance(cfg.get("metrics_url"), str) or not cfg["metrics_url"].startswith("http"):
        return "metrics_url must be vLLM's http:// metrics address (got %r)" % (cfg.get("metrics_url"),)
    if cfg.get("action") == "server":
        if cfg.get("supervisor") == "systemd":
            if not cfg.get("unit"):
                return "unit must name vLLM's systemd unit"
        elif not cfg.get("supervisorctl") or not cfg.get("supervisord_conf"):
            return "supervisorctl and supervisord_conf must name supervisord's control program and config"
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


class Watcher:
    def __init__(self, cfg, read=None, clock=time.time, stop=None):
        self.cfg = cfg
        self.now = clock
        follow = cfg.get("follow")
        idle_seconds = float(cfg.get("idle_seconds") or 0)
        if follow:
            head = "%s:%s" % (follow.get("address"), follow.get("port"))
            self.clock = FollowClock(idle_seconds, head)
            self.source, self.read = head, read or (lambda _source: head_answers(follow))
        else:
            self.clock = Clock(idle_seconds)
            self.source, self.read = cfg["metrics_url"], read or read_counts
        self.stop = stop or (lambda: stop_pod(cfg) if cfg.get("action") == "runpod" else stop_server(cfg))
        self.retry_at = 0.0
        self.last_error = None
        self.was_up = None
        previous = read_json(cfg["state_file"]) or {}
        self.clock.last_request_at = previous.get("last_request_at")  # survives a restart of the watcher

    def state(self, now):
        return {
            "checked_at": now,
            "server": "up" if self.clock.up() else "down",  # a follower's: its head's
            "follows": self.source if self.cfg.get("follow") else None,
            "in_flight": self.clock.in_flight(),
            "finished": int((self.clock.counts or {}).get("finished", 0)),
            "last_request_at": self.clock.last_request_at,
            "idle_since": self.clock.idle_since,
            "idle_stop_seconds": self.clock.idle_seconds,
            "deadline": self.clock.deadline(),
            "action": self.cfg.get("action"),
            "usd_per_hour": self.cfg.get("usd_per_hour"),
            "stopped": read_json(self.cfg["stopped_file"]),
            "error": self.last_error,
            "pid": os.getpid(),
        }

    def tick(self):
        now = self.now()
        due = self.clock.observe(now, self.read(self.source))
        up = self.clock.up()
        if up != self.was_up:
            log(self.clock.said(up))
            self.was_up = up
        if due and now >= self.retry_at:
            # read once more: a request that came in since the last read (or the head, back) keeps the host up
            if self.clock.observe(self.now(), self.read(self.source)):
                self.act(now)
        write_json(self.cfg["state_file"], self.state(now))

    def act(self, now):
        why = self.clock.why()
        ok, said = stop_on_purpose(self.cfg, "idle", why, self.stop, at=now)
        if ok:
            log("%s: %s" % (why, said))
            self.last_error = None
            # a pod takes a moment to go down, and answers meanwhile: do not ask again at once
            self.retry_at = now + STOPPING_SECONDS
            return
        self.last_error = said
        self.retry_at = now + float(self.cfg.get("retry_seconds") or 300)
        log("%s, but could not stop: %s (trying again in %d s)" % (why, said, self.retry_at - now))

    def run(self):
        minutes = self.clock.idle_seconds / 60.0
        what = "pod" if self.cfg.get("action") == "runpod" else "server"
        if self.cfg.get("follow"):
            plan = "stops the %s %g s after the head stops answering" % (what, self.clock.idle_seconds)
        else:
            plan = "stops the %s after %g idle min" % (what, minutes)
        log(
            "%s %s every %g s; %s"
            % (
                "following the head at" if self.cfg.get("follow") else "watching",
                self.source,
                float(self.cfg.get("poll_seconds") or 10),
                plan
                if minutes > 0
                else "idle stop is off (podkit_idle_stop_minutes = 0): the clock is kept for podkit status",
            )
        )
        while True:
            self.tick()
            time.sleep(float(self.cfg.get("poll_seconds") or 10))


def main(argv):
    """``idle.py CONFIG.json`` watches; ``idle.py CONFIG.json --stop`` stops the server now, as
    ``podkit down`` asks (through ``podctl down``), and prints the outcome as one JSON line."""
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["--stop"]):
        sys.stderr.write("usage: idle.py CONFIG.json [--stop]\n")
        return 2
    try:
        with open(argv[1]) as handle:
            cfg = json.load(handle)
        problem = config_problem(cfg)
    except (OSError, ValueError) as exc:
        problem = "cannot read it (%s)" % (getattr(exc, "strerror", None) or exc)
    if problem:
        # one line in its log, and an exit supervisord counts as a failed start (FATAL after its retries)
        log("%s: %s; re-apply (podkit up), which writes a valid one" % (argv[1], problem))
        return 2
    if argv[2:] == ["--stop"]:
        ok, said = stop_on_purpose(cfg, "podkit down", "stopped with podkit down", lambda: stop_server(cfg))
        sys.stdout.write(json.dumps({"ok": ok, "done" if ok else "error": said}) + "\n")
        return 0 if ok else 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Watcher(cfg).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
