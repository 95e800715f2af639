"""What ``podkit client --for AGENT`` prints, built whole here: the CLI only writes it out.

:func:`setup_for` is an agent's :class:`~.base.Setup` for one host, checked first (a served model
name no agent's file can hold safely is refused, never changed) and with the host's own warnings
added (a pinned CA not there yet, the way in's note). :func:`printout` is what goes to stdout (the
agent's file, its exports, or the text it shows instead) and, one line each, to stderr: why a
context is unknown, the warnings, where the file goes, the variables, the commands to run once and
the command to run, the notes. :func:`rows` is the same as JSON rows, one per host.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from podkit.client.connect import ClientSettings, ConnectError, warnings
from podkit.text import clean

from . import AGENTS, agent
from .base import Agent, File, Setup, check_name, guide, setup_for


class PartError(ConnectError):
    """``--file`` names no file of the agent: bad input."""


@dataclass(frozen=True)
class Printout:
    """+ stdout: the text to redirect into place (already safe on a terminal); + stderr: lines."""

    stdout: str
    stderr: tuple[str, ...]


def summary_warnings(cs: ClientSettings) -> list[str]:
    """Every warning any agent would be given for ``cs`` (the summary's): the host's own, then each
    agent's, once each; an agent that cannot be rendered for it says so when it is asked for."""
    found = list(warnings(cs))
    for each in AGENTS.values():
        try:
            found += [line for line in each.render(cs).warnings if line not in found]
        except ConnectError:
            continue
    return found


def _context_problem(chosen: Agent, problems: list[str]) -> None:
    if chosen.needs_context and problems:
        raise ConnectError(f"{problems[0]}; {chosen.called} needs it: set vllm_max_model_len to a number")


def rows(name: str, hosts: list[tuple[ClientSettings, str | None]]) -> list[dict]:
    """``name``'s setup for each host as a JSON row (the warnings among the notes)."""
    chosen = agent(name)
    _context_problem(chosen, [problem for _, problem in hosts if problem])
    return [setup_for(chosen, cs).as_dict() for cs, _ in hosts]


def _whole(chosen: Agent, settings: list[ClientSettings]) -> Setup:
    if chosen.render_all is None:
        if len(settings) != 1:
            names = ", ".join(cs.host for cs in settings)
            raise ConnectError(
                f"--for {chosen.name} writes one host's settings but {len(settings)} are selected ({names}): "
                "pick one with --host"
            )
        return setup_for(chosen, settings[0])
    for cs in settings:
        check_name(cs)
    found: list[str] = []
    for cs in settings:
        found += [line for line in warnings(cs) if line not in found]
    whole = chosen.render_all(settings)
    cas = sorted({cs.ca_file for cs in settings if cs.ca_file})
    notes = whole.notes
    if len(cas) > 1:
        notes += (
            "SSL_CERT_FILE names one file: put the CA certificates in one (cat "
            + " ".join(shlex.quote(ca) for ca in cas)
            + " > podkit-cas.crt) and point it there",
        )
    return replace(whole, warnings=tuple(found) + whole.warnings, notes=notes)


def _pick(setup: Setup, file_path: str | None, exports: bool) -> File | None:
    """The file that goes to stdout (``file_path``, else the first), or None for the exports."""
    if exports or not setup.files:
        return None
    if file_path is None:
        return setup.files[0]
    for file in setup.files:
        if file.path == file_path:
            return file
    raise PartError(
        f"--file {file_path}: {setup.agent} reads "
        + (", ".join(f.path for f in setup.files) or "no file (leave out --file)")
    )


def printout(
    name: str,
    hosts: list[tuple[ClientSettings, str | None]],
    file_path: str | None = None,
    exports: bool = False,
    key: str | None = None,
) -> Printout:
    """What ``--for name`` prints for ``hosts`` (each with why its context is unknown, else None):
    the file ``file_path`` (else the agent's first, or the text it shows instead), or with
    ``exports`` its variables; with ``key`` (``--show-key``) the key itself where the agent takes it."""
    chosen = agent(name)
    problems = [problem for _, problem in hosts if problem]
    _context_problem(chosen, problems)
    setup = _whole(chosen, [cs for cs, _ in hosts])
    extra: list[str] = []
    if key is not None and chosen.with_key is not None:
        setup = chosen.with_key(hosts[0][0], setup, key)
    elif key is not None:
        extra.append("--show-key leaves the key out of it: export PODKIT_API_KEY before you start the agent")
    shown = _pick(setup, file_path, exports)
    if setup.text and file_path is None and not exports:
        stdout = setup.text
    else:
        stdout = setup.script() if shown is None else shown.content
    stderr = problems + list(setup.warnings) + guide(setup, shown) + extra
    return Printout(clean(stdout, lines=True), tuple(clean(line) for line in stderr))
