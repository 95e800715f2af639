"""podkit.client.agents: one renderer per agent (the CLI: test_agents_cli.py).

Every agent is rendered from one table (FACTS): what its files must hold once parsed by their own
format's parser, what its environment must hold once bash has evaluated it, and its flags. The
key file holds a sentinel that must appear nowhere in what is rendered, yet come out of the
environment when the shell runs it. Hostile model names and URLs must stay one value. Where an
agent publishes a schema, the keys we write are checked against the facts vendored below.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from podkit.client.agents import AGENTS, agent, setups
from podkit.client.agents.base import guide
from podkit.client.agents.docs import EXAMPLE
from podkit.client.connect import ClientSettings, ConnectError, output_limit
from podkit.text import clean
from tests.helpers import bash_env as evaluated
from tests.helpers import parse_config as parse

SENTINEL = "sentinel-" + "5f0c" * 8  # the key: never in a rendered file, argv or note
NEW = [
    "codex",
    "opencode",
    "continue",
    "aider",
    "qwen",
    "goose",
    "mini-swe-agent",
    "claude",
    "pi",
    "kilo",
    "openhands",
    "gptme",
    "smolagents",
    "open-webui",
    "litellm",
    "gemini",
]


def settings(tmp_path: Path, model="coder", url="http://127.0.0.1:18000/v1", context=65536, ca=False, host="box"):
    key_file = tmp_path / "key dir" / "api_key"  # a space: every reference must quote it
    key_file.parent.mkdir(exist_ok=True)
    key_file.write_text(SENTINEL + "\n")
    return ClientSettings(
        host=host,
        base_url=url,
        model=model,
        context_length=context,
        key_file=str(key_file),
        ca_file=str(tmp_path / "ca.crt") if ca else None,
        tls="internal" if ca else "off",
    )


def values(cs: ClientSettings) -> dict:
    context = cs.context_length
    return {
        "url": cs.base_url,
        "root": cs.base_url.removesuffix("/v1"),
        "model": cs.model,
        "litellm": f"openai/{cs.model}",
        "chosen": f"podkit/{cs.model}",
        "context": context,
        "output": output_limit(context),
        "output_text": str(output_limit(context)),
        "context_text": str(context),
        "key": SENTINEL,
        "budget": str(context - output_limit(context)),
    }


# Per agent: (file index, path in the parsed file, expected); ("env", name, expected) after bash
# runs the exports; ("args", expected argv). "$name" is looked up in values(cs).
FACTS = {
    "codex": [
        (0, ("model",), "$model"),
        (0, ("model_provider",), "podkit"),
        (0, ("model_context_window",), "$context"),
        (0, ("model_providers", "podkit", "base_url"), "$url"),
        (0, ("model_providers", "podkit", "env_key"), "PODKIT_API_KEY"),
        (0, ("model_providers", "podkit", "wire_api"), "responses"),
        ("env", "PODKIT_API_KEY", "$key"),
    ],
    "opencode": [
        (0, ("provider", "podkit", "npm"), "@ai-sdk/openai-compatible"),
        (0, ("provider", "podkit", "options", "baseURL"), "$url"),
        (0, ("provider", "podkit", "options", "apiKey"), "{env:PODKIT_API_KEY}"),
        (0, ("provider", "podkit", "models", "$model", "limit", "context"), "$context"),
        (0, ("provider", "podkit", "models", "$model", "limit", "output"), "$output"),
        (0, ("model",), "$chosen"),
        (0, ("small_model",), "$chosen"),
        ("env", "PODKIT_API_KEY", "$key"),
    ],
    "continue": [
        (0, ("schema",), "v1"),
        (0, ("models", 0, "provider"), "openai"),
        (0, ("models", 0, "model"), "$model"),
        (0, ("models", 0, "apiBase"), "$url"),
        (0, ("models", 0, "apiKey"), "${{ secrets.PODKIT_API_KEY }}"),
        (0, ("models", 0, "capabilities"), ["tool_use"]),
        (0, ("models", 0, "defaultCompletionOptions", "contextLength"), "$context"),
        (0, ("models", 0, "defaultCompletionOptions", "maxTokens"), "$output"),
        ("env", "PODKIT_API_KEY", "$key"),
    ],
    "aider": [
        (0, ("$litellm", "max_input_tokens"), "$context"),
        (0, ("$litellm", "max_output_tokens"), "$output"),
        (0, ("$litellm", "input_cost_per_token"), 0),
        (0, ("$litellm", "output_cost_per_token"), 0),
        (0, ("$litellm", "litellm_provider"), "openai"),
        (1, (0, "name"), "$litellm"),
        (1, (0, "extra_params", "max_tokens"), "$output"),
        ("env", "OPENAI_BASE_URL", "$url"),
        ("env", "OPENAI_API_KEY", "$key"),
        ("args", ["--model", "$litellm"]),
    ],
    "qwen": [
        ("env", "OPENAI_BASE_URL", "$url"),
        ("env", "OPENAI_API_KEY", "$key"),
        ("env", "OPENAI_MODEL", "$model"),
        ("args", ["--auth-type", "openai"]),
    ],
    "goose": [
        ("env", "OPENAI_API_KEY", "$key"),
        ("env", "OPENAI_BASE_URL", "$url"),
        ("env", "OPENAI_HOST", "$root"),
        ("env", "OPENAI_BASE_PATH", "v1/chat/completions"),
        ("env", "GOOSE_PROVIDER", "openai"),
        ("env", "GOOSE_MODEL", "$model"),
        ("env", "GOOSE_CONTEXT_LIMIT", "$context_text"),
        ("env", "GOOSE_MAX_TOKENS", "$output_text"),
        ("env", "GOOSE_DISABLE_KEYRING", "1"),
    ],
    "mini-swe-agent": [
        ("env", "OPENAI_BASE_URL", "$url"),
        ("env", "OPENAI_API_KEY", "$key"),
        ("env", "MSWEA_CONFIGURED", "true"),
        ("env", "MSWEA_COST_TRACKING", "ignore_errors"),
        ("args", ["-m", "$litellm", "-c", "mini.yaml", "-c", "model.model_kwargs.max_tokens=$output_text"]),
    ],
    "claude": [
        ("env", "ANTHROPIC_BASE_URL", "$root"),
        ("env", "ANTHROPIC_AUTH_TOKEN", "$key"),
        ("env", "ANTHROPIC_MODEL", "$model"),
        ("env", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "$model"),
        ("env", "ANTHROPIC_SMALL_FAST_MODEL", "$model"),
        ("env", "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "$output_text"),
        ("env", "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "$context_text"),
    ],
    "pi": [
        (0, ("providers", "podkit", "baseUrl"), "$url"),
        (0, ("providers", "podkit", "api"), "openai-completions"),
        (0, ("providers", "podkit", "apiKey"), "PODKIT_API_KEY"),
        (0, ("providers", "podkit", "compat"), {"supportsDeveloperRole": False, "supportsReasoningEffort": False}),
        (0, ("providers", "podkit", "models", 0, "id"), "$model"),
        (0, ("providers", "podkit", "models", 0, "contextWindow"), "$context"),
        (0, ("providers", "podkit", "models", 0, "maxTokens"), "$output"),
        ("env", "PODKIT_API_KEY", "$key"),
        ("args", ["--provider", "podkit", "--model", "$model"]),
    ],
    "kilo": [
        (0, ("provider", "podkit", "options", "baseURL"), "$url"),
        (0, ("provider", "podkit", "options", "apiKey"), "{env:PODKIT_API_KEY}"),
        (0, ("provider", "podkit", "models", "$model", "limit", "context"), "$context"),
        (0, ("provider", "podkit", "models", "$model", "limit", "output"), "$output"),
        (0, ("model",), "$chosen"),
        ("env", "PODKIT_API_KEY", "$key"),
    ],
    "openhands": [
        ("env", "LLM_MODEL", "$litellm"),
        ("env", "LLM_BASE_URL", "$url"),
        ("env", "LLM_API_KEY", "$key"),
        ("args", ["--override-with-envs"]),
    ],
    "gptme": [
        ("env", "OPENAI_BASE_URL", "$url"),
        ("env", "OPENAI_API_KEY", "$key"),
        ("args", ["-m", "local/$model", "--tool-format", "tool", "--context-budget", "$budget"]),
    ],
    "smolagents": [
        ("env", "OPENAI_API_KEY", "$key"),
        (
            "args",
            [
                "--model-type",
                "OpenAIModel",
                "--model-id",
                "$model",
                "--api-base",
                "$url",
                "--action-type",
                "tool_calling",
            ],
        ),
    ],
    "open-webui": [
        ("env", "OPENAI_API_BASE_URL", "$url"),
        ("env", "OPENAI_API_KEY", "$key"),
        ("env", "ENABLE_PERSISTENT_CONFIG", "False"),
        ("env", "ENABLE_OLLAMA_API", "False"),
    ],
    "litellm": [
        (0, ("model_list", 0, "model_name"), "$model"),
        (0, ("model_list", 0, "litellm_params", "model"), "$litellm"),
        (0, ("model_list", 0, "litellm_params", "api_base"), "$url"),
        (0, ("model_list", 0, "litellm_params", "api_key"), "os.environ/PODKIT_API_KEY"),
        (0, ("model_list", 0, "litellm_params", "max_tokens"), "$output"),
        (0, ("model_list", 0, "model_info", "max_input_tokens"), "$context"),
        (0, ("model_list", 0, "model_info", "max_output_tokens"), "$output"),
        (0, ("general_settings", "master_key"), "os.environ/PODKIT_API_KEY"),
        ("env", "PODKIT_API_KEY", "$key"),
    ],
    "gemini": [
        (0, ("security", "auth", "selectedType"), "gemini-api-key"),
        (0, ("privacy", "usageStatisticsEnabled"), False),
        ("env", "GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:4000"),
        ("env", "GEMINI_API_KEY", "$key"),
    ],
}


def expand(value, v: dict):
    if isinstance(value, str) and value.startswith("$") and value[1:] in v:
        return v[value[1:]]
    if isinstance(value, str) and "=$" in value:
        head, name = value.split("=$", 1)
        return f"{head}={v[name]}"
    if isinstance(value, str) and "/$" in value:
        head, name = value.split("/$", 1)
        return f"{head}/{v[name]}"
    if isinstance(value, list):
        return [expand(item, v) for item in value]
    return value


def dig(document, path, v):
    for step in path:
        document = document[expand(step, v)]
    return document


def check_facts(name: str, cs: ClientSettings) -> None:
    setup = agent(name).render(cs)
    v = values(cs)
    parsed = [parse(f.path, f.content) for f in setup.files]
    env = evaluated(setup.script()) if setup.env else {}
    for fact in FACTS[name]:
        if fact[0] == "env":
            assert env[fact[1]] == expand(fact[2], v), (name, fact)
        elif fact[0] == "args":
            assert list(setup.args) == expand(fact[1], v), name
            # the example run passes the same flags, in order
            run = shlex.split(setup.run.replace('"PROMPT"', "PROMPT"))
            assert any(run[i : i + len(setup.args)] == list(setup.args) for i in range(len(run))), setup.run
        else:
            index, path, expected = fact
            assert dig(parsed[index], path, v) == expand(expected, v), (name, fact)


@pytest.mark.proc
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("context", [8192, 65536, 262144])
def test_each_agent_gets_the_endpoint_the_model_and_the_limits(name, context, tmp_path):
    cs = settings(tmp_path, context=context)
    check_facts(name, cs)
    _, output = values(cs)["context"], values(cs)["output"]
    assert output < context and output == min(8192, context // 4)


@pytest.mark.proc
@pytest.mark.parametrize("name", list(AGENTS))
def test_the_key_is_nowhere_in_what_is_rendered_but_the_shell_reads_it(name, tmp_path):
    cs = settings(tmp_path, ca=True)
    setup = agent(name).render(cs)
    rendered = json.dumps(setup.as_dict()) + "".join(line for f in (None, *setup.files) for line in guide(setup, f))
    assert SENTINEL not in rendered
    assert evaluated(setup.exports())["PODKIT_API_KEY"] == SENTINEL
    assert not any(SENTINEL in arg for arg in setup.args)
    for file in setup.files:
        parse(file.path, file.content)


def test_every_file_goes_home_or_into_the_project_folder():
    for name, entry in AGENTS.items():
        assert entry.name == name
        for file in entry.render(EXAMPLE).files:
            assert file.path.startswith("~/") or not file.path.startswith("/"), (name, file.path)


HOSTILE_MODELS = [
    'a "quoted" name',
    "new\nline = 1\n[evil]",
    "back\\slash\\",
    "tab\there # hash",
    "del\x7fnel\x85ls\u2028end",
    "]] [x] = {y} *star &anchor !tag",
    "ünï ☃ 模型 🚀",
    "yes",
    "123",
    "- dash: colon",
    "bidi\u202eevil\u2066 c1\x9b[2J bom\ufeff",
]


@pytest.mark.proc
@pytest.mark.parametrize("model", HOSTILE_MODELS)
@pytest.mark.parametrize("name", NEW)
def test_a_hostile_model_name_stays_one_value(name, model, tmp_path):
    check_facts(name, settings(tmp_path, model=model))


@pytest.mark.parametrize("model", HOSTILE_MODELS)
@pytest.mark.parametrize("name", list(AGENTS))
def test_a_file_printed_through_the_terminal_filter_keeps_every_value(name, model, tmp_path):
    """podkit prints host text through podkit.text.clean, which drops controls: every file escapes them."""
    for file in agent(name).render(settings(tmp_path, model=model)).files:
        assert clean(file.content, lines=True) == file.content, file.path


@pytest.mark.proc
@pytest.mark.parametrize("url", ['http://127.0.0.1:1/"q"\n[x]\\/v1', "https://h.example/a b/#'$(id)'/v1"])
@pytest.mark.parametrize("name", NEW)
def test_a_hostile_url_stays_one_value(name, url, tmp_path):
    check_facts(name, settings(tmp_path, url=url))


@pytest.mark.parametrize("name", [name for name, entry in AGENTS.items() if entry.needs_context])
def test_an_agent_that_needs_the_context_names_the_host_and_the_fix(name, tmp_path):
    cs = settings(tmp_path, context=None)
    with pytest.raises(ConnectError, match=r"^box: the context length is unknown, and .+ needs it: set vllm_max"):
        agent(name).render(cs)


def test_an_unknown_agent_lists_the_known_ones():
    with pytest.raises(ConnectError, match="unknown agent 'cursor'; one of env, hermes, llm, openai, codex"):
        setups("cursor", [])


@pytest.mark.proc
@pytest.mark.parametrize(
    "name, var",
    [
        ("codex", "CODEX_CA_CERTIFICATE"),
        ("opencode", "NODE_EXTRA_CA_CERTS"),
        ("qwen", "NODE_EXTRA_CA_CERTS"),
        ("claude", "NODE_EXTRA_CA_CERTS"),
        ("aider", "SSL_CERT_FILE"),
        ("goose", "SSL_CERT_FILE"),
        ("mini-swe-agent", "SSL_CERT_FILE"),
    ],
)
def test_an_agent_is_told_the_pinned_ca_in_its_own_variable(name, var, tmp_path):
    with_ca = agent(name).render(settings(tmp_path, ca=True))
    assert evaluated(with_ca.exports())[var] == str(tmp_path / "ca.crt")
    assert var not in agent(name).render(settings(tmp_path)).env


def test_continue_trusts_the_pinned_ca_in_its_own_file(tmp_path):
    config = yaml.safe_load(agent("continue").render(settings(tmp_path, ca=True)).files[0].content)
    assert config["models"][0]["requestOptions"] == {"caBundlePath": str(tmp_path / "ca.crt")}


# --- the agents' published schemas (the facts we rely on, vendored) --------------------------

#: openai/codex codex-rs/core/config.schema.json (ConfigToml; additionalProperties false), the
#: keys podkit may write, and ModelProviderInfo's properties and WireApi's default.
CODEX_TOP = {"model", "model_provider", "model_context_window", "model_auto_compact_token_limit", "model_providers"}
CODEX_PROVIDER = {
    "name",
    "base_url",
    "env_key",
    "env_key_instructions",
    "env_http_headers",
    "experimental_bearer_token",
    "http_headers",
    "query_params",
    "request_max_retries",
    "requires_openai_auth",
    "stream_idle_timeout_ms",
    "stream_max_retries",
    "supports_websockets",
    "websocket_connect_timeout_ms",
    "wire_api",
}
#: @continuedev/cli 1.5.47, packages/config-yaml/src/schemas/models.ts (in its source map).
CONTINUE_MODEL = {
    "name",
    "model",
    "provider",
    "apiKey",
    "apiBase",
    "contextLength",
    "maxStopWords",
    "roles",
    "capabilities",
    "defaultCompletionOptions",
    "cacheBehavior",
    "requestOptions",
    "embedOptions",
    "chatOptions",
    "promptTemplates",
    "useLegacyCompletionsEndpoint",
    "useResponsesApi",
    "env",
    "autocompleteOptions",
}
CONTINUE_ROLES = {"chat", "autocomplete", "embed", "rerank", "edit", "apply", "summarize", "subagent"}
CONTINUE_COMPLETION = {"contextLength", "maxTokens", "temperature", "topP", "topK", "minP", "stop", "n", "stream"}
CONTINUE_REQUEST = {"timeout", "verifySsl", "caBundlePath", "proxy", "headers", "extraBodyProperties", "noProxy"}
#: aider-chat 0.86.2 aider/models.py ModelSettings fields (what .aider.model.settings.yml takes).
AIDER_SETTINGS = {"name", "edit_format", "weak_model_name", "use_repo_map", "extra_params", "use_temperature"}
#: litellm's model registry entries (model_prices_and_context_window.json), the keys aider reads.
LITELLM_ENTRY = {
    "max_tokens",
    "max_input_tokens",
    "max_output_tokens",
    "input_cost_per_token",
    "output_cost_per_token",
    "litellm_provider",
    "mode",
}
#: opencode 1.18 config (opencode.ai/config.json, not available offline): the keys checked
#: against a running opencode in shared/research/agents.md.
OPENCODE_TOP = {"$schema", "provider", "model", "small_model"}
OPENCODE_PROVIDER = {"npm", "name", "options", "models"}


def test_codex_writes_only_keys_its_schema_has(tmp_path):
    config = tomllib.loads(agent("codex").render(settings(tmp_path)).files[0].content)
    assert set(config) <= CODEX_TOP
    for provider in config["model_providers"].values():
        assert set(provider) <= CODEX_PROVIDER and provider["wire_api"] == "responses"
    assert all(isinstance(config[key], int) for key in ("model_context_window", "model_auto_compact_token_limit"))


def test_continue_writes_only_keys_its_schema_has(tmp_path):
    config = yaml.safe_load(agent("continue").render(settings(tmp_path, ca=True)).files[0].content)
    assert set(config) == {"name", "version", "schema", "models"}
    [model] = config["models"]
    assert set(model) <= CONTINUE_MODEL and set(model["roles"]) <= CONTINUE_ROLES
    assert set(model["defaultCompletionOptions"]) <= CONTINUE_COMPLETION
    assert set(model["requestOptions"]) <= CONTINUE_REQUEST


def test_aider_writes_litellm_and_model_settings_keys(tmp_path):
    setup = agent("aider").render(settings(tmp_path))
    metadata = json.loads(setup.files[0].content)
    assert all(set(entry) <= LITELLM_ENTRY and entry["mode"] == "chat" for entry in metadata.values())
    assert all(set(entry) <= AIDER_SETTINGS for entry in yaml.safe_load(setup.files[1].content))


def test_opencode_writes_the_keys_it_reads(tmp_path):
    config = json.loads(agent("opencode").render(settings(tmp_path)).files[0].content)
    assert set(config) <= OPENCODE_TOP and set(config["provider"]["podkit"]) <= OPENCODE_PROVIDER


def test_mini_reads_its_output_limit_as_a_number(tmp_path):
    """mini-swe-agent 2.4.6 splits ``-c key=value`` at the first ``=`` and reads the value as JSON."""
    args = agent("mini-swe-agent").render(settings(tmp_path, context=65536)).args
    spec = args[args.index("-c", args.index("-c") + 1) + 1]
    key, value = spec.split("=", 1)
    assert key.split(".") == ["model", "model_kwargs", "max_tokens"] and json.loads(value) == 8192
