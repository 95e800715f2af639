"""A pod costs nothing while nobody codes: podkit status, down and up on bare metal, for real.

Bare metal (the session sandbox): `podkit down` stops vLLM under supervisord, the edge answers
503 saying why and how to start it, `podkit status` says stopped and why (and what the last start
logged beside the plan), and `podkit up` (the deploy) brings it back to a verified endpoint.

Wake on request: with an idle time set, the idle watcher stops vLLM (the CPU build has no sleep
mode), and the next chat with the key through the edge starts it again, proven by a real
completion, while Caddy holds the request; a request without the key wakes nothing.

The idle stop of a RunPod pod (its watcher, its runpodctl and pod-scoped key, a stream never cut,
`podkit up` resuming it) is the last test of tests/e2e/test_migration.py, on a stand-in pod that
module already runs (a pod of its own here would cost the suite a minute more).
"""

import json
import re
import threading
import time

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.aside]


def test_bare_metal_down_answers_503_saying_why_and_up_serves_again(serving):
    box = serving.box
    down = serving.cli("down", "inventories/sandbox.py")
    assert down.returncode == 0, down.stderr
    assert "sandbox: stopped vLLM" in down.stdout and "podkit up inventories/sandbox.py --host sandbox" in down.stdout
    edge_port = box.host_data()["podkit_edge_port"]
    edge = f"http://127.0.0.1:{edge_port}"
    answer = httpx.get(f"{edge}/v1/models", headers={"Authorization": f"Bearer {serving.key()}"})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "60"
    # the wake hook answers: a stop with podkit down stands until podkit up (nothing woken)
    assert answer.json()["error"]["message"] == (
        "the server on sandbox was stopped with podkit down: start it with podkit up INVENTORY --host sandbox"
    )
    assert httpx.get(f"{edge}/v1/models").status_code == 401  # the key is still checked first
    status = serving.cli("status", "inventories/sandbox.py", "--json")
    row = json.loads(status.stdout)["sandbox"]
    assert status.returncode == 0 and row["state"] == "stopped" and row["stopped"]["by"] == "podkit down"
    up = serving.cli("up", "inventories/sandbox.py")
    assert up.returncode == 0, up.stderr[-3000:]
    assert f"{edge}/v1" in up.stdout and "tiny-coder" in up.stdout
    verify = serving.cli("verify", "inventories/sandbox.py")
    assert verify.returncode == 0, verify.stdout[-3000:]
    row = json.loads(serving.cli("status", "inventories/sandbox.py", "--json").stdout)["sandbox"]
    assert row["state"] == "up" and row["stopped"] is None and row["context"] == 65536
    # the start up just made, as vLLM logged it, beside what the deploy predicted (issue #13)
    start = row["last_start"]
    assert [r["figure"] for r in start["compare"]] == ["KV cache GiB", "KV tokens", "max concurrency"]
    assert not any(r["flag"] for r in start["compare"]) and start["record"]["logged"]["kv_cache_tokens"] == 131072
    assert start["logged"]["phases_seconds"]["load"] >= 0


IDLE_MINUTES = 0.25  # a quarter of a minute: the stop comes in seconds, as a user may set it


def chat(edge: str, key: str | None) -> httpx.Response:
    body = {
        "model": "tiny-coder",
        "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
        "max_tokens": 12,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{edge}/v1/chat/completions", json=body, headers=headers, timeout=900)


def test_bare_metal_an_idle_stop_is_undone_by_the_next_chat_with_the_key(serving):
    box = serving.box
    edge = f"http://127.0.0.1:{box.host_data()['podkit_edge_port']}"
    applied = serving.apply("--data", f"podkit_idle_stop_minutes={IDLE_MINUTES}")
    assert applied.rc == 0, applied.stderr[-3000:]
    before = chat(edge, serving.key())  # what it answers awake: greedy, so the same after the wake
    assert before.status_code == 200, before.text
    marker = serving.podkit / "run" / "stopped.json"
    deadline = time.monotonic() + IDLE_MINUTES * 60 + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(1)
    stopped = json.loads(marker.read_text())
    assert (stopped["by"], stopped["how"], stopped["why"]) == ("idle", "stop", "no request for 0.25 min")
    while "STOPPED" not in box.supervisorctl("status", "vllm").stdout and time.monotonic() < deadline:
        time.sleep(0.5)
    row = json.loads(serving.cli("status", "inventories/sandbox.py", "--json").stdout)["sandbox"]
    assert row["state"] == "stopped" and row["stopped"]["by"] == "idle"

    assert chat(edge, None).status_code == 401  # no key: refused before the hook, nothing wakes
    assert marker.exists() and "STOPPED" in box.supervisorctl("status", "vllm").stdout

    began = time.monotonic()
    after = chat(edge, serving.key())
    waited = time.monotonic() - began
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["message"] == before.json()["choices"][0]["message"]
    assert not marker.exists()
    # a converged re-apply after a wake: still one remote command (the wake left nothing to put back)
    again = serving.apply("--data", f"podkit_idle_stop_minutes={IDLE_MINUTES}")
    assert again.rc == 0 and again.changed() == [] and len(again.sessions) == 1, (again.changed(), again.sessions)

    status = serving.cli("status", "inventories/sandbox.py", "--json")
    wake = json.loads(status.stdout)["sandbox"]["wake"]
    assert wake["ok"] and wake["how"] == "start" and wake["requests_held"] == 1
    assert wake["from"]["by"] == "idle" and wake["from"]["how"] == "stop" and 0 < wake["seconds"] <= waited
    assert wake["said"].endswith("-token completion")
    human = serving.cli("status", "inventories/sandbox.py").stdout
    assert "last wake: " in human and "a request started it, proven by a" in human
    print(
        f"\nwake on request: the chat waited {waited:.1f} s at the edge; the wake (supervisorctl start, "
        f"/health, a proof completion) took {wake['seconds']:.1f} s; converged re-apply: {again.seconds:.1f} s, "
        f"{len(again.sessions)} remote command"
    )


BURST = 50
BURST_IDLE_MINUTES = 0.1  # the shortest idle time a setting takes (6 s): the burst test waits the least


def streamed_chat(edge: str, key: str) -> dict:
    """One keyed streaming chat through the edge: its status, Retry-After, message, and whether the stream ended."""
    body = {"model": "tiny-coder", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    try:
        with httpx.stream(
            "POST", f"{edge}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=900
        ) as answer:
            text = "".join(answer.iter_text())
            return {
                "status": answer.status_code,
                "retry_after": answer.headers.get("retry-after"),
                "done": answer.status_code == 200 and text.rstrip().endswith("data: [DONE]"),
                "text": text[-300:],
            }
    except httpx.HTTPError as exc:
        return {"status": None, "retry_after": None, "done": False, "text": repr(exc)}


def test_bare_metal_a_burst_at_the_idle_stop_is_answered_by_the_woken_server(serving):
    """50 keyed streaming chats as the idle watcher stops vLLM (half as its marker appears, half over the
    next 2.5 s: stopping, stopped, waking): each joins the one wake and is answered by the woken server.
    Before, the hook's listen backlog of 5 refused part of such a burst, and a wake begun while the
    stop ran failed: 503s saying to start it with podkit up."""
    box = serving.box
    edge = f"http://127.0.0.1:{box.host_data()['podkit_edge_port']}"
    applied = serving.apply("--data", f"podkit_idle_stop_minutes={BURST_IDLE_MINUTES}")
    assert applied.rc == 0, applied.stderr[-3000:]
    assert streamed_chat(edge, serving.key())["done"]  # the idle clock starts again from this one
    marker = serving.podkit / "run" / "stopped.json"
    deadline = time.monotonic() + BURST_IDLE_MINUTES * 60 + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert marker.exists(), "the idle watcher never stopped the server"
    began = time.monotonic()
    answers: list[dict] = []
    threads = [
        threading.Thread(target=lambda: answers.append(streamed_chat(edge, serving.key()))) for _ in range(BURST)
    ]
    for index, thread in enumerate(threads):
        thread.start()
        if index >= BURST // 2:
            time.sleep(0.1)
    for thread in threads:
        thread.join(900)
    waited = time.monotonic() - began
    answered = [a for a in answers if a["done"]]
    waking = [a for a in answers if a["status"] == 503 and a["retry_after"] and "waking" in a["text"]]
    said = [a["text"] for a in answers if a not in answered and a not in waking]
    assert not said, said[:3]  # every one answered, or told (with Retry-After) that it is waking
    assert not any("podkit up" in a["text"] for a in answers)
    assert len(answered) == BURST, f"{len(waking)} waking 503s"
    wake = json.loads(serving.cli("status", "inventories/sandbox.py", "--json").stdout)["sandbox"]["wake"]
    assert wake["ok"] and wake["requests_held"] >= BURST // 2
    print(
        f"\nburst at the idle stop: {len(answered)}/{BURST} answered by the woken server in {waited:.1f} s "
        f"({wake['requests_held']} held by the wake, which took {wake['seconds']:.1f} s)"
    )


def test_a_vllm_that_cannot_start_fails_status_and_verify_with_the_cause_from_its_log(serving):
    """An empty key file (vLLM takes an empty key for none: launch.sh refuses to start): supervisord
    retries it (BACKOFF), then gives up (FATAL). status said "crashed" with exit 0 and verify passed
    "programs supervised"; both now fail, naming the cause from the start's log."""
    box, key_file = serving.box, serving.podkit / "secrets" / "api_key"
    saved = key_file.read_text()
    try:
        key_file.write_text("")
        box.supervisorctl("restart", "vllm")
        # supervisord cycles it STARTING -> BACKOFF (1, 2, 3 s ...) -> FATAL: status is read until it says
        # so (a read that meets one of the short STARTING spells is the host's "starting", no problem)
        deadline = time.monotonic() + 90
        status = serving.cli("status", "inventories/sandbox.py")
        while status.returncode != 1 and time.monotonic() < deadline:
            time.sleep(0.5)
            status = serving.cli("status", "inventories/sandbox.py")
        verified = serving.cli("verify", "inventories/sandbox.py", "--json")
    finally:
        key_file.write_text(saved)
    assert status.returncode == 1, status.stdout + status.stderr
    assert re.search(
        r"problem: vLLM is (BACKOFF|FATAL) under supervisord \((it exited and is retried|its supervisor gave up on "
        r"it)\): clients get 503",
        status.stdout,
    ), status.stdout
    assert "the API key file on the host is empty" in status.stdout, status.stdout
    assert verified.returncode != 0
    supervised = next(c for c in json.loads(verified.stdout)["sandbox"]["checks"] if c["name"] == "programs supervised")
    assert not supervised["ok"] and "the API key file on the host is empty" in supervised["detail"], supervised
    again = serving.apply()  # the deploy puts back what serves
    assert again.rc == 0, again.stderr[-3000:]
