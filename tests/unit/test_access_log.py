"""The edge's access log as podctl reads it (``refused``) and as verify and status say it: the 4xx
answers counted by status, method and path (no query string), the last few listed, why each was
refused, and a hostile log or answer left out rather than shown."""

from __future__ import annotations

import json

import pytest

from podkit.client.hostchecks import refusal_check
from podkit.client.serverinfo import ServerInfo
from podkit.client.status import HostStatus, describe
from podkit.host.access import refusal_summary, why
from tests.helpers import podctl


def caddy_line(status: int, method: str = "POST", uri: str = "/v1/chat/completions", size: int = 80) -> str:
    """One line as podkit's Caddyfile writes it (headers, host and addresses filtered out)."""
    entry = {
        "level": "info",
        "ts": 1795923641.4,
        "logger": "http.log.access.log0",
        "msg": "handled request",
        "request": {"proto": "HTTP/1.1", "method": method, "uri": uri},
        "bytes_read": 10,
        "duration": 0.0021,
        "size": size,
        "status": status,
    }
    return json.dumps(entry) + "\n"


def test_podctl_counts_the_refused_requests_and_lists_the_last(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        caddy_line(200)
        + caddy_line(401) * 3
        + caddy_line(404, "GET", "/v1beta/models/coder:streamGenerateContent?alt=sse")
        + "not json\n"
        + caddy_line(500)
    )
    found = podctl.refused_requests(str(log))
    assert found["read"] == 6 and found["file"] == str(log)
    assert found["counts"] == {
        "401 POST /v1/chat/completions": 3,
        "404 GET /v1beta/models/coder:streamGenerateContent": 1,
    }
    assert [(e["status"], e["path"], e["size"]) for e in found["last"]][-2:] == [
        (401, "/v1/chat/completions", 80),
        (404, "/v1beta/models/coder:streamGenerateContent", 80),
    ]
    assert podctl.refused_requests(str(tmp_path / "none.log")) is None


def test_podctl_reads_only_the_end_of_a_long_log(tmp_path, monkeypatch):
    monkeypatch.setattr(podctl, "ACCESS_TAIL_BYTES", 1000)
    log = tmp_path / "access.log"
    log.write_text(caddy_line(401) * 50 + caddy_line(403, "GET", "/v1/models") * 2)
    found = podctl.refused_requests(str(log))
    assert 0 < found["read"] < 50 and found["counts"]["403 GET /v1/models"] == 2
    assert len(found["last"]) <= podctl.REFUSED_LISTED


def test_the_summary_says_why_each_was_refused():
    refused = {
        "file": "/workspace/podkit/logs/access.log",
        "read": 12,
        "counts": {"401 POST /v1/chat/completions": 3, "404 GET /v1beta/models/coder:streamGenerateContent": 1},
    }
    line = refusal_summary(refused)
    assert line == (
        "4 of the last 12 requests refused (/workspace/podkit/logs/access.log): "
        f"1x 404 GET /v1beta/models/coder:streamGenerateContent ({why(404, '/v1beta/models/x')}); "
        "3x 401 POST /v1/chat/completions (missing or wrong API key)"
    )
    assert "LiteLLM bridge" in why(404, "/v1beta/models/x") and why(404, "/v1/x").startswith("no such route")
    assert refusal_summary({"file": "f", "read": 3, "counts": {}}) == (
        "no request refused among the last 3 the edge logged (f)"
    )


@pytest.mark.parametrize(
    "answer",
    [None, "x", [], {"counts": "x"}, {"counts": {"401 GET /v1/x": "3", "401 POST /v1/y": True}}, {"read": "9"}],
)
def test_a_hostile_answer_is_left_out_or_said_plainly(answer):
    line = refusal_summary(answer)
    assert line is None or line.startswith("no request refused")


def test_a_forged_path_cannot_reach_the_terminal():
    line = refusal_summary({"file": "\x1b]0;x\x07f", "read": 1, "counts": {"401 GET /v1/\x1b[2Jx\u202e": 1}})
    assert "\x1b" not in line and "\u202e" not in line


def test_verify_and_status_say_it():
    refused = {"file": "f", "read": 2, "counts": {"401 POST /v1/messages": 2}}
    check = refusal_check(ServerInfo("box", refused=refused), 0.1)
    assert check.ok and check.name == "edge refusals" and "2x 401 POST /v1/messages" in check.detail
    assert refusal_check(ServerInfo("box"), 0.1) is None
    status = HostStatus("box", "up", read_host=True, model="coder", refused=refusal_summary(refused))
    assert any(line.startswith("  edge: 2 of the last 2 requests refused") for line in describe(status, "inv.py"))


def test_an_api_that_needs_the_bridge_is_said_first_however_rare():
    counts = {f"404 GET /x{i}": 10 + i for i in range(6)} | {"404 POST /v1beta/models/m:generateContent": 1}
    line = refusal_summary({"file": "f", "read": 99, "counts": counts}, most=2)
    assert line.split(": ", 1)[1].startswith("1x 404 POST /v1beta/models/m:generateContent (the Gemini API")
    assert "15x 404 GET /x5" in line and "and 5 more kinds" in line
