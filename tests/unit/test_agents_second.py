"""The second wave of ``--for`` profiles and what every profile shares: a served model name that no
profile can hold as written is refused in one line, ``--for env`` carries the context and names the
tools that ignore ``OPENAI_BASE_URL``, Cline's key is only ever a reference in what podkit prints,
and the LiteLLM bridge and Gemini CLI agree on the proxy."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from podkit.client.agents import AGENTS, agent, setups
from podkit.client.agents.bridge import PROXY
from podkit.client.agents.printout import printout, rows
from podkit.client.connect import ConnectError
from tests.helpers import bash_env as evaluated
from tests.unit.test_agents import SENTINEL, settings

UNWRITABLE = [
    ("new\nline", "U+000A LINE FEED"),
    ("tab\there", "U+0009 TAB"),
    ("del\x7fx", "U+007F"),
    ("c1\x85x", "U+0085"),
    ("ls\u2028x", "U+2028 LINE SEPARATOR"),
    ("bidi\u202eevil", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("iso\u2066x", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    ("bom\ufeffx", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
    ("esc\x1b[2Jx", "U+001B"),
]


@pytest.mark.parametrize("model, named", UNWRITABLE)
@pytest.mark.parametrize("name", list(AGENTS))
def test_a_model_name_no_profile_can_hold_is_refused_in_one_line_never_changed(name, model, named, tmp_path):
    cs = settings(tmp_path, model=model)
    with pytest.raises(ConnectError) as raised:
        setups(name, [cs])
    message = str(raised.value)
    assert message.startswith(f"box: the served model name {ascii(model)} holds {named}")
    assert message.endswith("set vllm_served_model_name to a name of printable characters and re-apply")
    assert "\n" not in message and message.isascii()
    with pytest.raises(ConnectError):
        printout(name, [(cs, None)])


@pytest.mark.parametrize("model", ['a "quoted" name', "ünï ☃ 模型 🚀", "- dash: colon", "back\\slash"])
def test_a_printable_model_name_is_written_whole(model, tmp_path):
    for name in AGENTS:
        assert setups(name, [settings(tmp_path, model=model)])


@pytest.mark.proc
def test_env_exports_the_context_and_names_the_tools_that_ignore_the_base_url(tmp_path):
    printed = printout("env", [(settings(tmp_path, context=32768), None)])
    env = evaluated(printed.stdout)
    assert (env["PODKIT_CONTEXT_LENGTH"], env["PODKIT_MAX_OUTPUT_TOKENS"]) == ("32768", "8192")
    assert env["PODKIT_API_KEY"] == env["OPENAI_API_KEY"] == SENTINEL and SENTINEL not in printed.stdout
    [line] = [line for line in printed.stderr if "ignore OPENAI_BASE_URL" in line]
    for name, entry in AGENTS.items():
        assert (f"(--for {name})" in line) == entry.ignores_base_url, name
    for name in ("codex", "pi", "smolagents", "open-webui", "goose", "gemini"):
        assert f"(--for {name})" in line
    unknown = evaluated(printout("env", [(settings(tmp_path, context=None), None)]).stdout)
    assert "PODKIT_CONTEXT_LENGTH" not in unknown and "PODKIT_MAX_OUTPUT_TOKENS" not in unknown


@pytest.mark.proc
def test_cline_is_given_the_key_by_reference_and_told_where_it_will_be(tmp_path):
    cs = settings(tmp_path)
    [row] = rows("cline", [(cs, None)])
    [once] = row["once"]
    assert SENTINEL not in json.dumps(row)
    words = shlex.split(once)
    assert words[:3] == ["cline", "auth", "-p"] and words[-2:] == ["-k", "$PODKIT_API_KEY"]
    assert words[words.index("-b") + 1] == cs.base_url and words[words.index("-m") + 1] == cs.model
    # the shell fills the key in when the line runs
    exports = "".join(f"export {k}={v}\n" for k, v in row["env"].items())
    filled = evaluated(exports + f'set -- {once}\nfor last; do :; done\nexport LAST="$last"\n')
    assert filled["LAST"] == SENTINEL
    assert any("plain text" in note and ".cline/data/settings/providers.json" in note for note in row["notes"])
    printed = printout("cline", [(cs, None)])
    assert f"# once: {once}" in printed.stderr and SENTINEL not in printed.stdout + "".join(printed.stderr)


def test_gemini_goes_through_the_proxy_the_litellm_config_serves(tmp_path):
    cs = settings(tmp_path, model="coder")
    proxy = agent("litellm").render(cs)
    config = yaml.safe_load(proxy.files[0].content)
    port = proxy.run.split("--port ")[1].split()[0]
    assert PROXY == f"http://127.0.0.1:{port}" and "--host 127.0.0.1" in proxy.run
    gemini = agent("gemini").render(cs)
    assert gemini.env["GOOGLE_GEMINI_BASE_URL"] == PROXY
    assert config["model_list"][0]["model_name"] == "coder" and "-m coder" in gemini.run
    # the proxy's master key is the podkit key: Gemini CLI sends that key, to loopback only
    assert config["general_settings"]["master_key"] == "os.environ/PODKIT_API_KEY"
    assert gemini.env["GEMINI_API_KEY"] == '"$PODKIT_API_KEY"'


def test_kilo_reads_the_opencode_file_in_its_own_folder(tmp_path):
    cs = settings(tmp_path)
    kilo, opencode = agent("kilo").render(cs), agent("opencode").render(cs)
    assert kilo.files[0].path == "~/.config/kilo/opencode.json"
    assert json.loads(kilo.files[0].content) == json.loads(opencode.files[0].content)


@pytest.mark.parametrize("context, window", [(65536, None), (99999, None), (100000, "100000"), (262144, "262144")])
def test_claude_is_given_the_context_and_compacts_there_from_its_minimum(context, window, tmp_path):
    """Claude Code 2.1.332 assumes 1M tokens for a model it does not know; a compaction window under
    its 100k minimum is read as 100k with a warning, so it is set only from there."""
    env = agent("claude").render(settings(tmp_path, context=context)).env
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(context)
    assert env.get("CLAUDE_CODE_AUTO_COMPACT_WINDOW") == window
