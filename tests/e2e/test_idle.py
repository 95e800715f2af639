"""A pod costs nothing while nobody codes: podkit status, down and up on bare metal, for real.

Bare metal (the session sandbox): `podkit down` stops vLLM under supervisord, the edge answers
503 saying why and how to start it, `podkit status` says stopped and why (and what the last start
logged beside the plan), and `podkit up` (the deploy) brings it back to a verified endpoint.

The idle stop of a RunPod pod (its watcher, its runpodctl and pod-scoped key, a stream never cut,
`podkit up` resuming it) is the last test of tests/e2e/test_migration.py, on a stand-in pod that
module already runs (a pod of its own here would cost the suite a minute more).
"""

import json

import httpx
import pytest

pytestmark = pytest.mark.e2e


def test_bare_metal_down_answers_503_saying_why_and_up_serves_again(serving):
    box = serving.box
    down = serving.cli("down", "inventories/sandbox.py")
    assert down.returncode == 0, down.stderr
    assert "sandbox: stopped vLLM" in down.stdout and "podkit up inventories/sandbox.py --host sandbox" in down.stdout
    edge_port = box.host_data()["podkit_edge_port"]
    edge = f"http://127.0.0.1:{edge_port}"
    answer = httpx.get(f"{edge}/v1/models", headers={"Authorization": f"Bearer {serving.key()}"})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "60"
    assert "stopped (idle, or podkit down): start it with podkit up" in answer.json()["error"]["message"]
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
