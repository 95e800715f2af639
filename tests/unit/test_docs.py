"""The docs site against the code: every generated table comes out of the code it names, every
command has a page, the exit codes agree with ``podkit verify --help``, and the README stays short.

``mkdocs build --strict`` (scripts/test.sh) checks the links and anchors; these tests check what a
build cannot see.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from podkit import __version__
from podkit.client.outcome import MEANINGS, Outcome, exit_codes_table
from podkit.settings import SETTINGS, settings_table
from podkit_cli import cli
from tests.helpers import load_docs_hooks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


hooks = load_docs_hooks()


def page(name: str) -> str:
    """A page as the site shows it: its markers expanded."""
    return hooks.expand((DOCS / name).read_text(), name)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_marker_on_every_page_expands(path):
    text = hooks.expand(path.read_text(), str(path))
    assert "<!-- podkit:" not in text


def test_an_unknown_marker_names_the_page_and_the_known_ones():
    with pytest.raises(ValueError, match=r"x\.md: unknown marker podkit:setings; known: agents, commands, exit-codes"):
        hooks.expand("<!-- podkit:setings -->", "x.md")


def test_a_help_marker_for_a_command_that_is_not_one_lists_the_commands():
    with pytest.raises(KeyError, match="podkit has no command 'verfy'; it has: bench, cache"):
        hooks.expand("<!-- podkit:help verfy -->", "x.md")


def test_the_settings_page_shows_every_declaration():
    text = page("settings.md")
    assert settings_table() in text
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in text


def test_every_command_has_a_page_with_its_help():
    assert sorted(hooks.COMMAND_PAGES) == sorted(cli.commands)
    for name, link in hooks.COMMAND_PAGES.items():
        text = page(f"commands/{link}")
        assert f"$ podkit {name} --help\nUsage: podkit {name} " in text, name
    table = page("commands/index.md")
    for name, found in cli.commands.items():
        for sub in getattr(found, "commands", None) or [""]:
            assert f"[`podkit {f'{name} {sub}'.strip()}`]" in table


def test_the_exit_code_table_has_every_outcome_and_bad_input():
    table = page("commands/index.md")
    assert exit_codes_table() in table
    assert sorted(MEANINGS) == sorted({*map(int, Outcome), 2})


@pytest.mark.parametrize("code", sorted(MEANINGS))
def test_verify_help_says_what_the_table_says(code):
    """verify --help lists the codes in its own words; each code's name (the meaning up to its
    parenthesis) must be there, next to the code."""
    help_text = " ".join(CliRunner().invoke(cli, ["verify", "--help"]).output.split())
    name = MEANINGS[code].split(" (")[0]
    assert f"{code} {name}" in help_text, (code, name)


def test_the_readme_is_read_in_five_minutes_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).exists(), link


def test_the_version_is_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "podkit.__version__"}
    assert CliRunner().invoke(cli, ["--version"]).output == f"podkit, version {__version__}\n"
    assert f"\n## {__version__}\n" in (ROOT / "CHANGELOG.md").read_text()


#: The refusals page's rows that the settings make, as (the datum, the message the page quotes):
#: each quote must be on the page and be what the code says.
SETTINGS_REFUSALS = [
    ({"vllm_max_model_length": 65536}, "unknown setting vllm_max_model_length; did you mean vllm_max_model_len?"),
    ({"vllm_host": "0.0.0.0"}, "vllm_host is no longer a setting: vLLM now listens on 127.0.0.1 only"),
    ({"podkit_restart_backoff_max": 30}, "supervisord restarts the server now: see podkit_start_retries"),
    (
        {"podkit_domain": "https://x"},
        "podkit_domain must be a DNS name such as 'llm.example.com' (no scheme, port or path), got 'https://x'",
    ),
    (
        {"vllm_served_model_name": "coder\nx"},
        "vllm_served_model_name holds a control character ('\\n' at position 5): a datum is one line of "
        "printable text; remove it",
    ),
    (
        {"podkit_idle_stop_minutes": 1e300},
        "podkit_idle_stop_minutes must be minutes, 0 (off) or from 0.1 to 525600 (a year), e.g. 30 or 0.5, got 1e+300",
    ),
    (
        {"podkit_public": "false"},
        "podkit_public must be True or False (a Python bool), got 'false': write podkit_public = False, without quotes",
    ),
    (
        {"vllm_extra_env": {"MY-VAR": "1"}},
        "vllm_extra_env has an invalid variable name 'MY-VAR': use letters, digits and _",
    ),
    (
        {"vllm_extra_args": ["--api_key", "K"]},
        "vllm_extra_args must not carry --api-key (vLLM reads '--api_key' as it): a key on argv is visible "
        "to every local user",
    ),
    (
        {"vllm_tool_call_parser": "not a name!"},
        "vllm_tool_call_parser must be a parser name such as 'hermes', 'auto' or None, got 'not a name!'",
    ),
]


@pytest.mark.parametrize("datum, quoted", SETTINGS_REFUSALS, ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_the_refusals_page_quotes_what_the_settings_say(datum, quoted):
    from podkit.checks import SettingsError
    from podkit.settings import Settings, defaults

    assert quoted in " ".join(page("refusals.md").split()), "the page does not quote it"
    with pytest.raises(SettingsError) as refused:
        Settings.from_mapping({**defaults(), **datum})
    assert quoted in str(refused.value)


def test_the_pages_that_hold_generated_text_hold_what_the_code_says_now():
    """docs/agents.md reads whole in the repository: its generated block is what the registry
    writes now (python docs/hooks.py --write puts it back)."""
    for name in hooks.HELD:
        text = (DOCS / name).read_text()
        assert hooks.BLOCK.search(text), name
        assert hooks.fill(text, name) == text, f"docs/{name} is stale: run .venv/bin/python docs/hooks.py --write"


def test_each_agents_section_installs_the_version_the_e2e_layer_runs():
    from podkit.client.agents import AGENTS
    from tests.e2e.agent_installs import AGENTS as PINNED
    from tests.e2e.agent_installs import CLIENTS

    pins = {**PINNED, **CLIENTS, "openai": CLIENTS["agents"]}
    untested = {"env", "open-webui"}  # no program; too heavy for the suite (one manual run: docs/agents.md)
    for name, entry in AGENTS.items():
        if name in untested:
            continue
        pin = pins[name]
        said = entry.install.replace("'", "")
        assert f"{pin.package}@{pin.version}" in said or f"{pin.package}=={pin.version}" in said, (name, said, pin)
    text = (DOCS / "agents.md").read_text()
    for name, entry in AGENTS.items():
        if entry.install:
            assert f"Install: `{entry.install}`" in text, name


# --- the deploy's steps: told once, in each step's docstring (roles/), and the table made from them

#: The longest a table cell may be: a sentence or two; the long story is the step's section.
CELL = 300


def converge_calls(role: str) -> list[str]:
    """The methods ``roles/<role>.py``'s ``converge()`` calls, in order."""
    import ast

    tree = ast.parse((ROOT / "roles" / f"{role}.py").read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == role.title())
    converge = next(node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "converge")
    return [statement.value.func.attr for statement in converge.body[1:]]  # type: ignore[attr-defined]


@pytest.mark.parametrize("role, before", [("server", []), ("router", ["read"])])
def test_the_steps_are_numbered_in_the_order_the_role_takes_them(role, before):
    steps = hooks.deploy_steps(role)
    assert [int(step["number"]) for step in steps] == list(range(1, len(steps) + 1))
    assert [step["method"] for step in steps] == before + converge_calls(role)
    for step in steps:
        assert step["what"] and step["converged"], step["method"]
        assert len(step["what"]) <= CELL and len(step["converged"]) <= CELL, f"{step['method']}: tell it in its section"


def test_how_it_works_tells_each_step_in_its_section_and_every_one_of_them():
    text = page("how-it-works.md")
    assert hooks._steps("server") in text and hooks._steps("router") in text
    steps = {step["method"]: step for step in hooks.deploy_steps("server")}
    for step in steps.values():
        assert f"\n### {step['number']}. {step['title']}\n" in text, "each step has a section for its story"
    # the steps a reader once could not find: vLLM's check of a new launch, the files kept for
    # rollback, the measured plan, the self-stop's proof
    assert {"check_launch", "measure", "self_stop"} <= set(steps)
    assert "kept" in steps["check_launch"]["what"] and "random weights" in steps["measure"]["what"]


def test_every_refusal_the_page_quotes_is_said_by_its_check_and_quoted():
    from podkit_cli.refusals import REFUSALS, quote

    raw = (DOCS / "refusals.md").read_text()
    for name in REFUSALS:
        assert f"<!-- podkit:refusal {name} -->" in raw, f"{name} is not on the page"
        said = quote(name)
        assert said.startswith("`") and len(said) <= 310 and "\n" not in said
    with pytest.raises(KeyError, match="no refusal 'nope'; known: api-key-arg"):
        quote("nope")
