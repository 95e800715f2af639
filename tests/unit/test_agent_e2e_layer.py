"""The agent e2e layer's own logic, without agents: the install cache (reuse, a failed or half install
never counted), how a rendered setup becomes an environment and a command line, and the parsers that
read each agent's records."""

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import agent_installs, agent_runs, agent_specs
from tests.e2e.agent_installs import MARKER, Agent


@dataclass(frozen=True)
class ScriptAgent(Agent):
    """An agent whose "install" is a shell line: writes its program, or fails."""

    script: str = ""

    def install_argv(self, into: Path) -> list[list[str]]:
        return [["sh", "-c", self.script.replace("DIR", str(into))]]


def fake_agent(script: str) -> ScriptAgent:
    return ScriptAgent("@podkit/fake", "1.0.0", "fake", "npm", script=script)


WRITES_PROGRAM = (
    "mkdir -p DIR/node_modules/.bin && printf '#!/bin/sh\\n' > DIR/node_modules/.bin/fake && echo x >> DIR/../count"
)


@pytest.mark.proc
def test_an_install_is_reused_once_marked(tmp_path, monkeypatch):
    monkeypatch.setitem(agent_installs.AGENTS, "fake", fake_agent(WRITES_PROGRAM))
    first = agent_installs.install(["fake"], tmp_path)["fake"]
    assert first.program and not first.reused and not first.error
    assert (tmp_path / "@podkit+fake@1.0.0" / MARKER).exists()
    second = agent_installs.install(["fake"], tmp_path)["fake"]
    assert second.reused and second.program == first.program
    assert (tmp_path / "count").read_text().count("x") == 1


@pytest.mark.proc
@pytest.mark.parametrize(
    "script, error",
    [
        ("echo broken >&2; exit 3", "broken"),
        ("mkdir -p DIR/node_modules/.bin", "installed, but no fake in it"),
    ],
)
def test_a_failed_install_is_not_counted_and_is_run_again(tmp_path, monkeypatch, script, error):
    monkeypatch.setitem(agent_installs.AGENTS, "fake", fake_agent(script))
    got = agent_installs.install(["fake"], tmp_path)["fake"]
    assert got.program is None and error in got.error
    assert not (tmp_path / "@podkit+fake@1.0.0" / MARKER).exists()
    # a half install left behind is started again, not reused
    monkeypatch.setitem(agent_installs.AGENTS, "fake", fake_agent(WRITES_PROGRAM))
    again = agent_installs.install(["fake"], tmp_path)["fake"]
    assert again.program and not again.reused


def test_every_agent_is_pinned_exactly():
    for name, agent in agent_installs.AGENTS.items():
        assert agent.version.count(".") == 2 and agent.version[0].isdigit(), name
        assert agent.via in ("npm", "pip"), name


RENDERED = {
    "host": "sandbox",
    "agent": "fake",
    "files": [{"path": "~/.fake/config.toml", "content": "a = 1\n"}, {"path": ".fake.json", "content": "{}"}],
    "env": {"PODKIT_API_KEY": '"$(cat KEYFILE)"', "OPENAI_API_KEY": '"$(cat KEYFILE)"', "FAKE_URL": "http://x/v1"},
    "args": ["--model", "openai/tiny"],
    "run": 'fake --model openai/tiny -t "PROMPT" --yes',
    "notes": [],
}


@pytest.mark.proc
def test_a_rendered_setup_is_placed_evaluated_and_run_as_a_user_would(tmp_path):
    key_file = tmp_path / "api key"
    key_file.write_text("sk-right\n")
    rendered = json.loads(json.dumps(RENDERED).replace("KEYFILE", "'" + str(key_file) + "'"))
    program = tmp_path / "bin" / "fake"
    program.parent.mkdir()
    program.write_text('#!/bin/sh\nprintf "%s|" "$@" > "$HOME/argv"; echo "$OPENAI_API_KEY" > "$HOME/key"\n')
    program.chmod(0o755)
    spec = agent_specs.Spec(calls=lambda folder: [], refused="401", proof="-", extra=["--max-turns", "1"])

    s = agent_runs.setup(rendered, program, tmp_path / "right", spec)
    assert (s.home / ".fake" / "config.toml").read_text() == "a = 1\n"
    assert (s.work / ".fake.json").exists()
    assert s.env["PODKIT_API_KEY"] == s.env["OPENAI_API_KEY"] == "sk-right"
    assert all("sk-right" not in word for word in s.argv)
    turn = agent_runs.start("fake", s).wait(timeout=60)
    assert turn.rc == 0 and not turn.timed_out, turn.output
    argv = (s.home / "argv").read_text().split("|")
    assert argv[:6] == ["--model", "openai/tiny", "-t", agent_runs.PROMPT, "--max-turns", "1"], argv

    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "key").write_text("sk-wrong\n")
    s = agent_runs.setup(rendered, program, wrong / "run", spec, key_file=str(wrong / "key"))
    assert s.env["OPENAI_API_KEY"] == "sk-wrong"


def test_a_run_line_without_its_args_is_refused():
    rendered = dict(RENDERED, run='fake -t "PROMPT"')
    with pytest.raises(AssertionError):
        agent_runs.run_line(rendered, "hi", [])


@pytest.mark.proc
def test_a_turn_is_stopped_once_its_proof_is_there(tmp_path):
    s = agent_runs.Setup(
        tmp_path / "home", tmp_path, {"PATH": "/usr/bin:/bin"}, ["sh", "-c", "touch done; exec sleep 600"]
    )
    s.home.mkdir()
    turn = agent_runs.start("sleeper", s).wait(timeout=120, stop_when=lambda folder: (folder / "done").exists())
    assert turn.stopped and not turn.timed_out and turn.rc is None


@pytest.mark.proc
def test_what_a_turn_left_running_in_a_session_of_its_own_is_stopped_after_it(tmp_path):
    """As Cline's hub daemon does: the turn starts a detached process (setsid) and exits; the process,
    outside the turn's group, is found by the turn's HOME and killed. Another HOME's is left alone."""
    import time

    other_home = tmp_path / "other"
    other_home.mkdir()
    other = subprocess.Popen(["sleep", "600"], env={"HOME": str(other_home), "PATH": "/usr/bin:/bin"})
    daemon = "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > daemon.pid"
    s = agent_runs.Setup(
        tmp_path / "home", tmp_path, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}, ["sh", "-c", daemon]
    )
    s.home.mkdir()
    try:
        turn = agent_runs.start("detacher", s).wait(timeout=60)
        pid = int((tmp_path / "daemon.pid").read_text())
        assert turn.rc == 0 and turn.left == [pid]
        for _ in range(100):  # killed: gone, or a zombie until its parent (init) reaps it
            if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z":
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"pid {pid} outlived its turn")
        assert other.poll() is None  # another turn's HOME: not this turn's to stop
    finally:
        other.kill()
        other.wait()


CODEX_ROLLOUT = [
    {"type": "session_meta", "payload": {"id": "x"}},
    {
        "type": "response_item",
        "payload": {
            "type": "function_call",
            "name": "get_weather",
            "arguments": '{"city": "Paris", "unit": "celsius"}',
        },
    },
]
STREAM_JSON = [
    {"type": "system", "subtype": "init"},
    {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}]},
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "Error: No such tool available"}]}},
]


@pytest.mark.parametrize(
    "parse, path, records",
    [
        (agent_specs.codex_calls, "home/.codex/sessions/2026/11/26/rollout-1.jsonl", CODEX_ROLLOUT),
        (agent_specs.stream_tool_uses, "stdout.txt", STREAM_JSON),
    ],
)
def test_an_agents_record_gives_the_parsed_call(tmp_path, parse, path, records):
    assert parse(tmp_path) == []
    target = tmp_path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("not json\n" + "\n".join(json.dumps(r) for r in records) + "\n")
    assert parse(tmp_path) == [
        {"name": "get_weather", "arguments": {"city": "Paris", **({"unit": "celsius"} if "codex" in path else {})}}
    ]


@pytest.mark.proc
def test_the_mcp_server_lists_and_runs_get_weather(tmp_path):
    calls = tmp_path / "calls.jsonl"
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "get_weather", "arguments": {"city": "Paris"}},
        },
    ]
    proc = subprocess.run(
        ["python3", str(agent_specs.TOOLS / "weather_mcp.py"), str(calls)],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=30,
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[1]["result"]["tools"][0]["name"] == "get_weather"
    assert "sunny" in replies[2]["result"]["content"][0]["text"]
    assert json.loads(calls.read_text()) == {"name": "get_weather", "arguments": {"city": "Paris"}}
