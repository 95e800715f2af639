"""Sleep, and wake on request (bare metal): the wake hook the edge asks while the server rests.

Bare metal only (a RunPod pod stops itself instead: a sleeping pod still bills its GPU). When the
watcher's idle time is up it either puts vLLM to sleep (``sleep``: a vLLM that was started with
``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``, which only GPU builds support: level 1,
weights kept in host RAM, the GPU's memory freed) or stops it (the CPU build has no sleep mode).
Either way the marker ``stopped_file`` says so (``how``: sleep or stop) before it happens.

The wake hook: the watcher serves ``GET /wake`` on the Unix socket ``wake_socket`` (0600, loopback
by nature). Caddy asks it (``forward_auth``) for each ``/v1`` request that passed the key check
while the stopped marker or the waking marker (``waking_file``) is in the run folder, and holds
the client's request meanwhile:

- stopped or asleep for idleness: start vLLM under its supervisor (or ``POST /wake_up``), wait
  for ``/health``, then prove it with a real completion (greedy, a few tokens, with the key read
  from its file on loopback); after a sleep the answer must be the one vLLM gave before it slept,
  else the server is restarted and proven again. Then the markers go and Caddy forwards the
  request. Requests that come meanwhile join the same wake.
- being stopped for idleness (the watcher, in this same process, wrote the marker and stops vLLM
  now): the request is held, and the wake begins as soon as the stop is done (a stop that did not
  happen lets the held requests through to the server that still runs). Every keyed request that
  comes while the server is stopping, stopped or waking joins the one wake, and is answered by the
  woken server.
- stopped with ``podkit down``: refused (503): the user stopped it, the GPU may be in other use.
- a wake that does not prove itself within ``wake_timeout_seconds`` of the request's arrival (the
  bound; 600 s unless the deploy says): 503 with ``Retry-After`` saying the server is still waking;
  a failed wake is not tried again for :data:`RETRY_SECONDS`.

The hook's socket takes a burst: its listen backlog is :data:`BACKLOG` (the standard library's 5
refused part of 50 requests arriving at once, which Caddy then answered 502). A request that reached
vLLM's port just as it closed (before the marker) gets the edge's error route, which asks the hook
again (the Caddyfile's ``handle_errors``). What the host wrote (a marker's text, a failed wake's
reason) reaches a client only through :func:`plain`: one line, no control or bidi character.

The last wake (when, from which stop, how long, its proof, how many requests it held) is kept in
``wake_file`` for ``podkit status``. Standard library only, any Python 3.8+; the key is read only
for the proof, and never written or logged.
"""

import hashlib
import json
import os
import re
import socketserver
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler

from podkit.remote.idle.stops import log, read_json, remove, run_quiet, supervisor_argv, write_json

#: The proof: a greedy completion of a few tokens (any model can continue code)
PROOF = {"prompt": "def add(a, b):\n    return", "max_tokens": 8, "temperature": 0}
RETRY_SECONDS = 30  # after a failed wake, requests are refused this long before the next try
RETRY_AFTER = 60  # what a 503 tells the client, as the edge's own 503s do
BACKLOG = 1024  # connections the hook's socket queues: a burst of keyed requests at a stop, every one held
#: What :func:`plain` removes: C0 and C1 controls, DEL, and the bidi embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]+")


def plain(text, most=200):
    """Text the host wrote (a marker's field, a failed wake's reason) as a client may see it: a
    string on one line, every control and bidi character (an escape sequence's ESC included) gone,
    at most ``most`` characters."""
    text = _UNSAFE.sub(" ", text if isinstance(text, str) else str(text))
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def decide(marker, waking, retry_at, now, host=None, stopping=False):
    """What the hook does with one request, from the stopped marker (None: none), whether a wake
    is under way, until when a failed wake is not retried, and whether the watcher is stopping the
    server for idleness right now. Returns ``(action, why)``: ``pass`` (nothing is stopped now),
    ``join`` (wait for the wake under way), ``wake`` (at once, or once the stop is done), or
    ``refuse`` with the one line the client gets. ``host``: the hook's own name for the host (the
    marker's is a fallback; either is shown through :func:`plain`)."""
    if waking:
        return "join", None
    if not marker:
        return "pass", None
    host = plain(host or marker.get("host") or "this host", 80)
    if marker.get("by") != "idle":
        by = "podkit down" if marker.get("by") == "podkit down" else "a stop on purpose"
        return "refuse", "the server on %s was stopped with %s: start it with podkit up INVENTORY --host %s" % (
            host,
            by,
            host,
        )
    if marker.get("action") == "runpod":
        return "refuse", "the pod %s is stopping (idle): podkit tunnel --wake, or podkit up, starts it again" % host
    if stopping:
        return "wake", None
    if now < retry_at:
        return "refuse", "the server on %s did not wake (%s): trying again in %d s" % (
            host,
            plain(marker.get("wake_error") or "see logs/idle.log"),
            retry_at - now,
        )
    return "wake", None


def call(url, body=None, key=None, timeout=10.0):
    """(HTTP status or None, parsed JSON or None) of a GET (or a POST of ``body``) on loopback."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
    try:
        with _NO_PROXY.open(request, timeout=timeout) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return None, None
    try:
        return status, json.loads(raw.decode("utf-8", "replace")) if raw else None
    except ValueError:
        return status, None


def prove(cfg, timeout=120.0):
    """A real completion on loopback, greedy: ``(ok, said, proof)``; the proof holds the tokens
    generated and a digest of the text (the text itself is the model's, not kept)."""
    try:
        with open(cfg["key_file"]) as handle:
            key = handle.read().strip()
    except OSError as exc:
        return False, "cannot read the key file for the proof: %s" % (exc.strerror or exc), None
    body = dict(PROOF, model=cfg.get("served_model_name"))
    status, answer = call(cfg["base_url"] + "/v1/completions", body, key, timeout)
    try:
        choice = answer["choices"][0]
        tokens = int((answer.get("usage") or {}).get("completion_tokens") or 0)
        text = choice["text"]
    except (TypeError, KeyError, IndexError, ValueError):
        return False, "the proof completion answered HTTP %s without a completion" % status, None
    if status != 200 or tokens < 1:
        return False, "the proof completion answered HTTP %s with %d tokens" % (status, tokens), None
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    return True, "a %d-token completion" % tokens, {"tokens": tokens, "digest": digest}


def sleep_server(cfg):
    """Put vLLM to sleep (level 1): first the proof the wake will be checked against, then
    ``POST /sleep?level=1``, then ``/is_sleeping`` must say so. Returns (ok, one line)."""
    ok, said, proof = prove(cfg)
    if not ok:
        return False, "no answer to check a wake against: %s" % said
    write_json(cfg["proof_file"], dict(proof, at=time.time()))
    status, _ = call(cfg["base_url"] + "/sleep?level=1", {}, timeout=120)
    if status != 200:
        return False, "POST /sleep?level=1 answered HTTP %s (does vLLM run with VLLM_SERVER_DEV_MODE=1?)" % status
    status, answer = call(cfg["base_url"] + "/is_sleeping")
    if not (answer or {}).get("is_sleeping"):
        return False, "vLLM did not go to sleep (/is_sleeping answered HTTP %s: %s)" % (status, answer)
    return True, "put vLLM to sleep (level 1: the GPU's memory freed, weights in host RAM); a request wakes it"


def until_healthy(cfg, deadline, clock=time.time, pause=time.sleep):
    while clock() < deadline:
        if call(cfg["base_url"] + "/health", timeout=5)[0] == 200:
            return True
        pause(0.5)
    return False


def wake(cfg, marker, clock=time.time, pause=time.sleep):
    """Start (or wake) vLLM and prove it: the record :func:`wake` leaves in ``wake_file``."""
    began = clock()
    deadline = began + float(cfg.get("wake_timeout_seconds") or 600)
    slept = marker.get("how") == "sleep"
    record = {"at": began, "from": marker, "how": "wake_up" if slept else "start"}
    if slept:
        status, _ = call(cfg["base_url"] + "/wake_up", {}, timeout=max(1.0, deadline - clock()))
        ok, said = status == 200, "POST /wake_up answered HTTP %s" % status
    else:
        ok, said = run_quiet(supervisor_argv(cfg, "start"), timeout=max(1.0, deadline - clock()))
    if ok and not until_healthy(cfg, deadline, clock, pause):
        ok, said = False, "vLLM did not answer /health within %d s" % (deadline - began)
    if ok:
        ok, said, proof = prove(cfg, timeout=max(1.0, deadline - clock()))
        reference = read_json(cfg.get("proof_file") or "") if slept else None
        if ok and reference and reference.get("digest") != proof["digest"]:
            # one operator saw corrupted answers after a wake: a server that answers otherwise is restarted
            record["answer_changed"] = True
            ok, said = run_quiet(supervisor_argv(cfg, "restart"), timeout=max(1.0, deadline - clock()))
            if ok and until_healthy(cfg, deadline, clock, pause):
                ok, said, proof = prove(cfg, timeout=max(1.0, deadline - clock()))
            elif ok:
                ok, said = False, "vLLM did not answer /health within %d s of its restart" % (deadline - began)
        if ok:
            record["proof"] = proof
    record.update(ok=ok, said=said, woke_at=clock(), seconds=round(clock() - began, 3))
    return record


class Hook:
    """The wake hook's decisions and the wake under way (one at a time; requests join it)."""

    def __init__(self, cfg, on_woke=None, waker=wake, clock=time.time):
        self.cfg, self.on_woke, self.waker, self.clock = cfg, on_woke, waker, clock
        self.lock = threading.Lock()
        self.current = None  # {"done": Event, "record": dict, "held": int, "deferred": bool}
        self.retry_at = 0.0
        self.stopping = False  # the watcher is stopping the server for idleness: a wake waits for it

    def request(self, path=None, headers=None):
        """One request from the edge (its path and headers are not needed): ``(HTTP status, JSON body or None)``; it returns when the
        request may go through (200), or with the reason it may not (503)."""
        arrived = self.clock()
        host = self.cfg.get("host")
        with self.lock:
            marker = read_json(self.cfg["stopped_file"])
            action, why = decide(marker, self.current is not None, self.retry_at, arrived, host, self.stopping)
            if action == "wake":
                self.current = {"done": threading.Event(), "record": None, "held": 0, "deferred": self.stopping}
                if not self.stopping:  # else it begins when the stop is done (:meth:`stop_done`)
                    self._begin(marker, arrived)
            current = self.current
            if current is not None:
                current["held"] += 1
        if action == "pass":
            return 200, None
        if action == "refuse":
            return 503, refusal(why)
        assert current is not None  # a request that waits joins the wake under way
        bound = float(self.cfg.get("wake_timeout_seconds") or 600)
        if not current["done"].wait(max(0.0, arrived + bound - self.clock())):
            return 503, refusal(
                "the server on %s is still waking after %d s: retry in a moment" % (plain(host or "this host"), bound)
            )
        record = current["record"]
        if record["ok"]:
            return 200, None
        return 503, refusal("the server on %s did not wake: %s" % (plain(host or "this host"), plain(record["said"])))

    def _begin(self, marker, at):
        """Start the wake of ``self.current`` in its own thread (the lock held)."""
        write_json(self.cfg["waking_file"], {"at": at, "from": marker})
        threading.Thread(target=self._wake, args=(marker, self.current), daemon=True).start()

    def stop_begins(self):
        """The watcher is about to stop the server for idleness: requests from now on wait for that
        stop, then for the wake it calls for."""
        with self.lock:
            self.stopping = True

    def stop_done(self, stopped):
        """The watcher's stop ended. A wake requests asked for meanwhile begins now; a stop that did
        not happen (``stopped`` false: vLLM still serves, the marker is gone) lets them through."""
        with self.lock:
            self.stopping = False
            current = self.current
            if current is None or not current.get("deferred"):
                return
            current["deferred"] = False
            marker = read_json(self.cfg["stopped_file"])
            if stopped and marker:
                self._begin(marker, self.clock())
                return
            current["record"] = {"ok": True, "said": "the idle stop did not happen: vLLM serves on"}
            current["record"]["requests_held"] = current["held"]
            self.current = None
        current["done"].set()

    def _wake(self, marker, current):
        try:
            record = self.waker(self.cfg, marker)
        except Exception as exc:  # the hook must answer every request it holds, whatever happened
            record = {"at": self.clock(), "from": marker, "ok": False, "said": "%s: %s" % (type(exc).__name__, exc)}
        with self.lock:
            record["requests_held"] = current["held"]
            if record["ok"]:
                remove(self.cfg["stopped_file"])
            else:
                self.retry_at = self.clock() + RETRY_SECONDS
                write_json(self.cfg["stopped_file"], dict(marker, wake_error=record["said"]))
            write_json(self.cfg["wake_file"], record)
            remove(self.cfg["waking_file"])
            current["record"], self.current = record, None
        current["done"].set()
        if self.on_woke is not None:
            self.on_woke(record)


def refusal(message):
    return {"error": {"message": message, "type": "service_unavailable", "code": 503}}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = BACKLOG  # socketserver's default of 5 refused part of a burst

    def handle_error(self, request, _client_address):  # Caddy closing a kept-alive connection: no trace
        pass


def serve_hook(hook, path):
    """Serve ``hook`` on the Unix socket ``path`` (0600) in a thread; returns the server. Each
    ``GET`` is answered with ``hook.request(path, headers)``: (HTTP status, JSON body or None)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # a Unix socket has no client address; the watcher logs wakes
            pass

        def do_GET(self):
            status, body = hook.request(self.path, self.headers)
            payload = json.dumps(body or {"ok": True}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 503:
                self.send_header("Retry-After", str(RETRY_AFTER))
            self.end_headers()
            self.wfile.write(payload)

    remove(path)
    old = os.umask(0o177)
    try:
        server = _Server(path, Handler)
    finally:
        os.umask(old)
    threading.Thread(target=server.serve_forever, args=(0.2,), daemon=True).start()
    return server


def sleeps(cfg):
    """Whether an idle stop puts vLLM to sleep (a GPU build started with sleep mode, bare metal)."""
    return bool(cfg.get("sleep")) and cfg.get("action") == "server" and not cfg.get("follow")


def rest_server(cfg, stop_server):
    """The idle stop on bare metal: sleep where vLLM runs with sleep mode, else ``stop_server``."""
    return sleep_server(cfg) if sleeps(cfg) else stop_server(cfg)


def asleep(cfg):
    """Whether vLLM sleeps: it still answers /metrics, so the clock would say idle again."""
    return (read_json(cfg["stopped_file"]) or {}).get("how") == "sleep"


def start_hook(watcher):
    """Serve the wake hook for the edge where the deploy asked for one (bare metal, not a cluster's
    follower); after a wake the watcher's idle clock starts again. Returns the server, or None."""
    cfg = watcher.cfg
    if not cfg.get("wake_socket") or cfg.get("follow") or cfg.get("action") != "server":
        return None

    def woke(record):
        if record.get("ok"):
            watcher.clock.idle_since, watcher.clock.previous = time.time(), None
            how, seconds, held = record.get("how"), record.get("seconds", 0), record.get("requests_held", 0)
            log("woke vLLM (%s) in %.1f s for %d request(s), proven by %s" % (how, seconds, held, record["said"]))
        else:
            log("could not wake vLLM: %s" % record.get("said"))

    remove(cfg["waking_file"])  # a wake this process did not finish is no wake
    watcher.hook = Hook(cfg, on_woke=woke)
    server = serve_hook(watcher.hook, cfg["wake_socket"])
    log("the wake hook listens on %s: a request with the key wakes vLLM" % cfg["wake_socket"])
    return server
