"""Every real coding agent, installed as its users install it (pinned, each in its own folder:
tests/e2e/agent_installs.py), configured only from ``podkit client inventories/sandbox.py --for AGENT
--json`` (tests/e2e/agent_runs.py: its files placed, its env evaluated by sh, its ``run`` line run),
one non-interactive turn each against the sandbox, and each again with a wrong key.

What the test adds to each agent is in tests/e2e/agent_specs.py: a ``get_weather`` tool where the
agent takes one (opencode's custom tool file, an MCP server for Continue), so the tiny model's call is
executed; elsewhere the agent's own record shows the call it parsed. The turns run side by side (the
agents mostly wait on the one server), the right-key ones and the wrong-key ones at once.

What each proves, read from the agent's own records and vLLM's access log, not from its exit code
alone: it reached the endpoint and authenticated (vLLM answered it; a wrong key is refused and the
agent says so, without hanging), the context was accepted (no 400 from vLLM in the whole run), and
the ``get_weather`` call came through its parser with Paris in it.

Gemini CLI speaks only the Gemini API: it goes through the LiteLLM proxy (from PyPI) started on
loopback from ``--for litellm`` alone. Every right-key turn runs where each vendor's cloud is a
stranger on loopback (tests/e2e/stranger.py): none of them may ever be sent the key, and the
stranger is shown to catch one (smolagents configured from ``--for env`` alone sends it).
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from podkit.sandbox.sshd import free_port
from tests.e2e import agent_runs
from tests.e2e.agent_installs import AGENTS
from tests.e2e.agent_specs import CALLS_FILE, SPECS
from tests.e2e.stranger import Stranger

pytestmark = pytest.mark.e2e

#: The bridge serves the others (Gemini CLI), it takes no turn of its own.
BRIDGE = "litellm"
#: PODKIT_E2E_AGENTS=pi,cline runs only those turns (a developer's run; every one by default)
ONLY = [name for name in os.environ.get("PODKIT_E2E_AGENTS", "").split(",") if name]
NAMES = [name for name in AGENTS if name != BRIDGE and (not ONLY or name in ONLY)]
ACCESS_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<path>/\S*) HTTP/[\d.]+" (?P<status>\d{3})')
#: The API each agent speaks: all three must have been served to the agents in this run.
APIS = {"/v1/responses": "codex", "/v1/messages": "claude", "/v1/chat/completions": "opencode"}


@pytest.fixture(scope="session")
def agent_programs(early):
    """Each agent's executable, installed (or reused from the cache) once per run, all at once, from
    the moment collection ended (tests/e2e/early.py)."""
    installed = early.wait("agents")
    failed = {name: got["error"] for name, got in installed.items() if got["program"] is None}
    assert not failed, failed
    for name, got in installed.items():
        how = "reused" if got["reused"] else f"installed in {got['seconds']} s"
        print(f"agent {name}: {AGENTS[name].package}@{AGENTS[name].version} {how}")
    return {name: Path(got["program"]) for name, got in installed.items()}


def rendered_for(pod, name: str) -> dict:
    """``podkit client --for NAME --json`` for the sandbox: one host, no key in it."""
    proc = pod.cli("client", "inventories/sandbox.py", "--for", name, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rendered,) = json.loads(proc.stdout)
    assert rendered["host"] == "sandbox" and rendered["agent"] == name, rendered
    assert pod.key() not in proc.stdout + proc.stderr
    return rendered


@pytest.fixture(scope="module")
def stranger(tmp_path_factory):
    """The vendors' clouds, as a stranger on loopback that records what it is sent."""
    found = Stranger(tmp_path_factory.mktemp("stranger")).start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def bridge(pod, agent_programs, tmp_path_factory, stranger):
    """The LiteLLM proxy, from ``podkit client --for litellm`` alone, on a free loopback port (podkit
    prints LiteLLM's default, 4000, which another program on this machine may hold)."""
    rendered = rendered_for(pod, BRIDGE)
    folder = tmp_path_factory.mktemp("bridge")
    began = time.monotonic()
    served = agent_runs.serve(rendered, agent_programs[BRIDGE], folder, free_port(), {}, stranger.wrap)
    print(f"agent {BRIDGE}: proxy up in {time.monotonic() - began:.1f} s")
    yield served
    served.stop()


def through(rendered: dict, bridge: agent_runs.Served) -> dict:
    """A setup that names podkit's proxy address, pointed at the port the test's proxy has."""
    text = json.dumps(rendered).replace("http://127.0.0.1:4000", bridge.url)
    return json.loads(text)


@pytest.fixture(scope="module")
def turns(pod, agent_programs, tmp_path_factory, bridge, stranger):
    """Every agent's turn with the key and with a wrong one, run side by side against the converged
    sandbox, and the vLLM access-log lines they caused; each right-key turn where the vendors' clouds
    are the stranger."""
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    root = tmp_path_factory.mktemp("agents")
    wrong_key = root / "wrong_key"
    wrong_key.write_text("sk-podkit-not-the-key\n")
    log_start = len(pod.log())

    started = {}
    for name in NAMES:
        rendered = rendered_for(pod, name)
        if name == "gemini":
            rendered = through(rendered, bridge)
        for kind, key_file in (("right", None), ("wrong", str(wrong_key))):
            folder = root / f"{name}-{kind}"
            folder.mkdir()
            s = agent_runs.setup(rendered, agent_programs[name], folder, SPECS[name], key_file)
            if kind == "right":
                s.argv, s.env = stranger.wrap(s.argv, s.env)
            started[name, kind] = (rendered, agent_runs.start(name, s))
    # each waited for in its own thread, so each turn's seconds end when it does
    with ThreadPoolExecutor(len(started)) as pool:
        waits = {
            (name, kind): pool.submit(turn.wait, stop_when=SPECS[name].stopper() if kind == "right" else None)
            for (name, kind), (_, turn) in started.items()
        }
        done = {nk: (started[nk][0], future.result()) for nk, future in waits.items()}
    for name in NAMES:
        print(f"agent {name}: turn {done[name, 'right'][1].seconds} s, wrong key {done[name, 'wrong'][1].seconds} s")
    access = [m.groupdict() for m in ACCESS_LINE.finditer(pod.log()[log_start:])]
    # what the vendors' clouds were sent by these turns alone (a later test sends the stranger more)
    leaked = stranger.saw(pod.key())
    return done, access, (leaked, stranger.hosts_asked())


def folder_of(turn: agent_runs.Turn) -> Path:
    return turn.setup.home.parent


def assert_no_key(turn: agent_runs.Turn, key: str, env_snapshots: tuple[str, ...]):
    """Not in the output, the argv or any file, but where the agent itself saves its environment."""
    assert key not in turn.output
    assert all(key not in word for word in turn.setup.argv)
    folder = folder_of(turn)
    for path in folder.rglob("*"):
        if any(path.match(str(folder / pattern)) for pattern in env_snapshots):
            continue
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert key.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("name", NAMES)
def test_agent_turn_reaches_the_endpoint_and_parses_the_tool_call(name, turns, pod):
    done, _, _ = turns
    rendered, turn = done[name, "right"]
    spec = SPECS[name]
    output = turn.output[-3000:]
    assert not turn.timed_out, f"{name} ran past {agent_runs.TURN_TIMEOUT} s: {output}"
    assert not re.search(spec.refused, turn.output), output
    # the key went in only through the environment, as the rendered env read it from its file
    assert turn.setup.env.get("PODKIT_API_KEY") == pod.key()
    assert_no_key(turn, pod.key(), spec.env_snapshots)

    calls = spec.calls(folder_of(turn))
    if name == "aider":  # aider sends no tools: its answer is in its chat history
        history = (turn.setup.work / ".aider.chat.history.md").read_text()
        assert "What is the weather in Paris" in history and "Unknown context window" not in turn.output, output
        assert turn.rc == 0, output
        return
    assert calls, f"{name}: no tool call in {spec.proof}: {output}"
    if spec.own_tools:  # a forced call: vLLM keeps it to the agent's own tools
        assert calls[0]["name"] in spec.own_tools, calls
        return
    assert calls[0]["name"] == "get_weather", calls
    if spec.shows_arguments:
        assert calls[0]["arguments"]["city"] == "Paris", calls
    if spec.executed:
        assert (folder_of(turn) / CALLS_FILE).exists()


def test_no_agent_sent_the_key_to_a_vendors_cloud(turns):
    """Every right-key turn ran where each vendor's cloud was the stranger: it saw none of the key."""
    _, _, (leaked, asked) = turns
    assert not leaked, leaked
    print(f"the stranger was asked for (none with the key): {asked or 'nothing'}")


def test_the_stranger_sees_a_key_sent_to_a_vendor(pod, agent_programs, stranger, tmp_path):
    """The check above can fail: smolagents configured from ``--for env`` alone (which says on
    stderr that it ignores OPENAI_BASE_URL) sends OPENAI_API_KEY to its vendor, the stranger."""
    proc = pod.cli("client", "inventories/sandbox.py", "--for", "env", "--json")
    (env_only,) = json.loads(proc.stdout)
    said = pod.cli("client", "inventories/sandbox.py", "--for", "env").stderr
    assert "smolagents (--for smolagents)" in said and "ignore OPENAI_BASE_URL" in said
    rendered = {**env_only, "run": 'smolagent "PROMPT" --model-type OpenAIModel --model-id tiny-coder', "args": []}
    s = agent_runs.setup(rendered, agent_programs["smolagents"], tmp_path / "env-only", SPECS["smolagents"])
    s.argv, s.env = stranger.wrap(s.argv, s.env)
    before = len(stranger.saw(pod.key()))
    turn = agent_runs.start("smolagents", s).wait(timeout=120)
    leaked = stranger.saw(pod.key())[before:]
    assert leaked and all(" api.fireworks.ai " in where for where in leaked), (leaked, turn.output[-2000:])


@pytest.mark.parametrize("name", NAMES)
def test_agent_with_a_wrong_key_is_refused_and_says_so(name, turns):
    done, _, _ = turns
    _, turn = done[name, "wrong"]
    output = turn.output[-3000:]
    assert not turn.timed_out, f"{name} hung on a wrong key: {output}"
    assert turn.rc is not None, output
    assert re.search(SPECS[name].refused, turn.output), output
    assert not SPECS[name].calls(folder_of(turn)), output
    assert not (folder_of(turn) / CALLS_FILE).exists()


def test_vllm_served_every_api_the_agents_speak_and_refused_no_context(turns):
    """vLLM's access log over the whole run: each API was answered 200 to the agent that speaks it,
    and nothing reached vLLM that it refused (a context too long is a 400; a wrong key never gets
    past the edge)."""
    _, access, _ = turns
    posts = [a for a in access if a["method"] == "POST"]
    for path, agent in ((p, a) for p, a in APIS.items() if a in NAMES):
        # Claude Code asks for /v1/messages?beta=true
        assert any(a["path"].split("?")[0] == path and a["status"] == "200" for a in posts), (agent, path, posts)
    refused = [a for a in access if a["status"].startswith("4") and a["path"].startswith("/v1/")]
    assert not refused, refused
