"""Per agent, what the test adds to podkit's rendered setup, and where the agent records what it did.

The sandbox's tiny model calls ``get_weather({"city": "Paris", "unit": "celsius"})`` on every request
that offers tools, and again after each tool result, so an agent without a turn limit runs until
stopped. Each :class:`Spec` says:

- ``extra``: flags after the prompt (the test's bounds and machine-readable output);
- ``prepare(folder, home, work)``: files the test adds (a ``get_weather`` tool where the agent takes
  one, a turn limit in the agent's own settings), returning variables to add to the environment;
- ``stops_at_first_call`` (or ``stop_when(folder)``): for an agent with no turn limit, when its first call has been proven;
- ``calls(folder)``: the ``get_weather`` calls the agent parsed, read from its own records or, when
  ``executed``, from the calls file the tool wrote; ``refused``: what it says on a wrong key.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).parent / "agent_tools"
#: What the test's tools append each call to, one JSON object a line.
CALLS_FILE = "calls.jsonl"


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _out(folder: Path) -> str:
    return _read(folder / "stdout.txt") + _read(folder / "stderr.txt")


def _calls_file(folder: Path) -> list[dict]:
    return [json.loads(line) for line in _read(folder / CALLS_FILE).splitlines() if line.strip()]


def _jsonl(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return found


def _args(value) -> dict:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


@dataclass(frozen=True)
class Spec:
    """+ calls: the parsed calls as ``[{"name": ..., "arguments": {...}}]``; + executed: the call ran in
    a tool the test gave the agent (else it is only parsed); + refused: a regex its output matches on
    a wrong key; + proof: where ``calls`` reads from, for the report."""

    calls: Callable[[Path], list[dict]]
    refused: str
    proof: str
    executed: bool = False
    extra: list[str] = field(default_factory=list)
    prepare: Callable[[Path, Path, Path], dict[str, str]] = lambda folder, home, work: {}
    stop_when: Callable[[Path], bool] | None = None
    #: an agent with no turn limit, ended once ``calls`` reads its first call (else ``stop_when``)
    stops_at_first_call: bool = False
    #: the test's bound on a wrong-key run of an agent that retries a 401 for long
    wrong_extra_env: dict[str, str] = field(default_factory=dict)
    #: its record names the call's arguments (goose prints only the tool's name)
    shows_arguments: bool = True
    #: files where the agent itself saves its whole environment, the key with it (under the turn's folder)
    env_snapshots: tuple[str, ...] = ()
    #: the agent forces a call (tool_choice "required"), so vLLM's call is to one of these tools of its own
    own_tools: tuple[str, ...] = ()

    def stopper(self) -> Callable[[Path], bool] | None:
        """When the test ends the agent's turn: at its first call read, by its own rule, or never."""
        if self.stops_at_first_call:
            return lambda folder: bool(self.calls(folder))
        return self.stop_when


# --- Codex CLI: parsed ("unsupported call: get_weather"), its rollout records the function_call ------


def codex_calls(folder: Path) -> list[dict]:
    calls = []
    for rollout in sorted((folder / "home" / ".codex" / "sessions").rglob("rollout-*.jsonl")):
        for item in _jsonl(_read(rollout)):
            payload = item.get("payload") or {}
            if item.get("type") == "response_item" and payload.get("type") == "function_call":
                calls.append({"name": payload.get("name"), "arguments": _args(payload.get("arguments"))})
    return calls


# --- opencode: executed by a custom tool file ----------------------------------------------------


def opencode_prepare(folder: Path, home: Path, work: Path) -> dict[str, str]:
    tool = home / ".config" / "opencode" / "tool"
    tool.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOOLS / "get_weather.ts", tool / "get_weather.ts")
    return {"PODKIT_E2E_CALLS": str(folder / CALLS_FILE)}


# --- Continue CLI: executed through a stdio MCP server -------------------------------------------


def continue_prepare(folder: Path, home: Path, work: Path) -> dict[str, str]:
    config = home / ".continue" / "config.yaml"
    server = [sys.executable, str(TOOLS / "weather_mcp.py"), str(folder / CALLS_FILE)]
    config.write_text(
        config.read_text()
        + "mcpServers:\n  - name: weather\n    command: "
        + json.dumps(server[0])
        + "\n    args: "
        + json.dumps(server[1:])
        + "\n"
    )
    return {}


# --- Qwen Code: parsed; one session turn; its stream-json records the tool_use ----------------------


def qwen_prepare(folder: Path, home: Path, work: Path) -> dict[str, str]:
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"model": {"maxSessionTurns": 1}}))
    return {}


def stream_tool_uses(folder: Path) -> list[dict]:
    """``tool_use`` blocks in an Anthropic-shaped stream-json transcript (Claude Code, Qwen Code)."""
    calls = []
    for event in _jsonl(_read(folder / "stdout.txt")):
        message = event.get("message") or {}
        for block in message.get("content") or [] if isinstance(message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append({"name": block.get("name"), "arguments": _args(block.get("input"))})
    return calls


# --- goose: parsed; it prints the call and "Tool 'get_weather' not found" ----------------------


def goose_calls(folder: Path) -> list[dict]:
    out = _out(folder)
    if re.search(r"Tool 'get_weather' not found", out) and "▸ get_weather" in out:
        return [{"name": "get_weather", "arguments": {}}]
    return []


# --- mini-swe-agent: parsed ("Unknown tool 'get_weather'"), its trajectory keeps the response -------


def mini_calls(folder: Path) -> list[dict]:
    trajectory = folder / "home" / ".config" / "mini-swe-agent" / "last_mini_run.traj.json"
    if not trajectory.exists():
        return []
    calls = []
    for message in json.loads(trajectory.read_text()).get("messages", []):
        extra = message.get("extra") or {}
        response = extra.get("response") or {}
        for choice in response.get("choices") or []:
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                function = call.get("function") or {}
                calls.append({"name": function.get("name"), "arguments": _args(function.get("arguments"))})
    return calls


# --- aider: sends no tools; the chat history shows the answer came --------------------------------


def aider_prepare(folder: Path, home: Path, work: Path) -> dict[str, str]:
    # the tiny model writes gibberish until max_tokens when offered no tools: 32, not podkit's 8192
    settings = work / ".aider.model.settings.yml"
    settings.write_text(re.sub(r"max_tokens: \d+", "max_tokens: 32", settings.read_text()))
    return {}


def aider_calls(folder: Path) -> list[dict]:
    return []


# --- pi: parsed; --mode json prints each tool execution it starts (an unknown tool included) -------


def _events(folder: Path, kind: str, name: str, arguments: str) -> list[dict]:
    """The calls in the JSON lines of stdout whose ``type`` is ``kind``, named by two of their keys."""
    return [
        {"name": event.get(name), "arguments": _args(event.get(arguments))}
        for event in _jsonl(_read(folder / "stdout.txt"))
        if event.get("type") == kind
    ]


def pi_calls(folder: Path) -> list[dict]:
    return _events(folder, "tool_execution_start", "toolName", "args")


def offline_pi(folder: Path, home: Path, work: Path) -> dict[str, str]:
    return {"PI_OFFLINE": "1"}  # no update checks or install telemetry at start


# --- Kilo: parsed; it prints the call it could not run ("✗ get_weather {...} failed") ---------------

KILO_CALL = re.compile(r"✗ \S*get_weather (\{.*?\}) failed")


def kilo_calls(folder: Path) -> list[dict]:
    return [{"name": "get_weather", "arguments": _args(found)} for found in KILO_CALL.findall(_out(folder))]


# --- Cline: parsed; it prints each call ("[get_weather] {...}") and that it was rejected ------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CLINE_CALL = re.compile(r"\[get_weather\] (\{.*?\})")


def cline_calls(folder: Path) -> list[dict]:
    text = ANSI.sub("", _out(folder))
    return [{"name": "get_weather", "arguments": _args(found)} for found in CLINE_CALL.findall(text)]


# --- OpenHands: parsed; --json streams each action, its tool_call among it ------------------------

OPENHANDS_CALL = re.compile(r'"tool_call": (\{"id": .*?"origin": "[a-z_]+"\})')


def openhands_calls(folder: Path) -> list[dict]:
    calls = []
    for found in OPENHANDS_CALL.findall(_read(folder / "stdout.txt")):
        try:
            call = json.loads(found)
        except json.JSONDecodeError:
            continue
        calls.append({"name": call.get("name"), "arguments": _args(call.get("arguments"))})
    return calls


# --- gptme: parsed; it prints the call ("@get_weather(call_1): {...}") and that it cannot run it ---

GPTME_CALL = re.compile(r"@get_weather\([^)]*\):\s*(\{.*?\})", re.S)


def gptme_calls(folder: Path) -> list[dict]:
    return [{"name": "get_weather", "arguments": _args(found)} for found in GPTME_CALL.findall(_out(folder))]


# --- smolagents: parsed; each step prints the call it read ({"tool": NAME, "arguments": ...}) -------
# It asks tool_choice "required", which vLLM meets by constraining the call to the tools offered: the
# tiny model's call is one of smolagents' own (web_search, final_answer), never get_weather.

SMOL_CALL = re.compile(r'\{"tool": "(\w+)", "arguments": "(.*?)"\}')


def smol_calls(folder: Path) -> list[dict]:
    calls = []
    for name, arguments in SMOL_CALL.findall(_out(folder)):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        calls.append({"name": name, "arguments": parsed if isinstance(parsed, dict) else {}})
    return calls


# --- Gemini CLI (through the LiteLLM proxy): parsed; stream-json has its tool_use events ----------


def gemini_calls(folder: Path) -> list[dict]:
    return _events(folder, "tool_use", "tool_name", "parameters")


def no_cost_map_fetch(folder: Path, home: Path, work: Path) -> dict[str, str]:
    # litellm fetches its model cost map from GitHub at start and retries for ~10 s offline
    return {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


SPECS: dict[str, Spec] = {
    "gemini": Spec(
        calls=gemini_calls,
        # the proxy's answer to a key it does not know (it looks it up among virtual keys, with no database)
        refused=r"No connected db|\b401\b|[Aa]uthentication",
        proof="stream-json: tool_use get_weather (Tool not found), through the LiteLLM proxy",
        extra=["--output-format", "stream-json"],
        stops_at_first_call=True,
    ),
    "smolagents": Spec(
        calls=smol_calls,
        refused=r"Error code: 401|missing or wrong API key",
        proof='output: {"tool": NAME, ...}, Calling tool: NAME (one of its own: it asks tool_choice "required")',
        stops_at_first_call=True,
        own_tools=("web_search", "final_answer"),
    ),
    "gptme": Spec(
        calls=gptme_calls,
        refused=r"Error code: 401|missing or wrong API key",
        proof="output: @get_weather(call_1): {...}, not available",
    ),
    "openhands": Spec(
        calls=openhands_calls,
        refused=r"AuthenticationError|missing or wrong API key",
        proof="--json events: an action with tool_call get_weather (Tool 'get_weather' not found)",
        extra=["--json"],
        prepare=no_cost_map_fetch,
        stops_at_first_call=True,
    ),
    "cline": Spec(
        calls=cline_calls,
        refused=r"missing or wrong API key",
        proof="output: [get_weather] {...}, rejected (unavailable tool)",
        stops_at_first_call=True,
        # the file where Cline keeps the key, in plain text, as its docs and podkit's notes say
        env_snapshots=("home/.cline/data/settings/providers.json",),
    ),
    "kilo": Spec(
        calls=kilo_calls,
        refused=r"missing or wrong API key",
        proof="output: ✗ get_weather {...} failed (unavailable tool)",
        stops_at_first_call=True,
    ),
    "pi": Spec(
        calls=pi_calls,
        refused=r"401 missing or wrong API key",
        proof="--mode json: tool_execution_start get_weather",
        extra=["--mode", "json"],
        prepare=offline_pi,
        stops_at_first_call=True,
    ),
    "codex": Spec(
        calls=codex_calls,
        refused=r"401 Unauthorized|missing or wrong API key",
        proof="~/.codex/sessions rollout: function_call get_weather; stderr: unsupported call",
        stop_when=lambda folder: "unsupported call: get_weather" in _read(folder / "stderr.txt"),
        # Codex snapshots its shell's environment, PODKIT_API_KEY included, for its shell tool
        env_snapshots=("home/.codex/shell_snapshots/*",),
    ),
    "opencode": Spec(
        calls=_calls_file,
        refused=r"missing or wrong API key",
        proof="custom tool ~/.config/opencode/tool/get_weather.ts ran",
        executed=True,
        prepare=opencode_prepare,
        stops_at_first_call=True,
    ),
    "continue": Spec(
        calls=_calls_file,
        refused=r"\b401\b|missing or wrong API key",
        proof="stdio MCP server's get_weather ran",
        executed=True,
        prepare=continue_prepare,
        stops_at_first_call=True,
    ),
    "qwen": Spec(
        calls=stream_tool_uses,
        refused=r"401 missing or wrong API key",
        proof="stream-json: tool_use get_weather",
        extra=["--output-format", "stream-json"],
        prepare=qwen_prepare,
    ),
    "goose": Spec(
        calls=goose_calls, refused=r"401 Unauthorized", proof="output: ▸ get_weather, not found", shows_arguments=False
    ),
    "mini-swe-agent": Spec(
        calls=mini_calls,
        refused=r"AuthenticationError",
        proof="trajectory: tool_calls get_weather, Unknown tool",
        extra=["-c", "agent.step_limit=2"],
        prepare=no_cost_map_fetch,
    ),
    "aider": Spec(calls=aider_calls, refused=r"AuthenticationError", proof="no tools sent", prepare=aider_prepare),
    "claude": Spec(
        calls=stream_tool_uses,
        refused=r'"error_status":401|authentication_failed',
        proof="stream-json: tool_use get_weather, No such tool available",
        extra=["--max-turns", "1", "--output-format", "stream-json", "--verbose"],
        # it retries a 401 ten times, backing off to ~37 s: 1 minute+ of nothing
        wrong_extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"},
    ),
}
