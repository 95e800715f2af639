"""The watcher itself: every ``poll_seconds`` a read, the clock, and the stop when it runs out; and
:func:`main` (watch, or ``--stop`` for ``podkit down``).
"""

import json
import os
import signal
import sys
import time

from podkit.remote.idle.clock import Clock, FollowClock, head_answers, read_counts
from podkit.remote.idle.config import config_problem
from podkit.remote.idle.stops import (
    STOPPING_SECONDS,
    check_pod_stop,
    deploy_runs,
    log,
    read_json,
    stop_on_purpose,
    stop_pod,
    stop_server,
    write_json,
)
from podkit.remote.idle.wake import asleep, rest_server, sleeps, start_hook

#: Seconds between the stop marker and the last look at vLLM's counters: a request the edge sent to vLLM
#: just before the marker has reached its engine by then (milliseconds on loopback)
LAST_LOOK_SECONDS = 0.5
BUSY = "a request came as the server was to stop: it serves on, and the idle clock starts again"
DEPLOY_RUNS = "a deploy runs on this host: the idle stop waits for its end"


class Watcher:
    def __init__(self, cfg, read=None, clock=time.time, stop=None):
        self.cfg = cfg
        self.now = clock
        follow = cfg.get("follow")
        idle_seconds = float(cfg.get("idle_seconds") or 0)
        if follow:
            head = "%s:%s" % (follow.get("address"), follow.get("port"))
            self.clock = FollowClock(idle_seconds, head)  # type: Clock | FollowClock
            self.source, self.read = head, read or (lambda _source: head_answers(follow))
        else:
            self.clock = Clock(idle_seconds)
            self.source, self.read = cfg["metrics_url"], read or read_counts
        self.stop = stop or (lambda: stop_pod(cfg) if cfg.get("action") == "runpod" else rest_server(cfg, stop_server))
        self.retry_at = 0.0
        self.hook = None  # the wake hook (bare metal): podkit.remote.idle.wake.start_hook sets it
        self.last_error = None
        #: the proof that the pod can stop itself (a read of the pod with its own key), and when to prove it again
        self.self_stop = None
        self.self_stop_due = 0.0
        self.was_up = None
        self.deploy_held = False
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
            "self_stop": self.self_stop,
            "error": self.last_error,
            "pid": os.getpid(),
        }

    def prove_self_stop(self, now):
        """A pod that is to stop itself proves, before it must, that it can: the pod's own key and
        the same ways as the stop, asked for a read of the pod (at start, then every
        ``self_stop_check_seconds``, or after ``retry_seconds`` while it fails). A change is logged."""
        if self.cfg.get("action") != "runpod" or not self.clock.idle_seconds or now < self.self_stop_due:
            return
        before = self.self_stop
        self.self_stop = check_pod_stop(self.cfg)
        ok = self.self_stop["ok"]
        every = "self_stop_check_seconds" if ok else "retry_seconds"
        self.self_stop_due = now + float(self.cfg.get(every) or (6 * 3600 if ok else 300))
        if before is None or before.get("ok") != ok or before.get("via") != self.self_stop.get("via"):
            if ok:
                log(
                    "this pod can stop itself (RunPod answered a read of pod %s with its own key through %s)"
                    % (self.self_stop["pod_id"], self.self_stop["via"])
                )
            else:
                log("this pod cannot stop itself: %s" % self.self_stop["why"])

    def tick(self):
        now = self.now()
        self.prove_self_stop(now)
        due = self.clock.observe(now, self.read(self.source))
        up = self.clock.up()
        if up != self.was_up:
            log(self.clock.said(up))
            self.was_up = up
        held = bool(due) and deploy_runs(self.cfg)
        if held and not self.deploy_held:
            log(DEPLOY_RUNS)
        self.deploy_held = held
        if due and not held and now >= self.retry_at and not asleep(self.cfg):
            # read once more: a request that came in since the last read (or the head, back) keeps the host up
            if self.clock.observe(self.now(), self.read(self.source)):
                self.act(now)
        write_json(self.cfg["state_file"], self.state(now))

    def act(self, now):
        why = self.clock.why()
        how = "sleep" if sleeps(self.cfg) else "stop"
        hook = self.hook
        if hook is None:
            ok, said = stop_on_purpose(self.cfg, "idle", why, self.stop, at=now, how=how)
        else:  # requests that come while it stops are held by the hook, and wake it once it is down
            hook.stop_begins()
            ok, said = False, BUSY
            try:
                ok, said = stop_on_purpose(self.cfg, "idle", why, self.stop_unless_busy, at=now, how=how)
            finally:
                hook.stop_done(ok)
        if said == BUSY:
            log(said)
            return
        if ok:
            log("%s: %s" % (why, said))
            self.last_error = None
            # a pod takes a moment to go down, and answers meanwhile: do not ask again at once
            self.retry_at = now + STOPPING_SECONDS
            return
        self.last_error = said
        self.retry_at = now + float(self.cfg.get("retry_seconds") or 300)
        log("%s, but could not stop: %s (trying again in %d s)" % (why, said, self.retry_at - now))

    def stop_unless_busy(self):
        """The stop once the marker is written, after one look more at vLLM's counters: a request that
        reached vLLM before the marker sent the next ones to the wake hook keeps it serving."""
        time.sleep(LAST_LOOK_SECONDS)
        if not self.clock.observe(self.now(), self.read(self.source)):
            return False, BUSY
        return self.stop()

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
        start_hook(self)
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
