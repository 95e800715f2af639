"""Three real clients against the real endpoint, each configured only from what podkit prints:
Hermes Agent (``hermes chat -q``, its config.yaml from ``podkit client --for hermes``), llm (its
``extra-openai-models.yaml`` and a key in llm's own store) and the OpenAI Agents SDK (tracing off).

Fixtures (tests/e2e/conftest.py):

- ``client_settings``: dict with ``base_url`` (with ``/v1``), ``model``, ``context_length``, ``key``,
  ``hermes_yaml`` (a whole config.yaml), ``llm_yaml`` (an extra-openai-models.yaml) and ``ca_file``
  (None, or the CA certificate that an https endpoint's certificate chains to);
- ``client_venvs``: dict ``{"hermes": ..., "llm": ..., "agents": ...}`` of venv ``bin/`` folders
  holding hermes-agent==0.19.0, llm==0.36 and openai-agents==0.24.0.

The sandbox's tiny model calls ``get_weather({"city": "Paris", "unit": "celsius"})`` whenever it
is offered a tool, whichever tool that is, and again after every tool result: so every client is
run so that it stops after the first call (Hermes ``--max-turns 1``, llm without running the chain,
the Agents SDK with ``stop_on_first_tool``).

Facts these tests rely on (hermes-agent 0.19.0, seen against a stand-in server):
- ``hermes chat -q ... -Q`` exits 1 on HTTP 401 ("HTTP 401: ..." on stdout), on a refused
  context (below 64,000 tokens: "Failed to initialize agent: Model ... has a context window of
  ...") and on an unreachable endpoint ("API call failed after 3 retries: Connection error."),
  and 0 once it has an answer. (``hermes -z`` exits 0 even on a 401: not used here.)
- ``${PODKIT_API_KEY}`` in config.yaml is expanded from the environment; an unset variable is
  sent verbatim as ``Bearer ${PODKIT_API_KEY}``.
- A tool of our own reaches the model through a user plugin in ``$HERMES_HOME/plugins/<name>/``
  (plugin.yaml + ``register(ctx)``), enabled by ``plugins.enabled`` and selected with ``-t``.
- Hermes records the session in ``$HERMES_HOME/state.db`` (sqlite): the endpoint and model it
  used, and each message with its parsed ``tool_calls``.
- Unless told not to, Hermes pip-installs packages into its own venv at run time (edge-tts for
  its TTS tool) and tries to download a "tirith" binary: HERMES_DISABLE_LAZY_INSTALLS=1 and
  TIRITH_ENABLED=false stop both.
"""

import json
import os
import sqlite3
import ssl
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

HERMES_MIN_CONTEXT = 64_000  # agent.model_metadata.MINIMUM_CONTEXT_LENGTH in hermes-agent 0.19.0
PROMPT = "What is the weather in Paris? Use the get_weather tool."
TIMEOUT = 600

HERMES_PLUGIN_YAML = """\
name: podkit_probe
version: 0.1.0
description: "podkit e2e: a get_weather tool that records every call"
provides_tools:
  - get_weather
"""

HERMES_PLUGIN_PY = """\
import json
import os
from pathlib import Path

SCHEMA = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}


def _handle(args, **kwargs):
    with open(Path(os.environ["HERMES_HOME"]) / "get_weather_calls.jsonl", "a") as f:
        f.write(json.dumps(args) + "\\n")
    return json.dumps({"city": args.get("city"), "forecast": "sunny", "temp": 21})


def register(ctx):
    ctx.register_tool(name="get_weather", toolset="podkit_probe", schema=SCHEMA, handler=_handle)
"""

LLM_TOOL_CALL_PY = """\
import json
import sys

import llm


def get_weather(city: str, unit: str = "celsius") -> str:
    \"\"\"Get the current weather for a city.\"\"\"
    return "sunny"


model = llm.get_model(sys.argv[1])
response = model.prompt(sys.argv[2], tools=[get_weather], max_tokens=64, temperature=0)
response.text()
print(json.dumps([{"name": c.name, "arguments": c.arguments} for c in response.tool_calls()]))
"""

AGENTS_PY = """\
import asyncio
import json
import os
import ssl

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI, DefaultAsyncHttpxClient

set_tracing_disabled(True)
CALLS = []


@function_tool
def get_weather(city: str, unit: str = "celsius") -> str:
    \"\"\"Get the current weather for a city.\"\"\"
    CALLS.append({"city": city, "unit": unit})
    return json.dumps({"city": city, "forecast": "sunny", "temp": 21, "unit": unit})


async def main():
    extra = {}
    if os.environ.get("PODKIT_CA_FILE"):
        # DefaultAsyncHttpxClient, not httpx.AsyncClient: openai 3.x is built on httpx2 and a
        # plain `pip install openai-agents` has no httpx module at all
        extra["http_client"] = DefaultAsyncHttpxClient(
            verify=ssl.create_default_context(cafile=os.environ["PODKIT_CA_FILE"])
        )
    client = AsyncOpenAI(base_url=os.environ["PODKIT_BASE_URL"], api_key=os.environ["PODKIT_API_KEY"], **extra)
    agent = Agent(
        name="podkit-probe",
        instructions="Answer weather questions with the get_weather tool.",
        model=OpenAIChatCompletionsModel(model=os.environ["PODKIT_MODEL"], openai_client=client),
        model_settings=ModelSettings(max_tokens=64, temperature=0),
        tools=[get_weather],
        tool_use_behavior="stop_on_first_tool",
    )
    result = Runner.run_streamed(agent, os.environ["PROMPT"], max_turns=3)
    async for _ in result.stream_events():
        pass
    print(json.dumps({"calls": CALLS, "final_output": result.final_output}))


asyncio.run(main())
"""


def base_env(tmp_path: Path, client_settings: dict) -> dict[str, str]:
    """A clean environment: no OPENAI_* or proxy variables from the caller leak in. An https
    endpoint's CA is trusted through SSL_CERT_FILE, which all three clients honour."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    if client_settings["ca_file"]:
        env["SSL_CERT_FILE"] = str(client_settings["ca_file"])
    return env


def run(argv: list, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def assert_no_key(proc: subprocess.CompletedProcess, key: str, *paths: Path):
    assert key not in proc.stdout + proc.stderr
    for path in paths:
        assert key not in path.read_text(errors="replace"), path


def served_max_model_len(client_settings: dict) -> int:
    """What the endpoint itself reports for the model (vLLM's /v1/models has max_model_len)."""
    request = urllib.request.Request(
        client_settings["base_url"] + "/models", headers={"Authorization": f"Bearer {client_settings['key']}"}
    )
    context = ssl.create_default_context(cafile=client_settings["ca_file"]) if client_settings["ca_file"] else None
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        models = json.load(response)["data"]
    (served,) = [m for m in models if m["id"] == client_settings["model"]]
    return served["max_model_len"]


# --- Hermes Agent ---------------------------------------------------------------------------


def hermes_home(tmp_path: Path, client_settings: dict) -> Path:
    """$HERMES_HOME with podkit's config.yaml, plus what only the test adds: the probe plugin
    (enabled), and a small max_tokens so the tiny model's tool-less wrap-up answer is quick."""
    config = yaml.safe_load(client_settings["hermes_yaml"])
    model = config["model"]
    assert model["provider"] == "custom"
    assert model["base_url"] == client_settings["base_url"]
    assert model["default"] == client_settings["model"]
    assert model["api_key"] == "${PODKIT_API_KEY}"
    assert client_settings["key"] not in client_settings["hermes_yaml"]
    assert model["context_length"] == client_settings["context_length"] >= HERMES_MIN_CONTEXT
    # Hermes believes model.context_length over the server: a wrong one is only caught here
    assert model["context_length"] == served_max_model_len(client_settings)
    # without max_tokens Hermes' custom provider asks for 65,536 output tokens, more than fits
    assert 0 < model["max_tokens"] < model["context_length"]
    model["max_tokens"] = min(model["max_tokens"], 64)
    plugins = config.setdefault("plugins", {})
    plugins["enabled"] = [*plugins.get("enabled", []), "podkit_probe"]

    home = tmp_path / "hermes"
    plugin = home / "plugins" / "podkit_probe"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text(HERMES_PLUGIN_YAML)
    (plugin / "__init__.py").write_text(HERMES_PLUGIN_PY)
    (home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def run_hermes(client_venvs, tmp_path, client_settings, key: str | None):
    home = hermes_home(tmp_path, client_settings)
    env = base_env(tmp_path, client_settings) | {
        "HERMES_HOME": str(home),
        "HERMES_DISABLE_LAZY_INSTALLS": "1",  # else it pip-installs edge-tts into its venv
        "TIRITH_ENABLED": "false",  # else it downloads a binary from GitHub
    }
    if key is not None:
        env["PODKIT_API_KEY"] = key
    work = tmp_path / "work"  # Hermes sends the cwd's git status and AGENTS.md to the model
    work.mkdir()
    hermes = client_venvs["hermes"] / "hermes"
    proc = run([hermes, "chat", "-q", PROMPT, "-Q", "-t", "podkit_probe", "--max-turns", "1"], env, work)
    return home, proc


def hermes_session(home: Path) -> tuple[dict, list[dict]]:
    db = sqlite3.connect(home / "state.db")
    db.row_factory = sqlite3.Row
    try:
        sessions = [dict(row) for row in db.execute("select * from sessions")]
        assert len(sessions) == 1, sessions
        messages = [dict(row) for row in db.execute("select * from messages order by id")]
    finally:
        db.close()
    return sessions[0], messages


def test_hermes_authenticates_accepts_the_context_and_runs_the_tool_call(client_venvs, tmp_path, client_settings):
    home, proc = run_hermes(client_venvs, tmp_path, client_settings, key=client_settings["key"])
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    for failure in ("HTTP 401", "Failed to initialize agent", "below the minimum", "API call failed"):
        assert failure not in output, output[-3000:]
    assert_no_key(proc, client_settings["key"], home / "config.yaml")

    # the plugin's handler ran with the arguments Hermes parsed from the streamed tool call
    calls = [json.loads(line) for line in (home / "get_weather_calls.jsonl").read_text().splitlines()]
    assert calls and calls[0]["city"] == "Paris", calls

    session, messages = hermes_session(home)
    assert session["billing_base_url"] == client_settings["base_url"]
    assert session["model"] == client_settings["model"]
    assert session["tool_call_count"] >= 1
    called = [
        (call["function"]["name"], json.loads(call["function"]["arguments"]))
        for message in messages
        if message["role"] == "assistant" and message["tool_calls"]
        for call in json.loads(message["tool_calls"])
    ]
    assert called and called[0][0] == "get_weather" and called[0][1]["city"] == "Paris", called
    results = [m for m in messages if m["role"] == "tool" and m["tool_name"] == "get_weather"]
    assert results and '"forecast": "sunny"' in results[0]["content"], results


def test_hermes_with_a_wrong_key_fails_with_401(client_venvs, tmp_path, client_settings):
    """The control for the test above: the same run is refused without the right key."""
    home, proc = run_hermes(client_venvs, tmp_path, client_settings, key="not-the-key")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert "HTTP 401" in proc.stdout
    assert not (home / "get_weather_calls.jsonl").exists()


# --- llm ------------------------------------------------------------------------------------


def llm_setup(client_venvs, tmp_path, client_settings) -> tuple[dict, dict[str, str]]:
    entries = yaml.safe_load(client_settings["llm_yaml"])
    matching = [e for e in entries if e["api_base"] == client_settings["base_url"]]
    assert len(matching) == 1, entries
    entry = matching[0]
    assert entry["model_name"] == client_settings["model"]
    assert entry["supports_tools"] is True
    assert entry["api_key_name"]
    assert client_settings["key"] not in client_settings["llm_yaml"]

    user_path = tmp_path / "llm"
    user_path.mkdir()
    (user_path / "extra-openai-models.yaml").write_text(client_settings["llm_yaml"])
    # no OPENAI_API_KEY: llm falls back to it, and the key must come from llm's own store
    env = base_env(tmp_path, client_settings) | {"LLM_USER_PATH": str(user_path)}
    llm = client_venvs["llm"] / "llm"
    proc = run([llm, "keys", "set", entry["api_key_name"], "--value", client_settings["key"]], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    return entry, env


def test_llm_one_shot(client_venvs, tmp_path, client_settings):
    entry, env = llm_setup(client_venvs, tmp_path, client_settings)
    llm = client_venvs["llm"] / "llm"
    argv = [llm, "-m", entry["model_id"], "-o", "max_tokens", "16", "-o", "temperature", "0", "Say hello"]
    proc = run(argv, env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Error" not in proc.stderr, proc.stderr[-3000:]
    assert_no_key(proc, client_settings["key"])
    logs = run([llm, "logs", "-n", "1", "--json"], env, tmp_path)
    assert logs.returncode == 0, logs.stderr
    (logged,) = json.loads(logs.stdout)
    assert logged["model"] == entry["model_id"] and logged["prompt"] == "Say hello"


def test_llm_parses_the_tool_call(client_venvs, tmp_path, client_settings):
    entry, env = llm_setup(client_venvs, tmp_path, client_settings)
    script = tmp_path / "llm_tool_call.py"
    script.write_text(LLM_TOOL_CALL_PY)
    proc = run([client_venvs["llm"] / "python", script, entry["model_id"], PROMPT], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = json.loads(proc.stdout)
    assert calls and calls[0]["name"] == "get_weather" and calls[0]["arguments"]["city"] == "Paris", calls


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def test_openai_agents_runs_the_tool_call_with_tracing_off(client_venvs, tmp_path, client_settings):
    script = tmp_path / "agents_probe.py"
    script.write_text(AGENTS_PY)
    env = base_env(tmp_path, client_settings) | {
        "PODKIT_BASE_URL": client_settings["base_url"],
        "PODKIT_API_KEY": client_settings["key"],
        "PODKIT_MODEL": client_settings["model"],
        "PROMPT": PROMPT,
        # a stand-in OpenAI key: were tracing on, the SDK would try to export traces to OpenAI
        # with it and print "[non-fatal] Tracing ..." (without one it skips export silently)
        "OPENAI_API_KEY": "sk-podkit-e2e-not-a-key",
    }
    if client_settings["ca_file"]:
        env["PODKIT_CA_FILE"] = str(client_settings["ca_file"])
    proc = run([client_venvs["agents"] / "python", script], env, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Tracing" not in proc.stderr and "trace export" not in proc.stderr, proc.stderr[-3000:]
    assert_no_key(proc, client_settings["key"])
    result = json.loads(proc.stdout)
    assert result["calls"] and result["calls"][0]["city"] == "Paris", result
    assert json.loads(result["final_output"])["forecast"] == "sunny"
