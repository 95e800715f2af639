"""The idle clock: vLLM's counters read over loopback, what counts as activity, and on a cluster's
follower the head's store port instead.
"""

import re
import socket
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
FOLLOW_GRACE_SECONDS = 60  # a follower outlives its head by at most this (a head's restart takes longer)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")


def parse_metrics(text, counters=None):
    """The counters podkit watches (``counters``: metric -> name, default :data:`COUNTERS`), each
    summed over its labels (engines, finish reasons), from Prometheus text; a counter vLLM did not
    print is missing. None when none of them is there."""
    counters = counters or COUNTERS
    found = {}  # type: dict[str, float]
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
