"""MkDocs hook: fill the markers ``<!-- podkit:NAME ARGS -->`` in the pages with text made from
the code at build time, so a table on the site cannot drift from what podkit does.

Markers (one registry, ``GENERATORS``):

    <!-- podkit:settings -->          the settings table (podkit.settings.settings_table)
    <!-- podkit:exit-codes -->        the exit codes (podkit.client.outcome.exit_codes_table)
    <!-- podkit:commands -->          every command, linked to its page (podkit_cli.reference)
    <!-- podkit:help verify -->       ``podkit verify --help`` (a group: each subcommand too)
    <!-- podkit:agents -->            one section per agent ``--for`` takes (podkit.client.agents.docs)
    <!-- podkit:plan-accuracy model -->  the plan's accuracy per kind over the reference cases
                                      (podkit.plan.reference; ``attention``: per attention kind)
    <!-- podkit:refusal unknown-key -->  a refusal in the real check's words (podkit_cli.refusals)
    <!-- podkit:steps server -->      the deploy's steps for a role, from each step's docstring in
                                      roles/<role>.py (``N. Title: what``, ``Converged: ...``); a
                                      server's titles link to their sections, ``### N. Title``

A marker this file does not know fails the build (mkdocs build --strict runs in scripts/test.sh).
``tests/unit/test_docs.py`` runs the same expansion on every page.

A marker may also hold its text in the file, so the page reads whole in the repository too: the
generated text stands between ``<!-- podkit:NAME -->`` and ``<!-- /podkit:NAME -->``. The site
shows the text generated now; ``python docs/hooks.py --write`` writes it into the files, and
``tests/unit/test_docs.py`` fails while a file's copy differs from it.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from pathlib import Path

MARKER = re.compile(r"<!-- podkit:([a-z-]+)((?: [a-z-]+)*) -->")
#: A marker that holds its generated text in the file, up to its closing marker.
BLOCK = re.compile(r"<!-- podkit:([a-z-]+)((?: [a-z-]+)*) -->\n(.*?)<!-- /podkit:\1 -->\n?", re.S)
#: The pages that hold their generated text (docs/, relative).
HELD = ("agents.md",)

#: Each top-level command's page, relative to docs/commands/ (the commands table links there).
COMMAND_PAGES = {
    "bench": "bench.md",
    "cache": "cache.md",
    "client": "client.md",
    "create": "lifecycle.md",
    "down": "lifecycle.md",
    "eval": "eval.md",
    "key": "key.md",
    "plan": "plan.md",
    "sandbox": "sandbox.md",
    "status": "lifecycle.md",
    "tunnel": "tunnel.md",
    "up": "lifecycle.md",
    "verify": "verify.md",
}


def _settings(*args: str) -> str:
    from podkit.settings import settings_table

    return settings_table()


def _exit_codes(*args: str) -> str:
    from podkit.client.outcome import exit_codes_table

    return exit_codes_table()


def _commands(*args: str) -> str:
    from podkit_cli.reference import commands_table

    return commands_table(COMMAND_PAGES)


def _help(*args: str) -> str:
    from podkit_cli.reference import help_block

    return help_block(" ".join(args))


def _agents(*args: str) -> str:
    from podkit.client.agents.docs import sections

    return sections()


#: The reference cases: public startup logs, then the starts podkit measured that were sent back.
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _plan_accuracy(by: str = "model") -> str:
    """The accuracy table; a calibration case that cannot be counted is named on stderr and left out
    (a case sent back is data: it never stops the build)."""
    from podkit.plan.reference import accuracy_table, load_cases

    skipped: list[str] = []
    table = accuracy_table(load_cases(FIXTURES / "kv_reference_cases.json", FIXTURES / "calibration", skipped), by)
    for line in skipped:
        print(f"docs: tests/fixtures/calibration/{line}", file=sys.stderr)
    return table


ROOT = Path(__file__).resolve().parent.parent
#: A step's docstring opens with its number and title: ``7. Check the new launch: what it does``.
STEP = re.compile(r"(\d+)\. ([^:]+): (.+)", re.S)


def deploy_steps(role: str) -> list[dict[str, str]]:
    """The numbered steps of ``roles/<role>.py``'s role class, in their order, read from each
    method's docstring (not imported: the roles import pyinfra): ``number``, ``title``, ``what``
    (the rest of the first paragraph), ``converged`` (the paragraph ``Converged: ...``), ``method``."""
    tree = ast.parse((ROOT / "roles" / f"{role}.py").read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == role.title())
    steps = []
    for node in cls.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        paragraphs = [" ".join(p.split()) for p in (ast.get_docstring(node) or "").split("\n\n")]
        match = STEP.fullmatch(paragraphs[0])
        if match:
            said = [p.removeprefix("Converged: ") for p in paragraphs[1:] if p.startswith("Converged: ")]
            steps.append(
                {
                    "number": match[1],
                    "title": match[2],
                    "what": match[3],
                    "converged": "".join(said),
                    "method": node.name,
                }
            )
    return sorted(steps, key=lambda step: int(step["number"]))


def step_anchor(step: dict[str, str]) -> str:
    """The anchor of a step's section, ``### 7. Check the new launch``, as the site's toc makes it."""
    from markdown.extensions.toc import slugify

    return slugify(f"{step['number']}. {step['title']}", "-")


def _steps(role: str = "server") -> str:
    rows = ["| step | what it does | on a converged host |", "|---|---|---|"]
    for step in deploy_steps(role):
        title = f"{step['number']}. {step['title']}"
        if role == "server":
            title = f"[{title}](#{step_anchor(step)})"
        what, converged = (text[:1].upper() + text[1:] for text in (step["what"], step["converged"]))
        rows.append(f"| {title} | {what} | {converged} |")
    return "\n".join(rows) + "\n"


def _refusal(name: str) -> str:
    from podkit_cli.refusals import quote

    return quote(name)


GENERATORS: dict[str, Callable[..., str]] = {
    "settings": _settings,
    "exit-codes": _exit_codes,
    "commands": _commands,
    "help": _help,
    "agents": _agents,
    "plan-accuracy": _plan_accuracy,
    "steps": _steps,
    "refusal": _refusal,
}


def _generated(match: re.Match[str], where: str) -> str:
    name, args = match.group(1), match.group(2).split()
    if name not in GENERATORS:
        raise ValueError(f"{where}: unknown marker podkit:{name}; known: {', '.join(sorted(GENERATORS))}")
    return GENERATORS[name](*args)


def expand(markdown: str, where: str) -> str:
    """``markdown`` with every marker (and the text a block marker holds) replaced by its generated
    text; an unknown marker is an error naming the page and the markers there are."""
    held = BLOCK.sub(lambda match: _generated(match, where), markdown)
    return MARKER.sub(lambda match: _generated(match, where), held)


def fill(markdown: str, where: str) -> str:
    """``markdown`` with the text each block marker holds generated again (the markers kept)."""

    def one(match: re.Match[str]) -> str:
        opening = f"<!-- podkit:{match.group(1)}{match.group(2)} -->"
        return f"{opening}\n{_generated(match, where)}<!-- /podkit:{match.group(1)} -->\n"

    return BLOCK.sub(one, markdown)


def write(docs: Path | None = None) -> list[str]:
    """Write the generated text into each page of :data:`HELD`; the pages that changed."""
    docs = docs or Path(__file__).resolve().parent
    changed = []
    for name in HELD:
        path = docs / name
        text = path.read_text()
        filled = fill(text, name)
        if filled != text:
            path.write_text(filled)
            changed.append(name)
    return changed


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' signature)
    return expand(markdown, page.file.src_uri)


def on_config(config):
    """The project root on sys.path, so the generators import this checkout's podkit."""
    import sys

    root = str(Path(config["config_file_path"]).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


if __name__ == "__main__":  # python docs/hooks.py --write
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python docs/hooks.py --write")
    print("\n".join(f"wrote docs/{name}" for name in write()) or "docs are up to date")
