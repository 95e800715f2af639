"""Sleep, and wake on request (podkit/remote/idle/idle.py, in the idle watcher as the host runs it): the hook's decisions, one wake for every
request that comes meanwhile, a failed or slow wake answered with a 503 that says why, the wake
itself against a stand-in vLLM (a start under a stand-in supervisorctl, or /wake_up after
/sleep), always proven by a real completion with the key, and the hook served on its Unix socket.
The edge's side (Caddy asking the hook) is rendered here and run for real in tests/e2e/test_idle.py."""

import http.client
import json
import os
import socket
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import idle

KEY = "sk-wake-test-key"


def marker(by="idle", how="stop", action="server"):
    return {"by": by, "how": how, "action": action, "host": "box", "at": 1000.0, "why": "no request for 30 min"}


DECISIONS = {
    "nothing rests (the marker went meanwhile): through": (None, False, 0, "pass"),
    "stopped for idleness: wake it": (marker(), False, 0, "wake"),
    "asleep for idleness: wake it": (marker(how="sleep"), False, 0, "wake"),
    "a wake under way: join it": (marker(), True, 0, "join"),
    "a wake under way and the marker already gone: still join it": (None, True, 0, "join"),
    "stopped with podkit down: the user's stop stands": (marker(by="podkit down"), False, 0, "refuse"),
    "a pod going down for idleness: nothing to wake here": (marker(action="runpod"), False, 0, "refuse"),
    "a wake failed a moment ago: not again at once": (marker(), False, 2000.0, "refuse"),
    "a wake failed long enough ago: try again": (marker(), False, 999.0, "wake"),
}


@pytest.mark.parametrize("case", DECISIONS.values(), ids=list(DECISIONS))
def test_what_the_hook_does_with_a_request(case):
    found, waking, retry_at, expected = case
    action, why = idle.decide(found, waking, retry_at, 1000.0)
    assert action == expected
    assert (why is None) == (action != "refuse") and "\n" not in (why or "")


def test_a_refusal_says_why_and_how_to_start_it():
    assert idle.decide(marker(by="podkit down"), False, 0, 0)[1] == (
        "the server on box was stopped with podkit down: start it with podkit up INVENTORY --host box"
    )
    failed = dict(marker(), wake_error="vLLM did not answer /health within 600 s")
    assert idle.decide(failed, False, 1030.0, 1000.0)[1] == (
        "the server on box did not wake (vLLM did not answer /health within 600 s): trying again in 30 s"
    )


def hook_config(tmp_path, **changes):
    cfg = {
        "host": "box",
        "stopped_file": str(tmp_path / "stopped.json"),
        "waking_file": str(tmp_path / "waking.json"),
        "wake_file": str(tmp_path / "idle.json"),
        "proof_file": str(tmp_path / "proof.json"),
        "wake_timeout_seconds": 30,
    }
    cfg.update(changes)
    return cfg


def rest(cfg, **changes):
    Path(cfg["stopped_file"]).write_text(json.dumps({**marker(), **changes}))


def test_requests_that_come_during_a_wake_join_it_and_all_go_through(tmp_path):
    cfg = hook_config(tmp_path)
    rest(cfg)
    release, wakes, woke = threading.Event(), [], []

    def waker(_cfg, found):
        wakes.append(found)
        assert os.path.exists(cfg["waking_file"])  # the edge sends every request here meanwhile
        release.wait(10)
        return {"at": 1.0, "from": found, "ok": True, "said": "a 8-token completion", "seconds": 4.2}

    hook = idle.Hook(cfg, on_woke=woke.append, waker=waker)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(hook.request())) for _ in range(3)]
    for thread in threads:
        thread.start()
    while hook.current is None or hook.current["held"] < 3:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(10)
    assert answers == [(200, None)] * 3 and len(wakes) == 1
    record = json.loads(Path(cfg["wake_file"]).read_text())
    assert record["requests_held"] == 3 and record["ok"] and woke == [record]
    assert not os.path.exists(cfg["stopped_file"]) and not os.path.exists(cfg["waking_file"])
    assert hook.request() == (200, None)  # nothing rests any more


def test_a_failed_wake_answers_503_with_why_and_is_not_tried_again_at_once(tmp_path):
    cfg = hook_config(tmp_path)
    rest(cfg)
    now = [5000.0]
    tries = []

    def waker(_cfg, found):
        tries.append(1)
        return {"ok": False, "said": "supervisorctl start vllm exited 7: ERROR (spawn error)"}

    hook = idle.Hook(cfg, waker=waker, clock=lambda: now[0])
    status, body = hook.request()
    assert status == 503 and body["error"]["message"] == (
        "the server on box did not wake: supervisorctl start vllm exited 7: ERROR (spawn error)"
    )
    # the marker is back (the edge keeps asking the hook), with why the wake failed
    assert json.loads(Path(cfg["stopped_file"]).read_text())["wake_error"].startswith("supervisorctl start")
    status, body = hook.request()
    assert status == 503 and "did not wake (supervisorctl start vllm exited 7" in body["error"]["message"]
    assert len(tries) == 1
    now[0] += idle.RETRY_SECONDS
    hook.request()
    assert len(tries) == 2


def test_a_wake_slower_than_the_bound_answers_503_and_finishes_for_the_next_request(tmp_path):
    cfg = hook_config(tmp_path, wake_timeout_seconds=0.2)
    rest(cfg)
    release = threading.Event()
    hook = idle.Hook(cfg, waker=lambda c, m: release.wait(10) and {"ok": True, "said": "ok", "seconds": 9})
    status, body = hook.request()
    assert (
        status == 503 and body["error"]["message"] == "the server on box is still waking after 0 s: retry in a moment"
    )
    release.set()
    while hook.current is not None:
        time.sleep(0.01)
    assert hook.request() == (200, None)


def held(hook, count):
    """``count`` requests sent to ``hook`` at once, each in its thread; their answers, once all are held."""
    answers, threads = [], [threading.Thread(target=lambda: answers.append(hook.request())) for _ in range(count)]
    for thread in threads:
        thread.start()
    while hook.current is None or hook.current["held"] < count:
        time.sleep(0.01)
    return answers, threads


@pytest.mark.parametrize("stopped", [True, False], ids=["the stop happens", "the stop does not happen"])
def test_requests_that_come_while_the_server_stops_wait_for_the_stop_then_the_wake(tmp_path, stopped):
    """The watcher wrote the marker and stops vLLM: a request meanwhile is neither refused nor sent to
    a server going down; it is held, and the wake begins once the stop is done. A stop that did not
    happen (a request came as it was to stop) lets them through to the server that serves on."""
    cfg = hook_config(tmp_path)
    wakes = []

    def waker(_cfg, found):
        wakes.append(found)
        return {"at": 1.0, "from": found, "ok": True, "said": "a 8-token completion", "seconds": 4.2}

    hook = idle.Hook(cfg, waker=waker)
    hook.stop_begins()
    rest(cfg)
    answers, threads = held(hook, 5)
    assert wakes == [] and not os.path.exists(cfg["waking_file"])  # nothing starts while it stops
    if not stopped:
        os.unlink(cfg["stopped_file"])  # stop_on_purpose takes the marker back
    hook.stop_done(stopped)
    for thread in threads:
        thread.join(10)
    assert answers == [(200, None)] * 5
    assert len(wakes) == (1 if stopped else 0) and hook.current is None
    assert os.path.exists(cfg["wake_file"]) is stopped


def test_the_hooks_socket_queues_a_burst_of_50_connections(tmp_path):
    """Go's dialer (Caddy's) does not wait for a full Unix socket's backlog: it is refused at once. The
    standard library's backlog of 5 refused part of 50 requests arriving together; the hook's queues them."""
    server = idle._Server(str(tmp_path / "wake.sock"), BaseHTTPRequestHandler)  # listening, not accepting yet
    clients = []
    try:
        for _ in range(50):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)  # as Go dials
            clients.append(client)
            client.connect(str(tmp_path / "wake.sock"))  # BlockingIOError (EAGAIN) past the backlog
    finally:
        for client in clients:
            client.close()
        server.server_close()
    assert len(clients) == 50


def test_the_hooks_answers_show_what_the_host_wrote_only_as_plain_text(tmp_path):
    """A forged or odd stopped.json reaches the client through the hook's 503: one line, no escape
    sequence or bidi override, never another stopper's words, the host named by the hook's own config."""
    cfg = hook_config(tmp_path)
    hostile = "\x1b]0;owned\x07\u202ebox\nrm -rf ~"
    rest(cfg, by="\x1b[2Jsomeone", host=hostile)
    status, body = idle.Hook(cfg).request()
    assert status == 503 and body["error"]["message"] == (
        "the server on box was stopped with a stop on purpose: start it with podkit up INVENTORY --host box"
    )
    rest(cfg, wake_error="vLLM \x1b[31msaid\x1b[0m\n\u2066no" + "x" * 500)
    hook = idle.Hook(cfg)
    hook.retry_at = time.time() + 30
    message = hook.request()[1]["error"]["message"]
    assert "\x1b" not in message and "\n" not in message and "\u2066" not in message and len(message) < 300
    assert idle.plain(hostile) == "]0;owned box rm -rf ~"


def test_a_waker_that_raises_still_answers_every_request(tmp_path):
    cfg = hook_config(tmp_path)
    rest(cfg)
    status, body = idle.Hook(cfg, waker=lambda c, m: 1 / 0).request()
    assert status == 503 and "ZeroDivisionError" in body["error"]["message"]


class StandInVllm:
    """vLLM's routes the wake uses, on loopback: /health (503 until started), /v1/completions (with
    the key only), /sleep, /wake_up, /is_sleeping; ``after_wake`` is what it answers once woken."""

    def __init__(self, started=True, after_wake=" a + b"):
        self.started, self.asleep, self.woken = started, False, False
        self.after_wake, self.calls = after_wake, []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body):
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                stand_in.calls.append(("GET", self.path, None))
                if self.path == "/health":
                    return self.reply(200 if stand_in.started else 503, {})
                if self.path == "/is_sleeping":
                    return self.reply(200, {"is_sleeping": stand_in.asleep})
                self.reply(404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stand_in.calls.append(("POST", self.path, self.headers.get("Authorization")))
                if self.path == "/sleep?level=1":
                    stand_in.asleep = True
                    return self.reply(200, {})
                if self.path == "/wake_up":
                    stand_in.asleep, stand_in.woken = False, True
                    return self.reply(200, {})
                if self.path == "/v1/completions":
                    if self.headers.get("Authorization") != f"Bearer {KEY}":
                        return self.reply(401, {"error": "unauthorized"})
                    assert body["temperature"] == 0 and body["model"] == "tiny-coder"
                    text = stand_in.after_wake if stand_in.woken else " a + b"
                    return self.reply(200, {"choices": [{"text": text}], "usage": {"completion_tokens": 4}})
                self.reply(404, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]


@pytest.fixture
def vllm():
    made = []

    def make(**kwargs):
        made.append(StandInVllm(**kwargs))
        return made[-1]

    yield make
    for server in made:
        server.server.shutdown()
        server.server.server_close()


def server_config(tmp_path, stand_in, **changes):
    """A host's config with a stand-in supervisorctl that starts (or restarts) the stand-in vLLM."""
    control = tmp_path / "supervisorctl"
    control.write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/supervisorctl.log"\necho "vllm: started"\n')
    control.chmod(0o755)
    key = tmp_path / "api_key"
    key.write_text(KEY + "\n")
    return hook_config(
        tmp_path,
        base_url=stand_in.url,
        key_file=str(key),
        served_model_name="tiny-coder",
        supervisor="supervisord",
        supervisorctl=str(control),
        supervisord_conf="/nowhere/supervisord.conf",
        **changes,
    )


def supervisorctl_calls(tmp_path):
    log = tmp_path / "supervisorctl.log"
    return [line.split()[-2:] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.proc
def test_a_stopped_server_is_started_and_proven_by_a_real_completion_with_the_key(tmp_path, vllm):
    stand_in = vllm(started=False)
    cfg = server_config(tmp_path, stand_in)
    threading.Timer(0.3, lambda: setattr(stand_in, "started", True)).start()  # vLLM comes up
    record = idle.wake(cfg, marker())
    assert record["ok"] and record["how"] == "start" and record["from"] == marker(), record
    assert record["proof"]["tokens"] == 4 and record["said"] == "a 4-token completion"
    assert supervisorctl_calls(tmp_path) == [["start", "vllm"]]
    assert ("POST", "/v1/completions", f"Bearer {KEY}") in stand_in.calls
    assert KEY not in json.dumps(record)


@pytest.mark.proc
def test_a_server_that_never_answers_is_a_failed_wake_within_the_bound(tmp_path, vllm):
    stand_in = vllm(started=False)
    record = idle.wake(server_config(tmp_path, stand_in, wake_timeout_seconds=1), marker())
    assert not record["ok"] and record["said"] == "vLLM did not answer /health within 1 s"


@pytest.mark.proc
def test_a_wrong_key_file_fails_the_proof(tmp_path, vllm):
    stand_in = vllm()
    cfg = server_config(tmp_path, stand_in)
    Path(cfg["key_file"]).write_text("sk-not-the-key\n")
    record = idle.wake(cfg, marker())
    assert not record["ok"] and record["said"] == "the proof completion answered HTTP 401 without a completion"


@pytest.mark.proc
def test_sleep_then_wake_up_proven_by_the_same_answer_as_before_the_sleep(tmp_path, vllm):
    stand_in = vllm()
    cfg = server_config(tmp_path, stand_in, sleep=True, action="server")
    ok, said = idle.rest_server(cfg, stop_server=lambda c: pytest.fail("a server with sleep mode is not stopped"))
    assert ok and stand_in.asleep, said
    assert json.loads(Path(cfg["proof_file"]).read_text())["tokens"] == 4
    record = idle.wake(cfg, marker(how="sleep"))
    assert record["ok"] and record["how"] == "wake_up" and not record.get("answer_changed"), record
    assert supervisorctl_calls(tmp_path) == []  # no start: the process stayed
    assert [c[1] for c in stand_in.calls if c[0] == "POST"] == [
        "/v1/completions",
        "/sleep?level=1",
        "/wake_up",
        "/v1/completions",
    ]


@pytest.mark.proc
def test_a_server_that_answers_otherwise_after_its_sleep_is_restarted(tmp_path, vllm):
    stand_in = vllm(after_wake=" corrupted!")
    cfg = server_config(tmp_path, stand_in, sleep=True, action="server")
    assert idle.sleep_server(cfg)[0]
    record = idle.wake(cfg, marker(how="sleep"))
    assert record["answer_changed"] and supervisorctl_calls(tmp_path) == [["restart", "vllm"]]
    assert record["ok"] is True  # the stand-in answers the same wrong way after its restart: proven by a completion


def test_sleep_mode_is_used_only_where_the_deploy_asked_for_it_on_bare_metal():
    assert idle.sleeps({"sleep": True, "action": "server"})
    assert not idle.sleeps({"sleep": True, "action": "runpod"})
    assert not idle.sleeps({"sleep": False, "action": "server"})
    assert not idle.sleeps({"sleep": True, "action": "server", "follow": {"address": "10.0.0.1", "port": 1}})


def test_an_asleep_server_is_put_to_sleep_once_and_a_wake_starts_the_clock_again(tmp_path):
    """vLLM asleep still answers /metrics with counters that do not move: the watcher must neither
    ask it to sleep again nor count the sleep as idle time once it is woken."""
    sleeps = []
    cfg = {**hook_config(tmp_path), "state_file": str(tmp_path / "idle.json"), "action": "server", "sleep": True}
    cfg.update(idle_seconds=60, metrics_url="http://127.0.0.1:9/metrics", wake_socket=None)
    now = [1000.0]
    reading = {"running": 0, "waiting": 0, "finished": 3, "prompt_tokens": 9, "generation_tokens": 9}
    watcher = idle.Watcher(
        cfg, lambda url: dict(reading), lambda: now[0], stop=lambda: sleeps.append(now[0]) or (True, "ok")
    )
    for _ in range(40):
        watcher.tick()
        now[0] += 5
    assert sleeps == [1060.0]
    assert json.loads(Path(cfg["stopped_file"]).read_text())["how"] == "sleep"
    os.unlink(cfg["stopped_file"])  # the hook woke it: the marker goes, the clock starts again
    woke_at = now[0]
    watcher.clock.idle_since = woke_at
    for _ in range(14):
        watcher.tick()
        now[0] += 5
    assert sleeps == [1060.0, woke_at + 60]


def unix_get(path):
    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX)
    conn.sock.connect(path)
    conn.request("GET", "/wake", headers={"X-Forwarded-Uri": "/v1/chat/completions"})
    answer = conn.getresponse()
    return answer.status, answer.getheader("Retry-After"), json.loads(answer.read())


def test_the_hook_is_served_on_a_socket_only_its_user_may_open(tmp_path):
    cfg = hook_config(tmp_path)
    path = str(tmp_path / "idle.sock")
    server = idle.serve_hook(idle.Hook(cfg, waker=lambda c, m: {"ok": True, "said": "ok", "seconds": 1}), path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert unix_get(path) == (200, None, {"ok": True})
        rest(cfg, by="podkit down")
        status, retry, body = unix_get(path)
        assert (status, retry) == (503, str(idle.RETRY_AFTER)) and "podkit down" in body["error"]["message"]
        rest(cfg)
        assert unix_get(path)[0] == 200 and not os.path.exists(cfg["stopped_file"])
    finally:
        server.shutdown()
        server.server_close()
