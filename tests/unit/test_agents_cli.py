"""``podkit client --for AGENT`` on the command line, the ``--for openai`` program run against a
stub server with only ``openai`` installed, and the docs page the registry writes."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
import yaml

from podkit.client.agents import AGENTS
from podkit.client.agents.docs import EXAMPLE, page, sections
from podkit.client.connect import ClientSettings, openai_snippet
from tests import helpers
from tests.helpers import bash_env as evaluated
from tests.helpers import load_docs_hooks as load_hooks
from tests.helpers import one_error_line as one_error
from tests.helpers import parse_config as parse
from tests.helpers import podkit

KEY = "k3y-" + "a1b2" * 8  # in the key file: never in what podkit prints


def write_inventory(tmp_path: Path, hosts: dict[str, dict]) -> str:
    return helpers.write_inventory(tmp_path, hosts, KEY)


# --- the openai program --------------------------------------------------------------------


class _Chat(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Chat.seen.append((self.path, self.headers.get("Authorization"), body))
        reply = {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "def rev(s): ..."}}
            ],
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.proc
def test_the_openai_program_runs_where_only_openai_is_installed(tmp_path):
    """The venv has openai but not openai-agents: the program answers and says how to add the rest."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        cs = ClientSettings(host="box", base_url=url, model="coder", context_length=8192, key_file="/k")
        program = tmp_path / "podkit_openai.py"
        program.write_text(openai_snippet(cs))
        env = {"PATH": os.environ["PATH"], "PODKIT_API_KEY": KEY, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
        run = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env, timeout=120)
    finally:
        server.shutdown()
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["def rev(s): ...", "(pip install openai-agents to run the Agents SDK part too)"]
    path, auth, body = _Chat.seen[-1]
    assert (path, auth, body["model"], body["max_tokens"]) == (
        "/v1/chat/completions",
        f"Bearer {KEY}",
        "coder",
        2048,
    )


# --- the docs page -------------------------------------------------------------------------


def test_the_docs_page_has_one_section_per_agent_with_its_commands():
    text = page()
    for name, entry in AGENTS.items():
        heading = f"## {entry.title} (`--for {name}`)"
        assert text.count(heading) == 1, name
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        setup = entry.render(EXAMPLE)
        assert f"--for {name}" in section and setup.run in section
        for file in setup.files:
            assert f"> {file.path}" in section
    assert "/path/to/api_key" not in text  # the key file is the reader's: only KEYFILE in prose


def test_the_docs_site_shows_the_generated_sections():
    """docs/agents.md holds the marker the site's hook fills with :func:`sections`, so the page
    is the registry's text whenever the site is built."""
    hooks = load_hooks()
    shown = hooks.expand((helpers.ROOT / "docs" / "agents.md").read_text(), "agents.md")
    assert sections() in shown and shown.startswith("# Connect an agent\n")
    assert page() == "# Connect an agent\n\n" + sections()


# --- podkit client --for AGENT -------------------------------------------------------------

BOX = {"ssh_hostname": "10.192.0.10", "vllm_served_model_name": "coder", "podkit_tls": "off"}
POD = {"ssh_hostname": "10.192.0.11", "vllm_served_model_name": "coder", "vllm_max_model_len": 32768}
FAR = {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "vllm_max_model_len": "auto"}


def test_help_lists_every_agent():
    text = podkit(Path("."), "client", "--help").stdout
    assert all(name in text for name in AGENTS)


def test_for_codex_prints_the_file_and_says_where_it_goes(tmp_path):
    result = podkit(tmp_path, "client", write_inventory(tmp_path, {"box": BOX}), "--for", "codex")
    assert result.exit_code == 0, result.output
    assert tomllib.loads(result.stdout)["model_providers"]["podkit"]["base_url"] == "http://10.192.0.10:8000/v1"
    err = result.stderr.splitlines()
    assert "# codex: write this to ~/.codex/config.toml" in err
    assert f'#   export PODKIT_API_KEY="$(cat {tmp_path}/api_key)"' in err
    assert '# run: codex exec --skip-git-repo-check "PROMPT"' in err
    assert KEY not in result.output


@pytest.mark.proc
def test_for_an_agent_without_a_file_prints_exports_to_eval(tmp_path):
    result = podkit(tmp_path, "client", write_inventory(tmp_path, {"box": BOX}), "--for", "goose")
    assert result.exit_code == 0 and KEY not in result.output
    env = evaluated(result.stdout)
    assert (env["GOOSE_MODEL"], env["OPENAI_API_KEY"], env["GOOSE_CONTEXT_LIMIT"]) == ("coder", KEY, "65536")
    assert '# run: goose run --no-session --max-turns 1 -t "PROMPT"' in result.stderr.splitlines()


@pytest.mark.proc
def test_file_and_exports_pick_one_part(tmp_path):
    inv = write_inventory(tmp_path, {"box": BOX})
    second = podkit(tmp_path, "client", inv, "--for", "aider", "--file", ".aider.model.settings.yml")
    assert second.exit_code == 0 and yaml.safe_load(second.stdout)[0]["extra_params"] == {"max_tokens": 8192}
    exports = podkit(tmp_path, "client", inv, "--for", "aider", "--exports")
    assert evaluated(exports.stdout)["OPENAI_BASE_URL"] == "http://10.192.0.10:8000/v1"
    hermes = podkit(tmp_path, "client", inv, "--for", "hermes", "--exports")
    assert evaluated(hermes.stdout)["PODKIT_API_KEY"] == KEY
    wrong = podkit(tmp_path, "client", inv, "--for", "aider", "--file", "x.yml")
    assert wrong.exit_code == 2
    assert one_error(wrong) == "Error: --file x.yml: aider reads .aider.model.metadata.json, .aider.model.settings.yml"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--file", "a"], "Error: --file picks a part of an agent's setup: add --for AGENT"),
        (["--exports"], "Error: --exports picks a part of an agent's setup: add --for AGENT"),
        (["--for", "codex", "--json", "--exports"], "Error: --json prints the whole setup: leave out --exports"),
        (
            ["--for", "codex", "--file", "a", "--exports"],
            "Error: --file and --exports print different things: choose one",
        ),
        (
            ["--for", "codex"],
            "Error: --for codex writes one host's settings but 2 are selected (box, pod): pick one with --host",
        ),
    ],
)
def test_bad_combinations_are_one_line(args, message, tmp_path):
    result = podkit(tmp_path, "client", write_inventory(tmp_path, {"box": BOX, "pod": POD}), *args)
    assert result.exit_code == 2 and one_error(result) == message


@pytest.mark.proc
@pytest.mark.parametrize("name", list(AGENTS))
def test_json_is_one_setup_per_host(name, tmp_path):
    result = podkit(tmp_path, "client", write_inventory(tmp_path, {"box": BOX, "pod": POD}), "--for", name, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(row["host"], row["agent"]) for row in rows] == [("box", name), ("pod", name)]
    assert all(set(row) == {"host", "agent", "files", "env", "args", "run", "notes", "once"} for row in rows)
    assert KEY not in result.output
    for row in rows:
        for file in row["files"]:
            parse(file["path"], file["content"])
        # in the JSON's own order (sorted keys): every variable that carries the key stands alone
        exports = "".join(f"export {k}={v}\n" for k, v in row["env"].items())
        env = evaluated(exports) if row["env"] else {}
        assert not row["env"] or env["PODKIT_API_KEY"] == KEY
        for var in ("OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
            assert var not in row["env"] or env[var] == KEY, (name, var)


@pytest.mark.proc
def test_an_unknown_context_stops_an_agent_that_needs_it_in_one_line(tmp_path):
    inv = write_inventory(tmp_path, {"far": FAR})
    result = podkit(tmp_path, "client", inv, "--for", "codex")
    assert result.exit_code == 1
    line = one_error(result)
    assert line.startswith("Error: far: the context length is unknown") and line.endswith(
        "; Codex needs it: set vllm_max_model_len to a number"
    )
    assert podkit(tmp_path, "client", inv, "--for", "openai").exit_code == 0
