"""The local front of ``podkit tunnel --wake`` (podkit/client/wakefront.py, podkit_cli/wakeup.py):
what the hook does with each request (only a request with the key wakes a host; the ones that
come meanwhile join that wake; a failed or slow wake answers 503 saying why and what to run), the
Caddyfile it runs, and the real Caddy holding a request while a stand-in host wakes. The whole
path against a pod that stopped itself is tests/e2e/test_migration.py's last test."""

import http.client
import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from podkit.client.connect import ClientSettings
from podkit.client.wakefront import RETRY_SECONDS, Front, WakeHook, decide, front_caddyfile, keyed, through_front

KEY = "sk-front-test-key"

DECISIONS = {
    "no key, the host stopped: nothing wakes": (False, False, False, 0, "deny"),
    "no key, the host up: refused all the same": (False, True, False, 0, "deny"),
    "no key during a wake: refused, it does not join": (False, False, True, 0, "deny"),
    "the key, the host up: through": (True, True, False, 0, "pass"),
    "the key, the host stopped: wake it": (True, False, False, 0, "wake"),
    "the key during a wake: join it": (True, False, True, 0, "join"),
    "the key, a wake failed a moment ago: not again at once": (True, False, False, 2000.0, "refuse"),
    "the key, a wake failed long enough ago: try again": (True, False, False, 999.0, "wake"),
}


@pytest.mark.parametrize("case", DECISIONS.values(), ids=list(DECISIONS))
def test_what_the_front_does_with_a_request(case):
    key, forward_open, waking, retry_at, expected = case
    assert decide(key, forward_open, waking, retry_at, 1000.0)[0] == expected


@pytest.mark.parametrize(
    "header, x_api_key, ok",
    [
        (f"Bearer {KEY}", None, True),
        (None, None, False),
        ("", None, False),
        ("Bearer ", None, False),
        ("Bearer sk-other", None, False),
        (KEY, None, False),
        # as the edge takes it: x-api-key alone (Claude Code), and every key header sent holds the key
        (None, KEY, True),
        (None, "sk-other", False),
        (None, "", False),
        (f"Bearer {KEY}", KEY, True),
        (f"Bearer {KEY}", "sk-other", False),
        ("Bearer sk-other", KEY, False),
    ],
)
def test_the_key_is_taken_as_the_edge_takes_it(header, x_api_key, ok):
    assert keyed(header, KEY, x_api_key) is ok


class Host:
    """A stand-in host behind the front: ``up`` says whether its forward is open; a wake sets it."""

    def __init__(self, wake_ok=True, said="resumed in 1.0 s"):
        self.up, self.wake_ok, self.said, self.woken = False, wake_ok, said, 0
        self.release = threading.Event()
        self.release.set()

    def waker(self, name):
        self.woken += 1
        self.release.wait(10)
        self.up = self.wake_ok
        return self.wake_ok, self.said


def hook_for(host, **kwargs):
    return WakeHook(
        {"coder-b": KEY}, host.waker, lambda name: host.up, lambda n: f"podkit up inv.py --host {n}", **kwargs
    )


def test_without_the_key_nothing_wakes():
    host = Host()
    hook = hook_for(host)
    for header in (None, "Bearer wrong"):
        status, body = hook.request("coder-b", header)
        assert status == 401 and body["error"]["message"] == "missing or wrong API key"
    assert host.woken == 0 and not host.up and hook.wakes == []


def test_requests_that_come_during_a_wake_join_it_and_all_go_through():
    host = Host()
    host.release.clear()
    hook = hook_for(host)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(hook.request("coder-b", f"Bearer {KEY}"))) for _ in "abc"]
    for thread in threads:
        thread.start()
    while "coder-b" not in hook.current or hook.current["coder-b"]["held"] < 3:
        time.sleep(0.01)
    host.release.set()
    for thread in threads:
        thread.join(10)
    assert answers == [(200, None)] * 3 and host.woken == 1
    (wake,) = hook.wakes
    assert wake["ok"] and wake["held"] == 3 and wake["said"] == "resumed in 1.0 s" and wake["seconds"] >= 0
    assert hook.request("coder-b", f"Bearer {KEY}") == (200, None) and host.woken == 1  # up now: no wake


def test_a_failed_wake_says_why_and_what_to_run_and_is_not_tried_again_at_once():
    host = Host(wake_ok=False, said="pod coder-b (podb1) came back with zero GPUs")
    now = [100.0]
    hook = hook_for(host, clock=lambda: now[0])
    status, body = hook.request("coder-b", f"Bearer {KEY}")
    assert status == 503 and body["error"]["message"] == (
        "coder-b did not come back: pod coder-b (podb1) came back with zero GPUs; run podkit up inv.py --host coder-b"
    )
    status, body = hook.request("coder-b", f"Bearer {KEY}")
    assert status == 503 and body["error"]["message"].startswith("coder-b did not come back (pod coder-b (podb1)")
    assert f"trying again in {RETRY_SECONDS} s, or run podkit up inv.py --host coder-b" in body["error"]["message"]
    assert host.woken == 1
    now[0] += RETRY_SECONDS
    hook.request("coder-b", f"Bearer {KEY}")
    assert host.woken == 2


def test_a_wake_past_the_bound_answers_503_and_the_wake_goes_on():
    host = Host()
    host.release.clear()
    hook = hook_for(host, timeout=0.2)
    status, body = hook.request("coder-b", f"Bearer {KEY}")
    assert status == 503 and body["error"]["message"].startswith("coder-b is still starting after 0 s")
    host.release.set()
    while "coder-b" in hook.current:
        time.sleep(0.01)
    assert hook.request("coder-b", f"Bearer {KEY}") == (200, None)


def test_a_waker_that_raises_still_answers_and_an_unknown_host_is_404():
    hook = WakeHook({"coder-b": KEY}, lambda name: 1 / 0, lambda name: False, lambda n: "podkit up")
    status, body = hook.request("coder-b", f"Bearer {KEY}")
    assert status == 503 and "ZeroDivisionError" in body["error"]["message"]
    assert hook.request("coder-x", f"Bearer {KEY}")[0] == 404


TLS_FRONT = Front("coder-b", 18000, 41234, "/state/ca/coder-b.crt", "PODKIT_KEY_0")


def test_the_front_checks_the_key_before_the_hook_and_holds_no_key():
    text = front_caddyfile(
        [TLS_FRONT, Front("box", 18001, 41235, None, "PODKIT_KEY_1")], "/tmp/podkit-wake-x/wake.sock"
    )
    coder, box = text.split("http://127.0.0.1:18000 {")[1].split("http://127.0.0.1:18001 {")
    api = coder[coder.index("handle @api {") : coder.index("handle /v1/* {")]
    assert 'header Authorization "Bearer {env.PODKIT_KEY_0}"' in coder and "{env.PODKIT_KEY_1}" in box
    # only a keyed /v1 request reaches the hook; it asks before the request is forwarded
    assert text.count("forward_auth") == 2 and "forward_auth" not in coder.split("handle @api {")[0]
    assert api.index("forward_auth unix//tmp/podkit-wake-x/wake.sock {") < api.index(
        "reverse_proxy https://127.0.0.1:41234"
    )
    assert "uri /wake/coder-b" in api and "tls_trust_pool file /state/ca/coder-b.crt" in api
    assert "reverse_proxy http://127.0.0.1:41235" in box and "tls_trust_pool" not in box
    assert "bind 127.0.0.1" in coder and "admin off" in text and KEY not in text


def test_a_client_of_the_front_speaks_plain_http_to_loopback():
    cs = ClientSettings("coder-b", "https://10.203.0.7:8000/v1", "tiny", 4096, "/k", "/ca.crt", "internal")
    local = through_front(cs, 18000)
    assert (local.base_url, local.ca_file, local.tls, local.way) == ("http://127.0.0.1:18000/v1", None, "off", "tunnel")


class Upstream:
    """A stand-in edge on the forward's port: answers every request with the path it got."""

    def __init__(self, port):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                payload = json.dumps({"path": self.path, "key": self.headers.get("Authorization")}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(port, key=None, header="Authorization"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = {header: f"Bearer {key}" if header == "Authorization" else key} if key else {}
    conn.request("POST", "/v1/chat/completions", body=b"{}", headers=sent)
    answer = conn.getresponse()
    return answer.status, json.loads(answer.read() or b"{}")


@pytest.mark.proc
def test_caddy_holds_a_keyed_request_while_the_host_wakes_and_a_keyless_one_wakes_nothing():
    from podkit_cli.wakeup import LocalFront, caddy_binary

    port, forward = free_port(), free_port()
    front_spec = Front("coder-b", port, forward, None, "PODKIT_KEY_0")
    check = subprocess.run(
        [caddy_binary(), "adapt", "--adapter", "caddyfile", "--config", "/dev/stdin"],
        input=front_caddyfile([front_spec], "/tmp/x/wake.sock"),
        capture_output=True,
        text=True,
        env={"PODKIT_KEY_0": KEY, "HOME": "/tmp"},
    )
    assert check.returncode == 0, check.stderr
    upstream = []

    def waker(name):  # the host comes back: its edge answers on the forward's port
        upstream.append(Upstream(forward))
        return True, "resumed in 0.1 s"

    hook = WakeHook({"coder-b": KEY}, waker, lambda name: bool(upstream), lambda n: "podkit up")
    front = LocalFront([front_spec], {"coder-b": KEY}, hook)
    try:
        assert post(port)[0] == 401 and post(port, "wrong")[0] == 401 and upstream == []
        status, body = post(port, KEY)
        assert status == 200 and body == {"path": "/v1/chat/completions", "key": f"Bearer {KEY}"}
        assert len(upstream) == 1 and hook.wakes[0]["held"] == 1
        assert post(port, KEY)[0] == 200 and len(upstream) == 1
        # the key as x-api-key alone, as the edge takes it: through, as the bearer key the edge checks
        status, body = post(port, KEY, "X-Api-Key")
        assert status == 200 and body["key"] == f"Bearer {KEY}"
        assert post(port, "wrong", "X-Api-Key")[0] == 401
    finally:
        front.stop()
        for server in upstream:
            server.close()


WAKER_CASES = {
    "the pod comes back, the deploy passes, the forward opens": (["coder-b"], [], 0, None, True, "resumed in "),
    "no GPU free on its machine": (
        [],
        [
            "pod coder-b (podb1) cannot get its GPU back: its machine has no free GPU now (RunPod says: not enough "
            "free GPUs on the host machine); move it to a new pod on the same volume: podkit up INV --host coder-b --move"
        ],
        0,
        None,
        False,
        "pod coder-b (podb1) cannot get its GPU back",
    ),
    "the deploy fails": (["coder-b"], [], 1, None, False, "the deploy failed (its output is above)"),
    "the inventory no longer lists it": (["coder-b"], [], 0, "no host coder-b in the inventory", False, "no host"),
}


@pytest.mark.parametrize("case", WAKER_CASES.values(), ids=list(WAKER_CASES))
def test_a_wake_runs_what_podkit_up_runs_then_opens_the_forward(case, monkeypatch):
    import click

    from podkit_cli import lifecycle, pods
    from podkit_cli.wakeup import Waker

    up, problems, deploy_rc, reopen_error, ok, said = case
    ran = []
    monkeypatch.setattr(
        lifecycle, "resume", lambda select, names, wait, inv: ran.append(("resume", names)) or (up, problems, {})
    )
    monkeypatch.setattr(pods, "apply_deploy", lambda inv, names, started: ran.append(("deploy", names)) or deploy_rc)

    def reopen(name):
        ran.append(("reopen", name))
        if reopen_error:
            raise click.ClickException(reopen_error)

    result = Waker("inventories/runpod.py", object(), reopen)("coder-b")
    assert result[0] is ok and result[1].startswith(said), result
    assert ran[0] == ("resume", ("coder-b",))
    assert [step for step, _ in ran] == ["resume", "deploy", "reopen"][: 1 + bool(up) + (bool(up) and deploy_rc == 0)]
