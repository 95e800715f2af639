"""What every agent's renderer returns (a :class:`Setup`) and the pieces they share.

A renderer turns one host's :class:`~podkit.client.connect.ClientSettings` into the files the
agent reads, the environment it needs (each value a shell word: the key only as
``"$(cat KEYFILE)"`` or a reference to ``$PODKIT_API_KEY``), the flags it needs and a
non-interactive example run. Files are written with JSON-, TOML- or YAML-safe quoting, so a
model name or URL holding quotes or newlines stays one value.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from podkit.client.connect import ClientSettings, ConnectError, comment_text, output_limit, warnings

#: What the agents' files call the key: exported once, referenced everywhere else.
KEY_VAR = "PODKIT_API_KEY"
#: A reference to the key for an agent that reads another variable (a shell word).
KEY_REF = f'"${KEY_VAR}"'
#: The placeholder of the prompt in a ``run`` example.
PROMPT = "PROMPT"


@dataclass(frozen=True)
class File:
    """One file the agent reads: ``path`` with ``~`` for the user's home, or relative to the
    project folder the agent runs in."""

    path: str
    content: str


@dataclass(frozen=True)
class Setup:
    """What one agent needs for one host. ``env`` values are shell words (``sh`` evaluates them);
    none is the key itself."""

    host: str
    agent: str
    files: tuple[File, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    run: str = ""
    notes: tuple[str, ...] = ()
    #: what may stop the agent working with this host, one line each (stderr, and the JSON's notes)
    warnings: tuple[str, ...] = ()
    #: commands to run once, after the exports and before ``run`` (an agent that keeps its
    #: settings only where its own command writes them)
    once: tuple[str, ...] = ()
    #: what stdout shows when neither a file nor the exports are picked; "" is the first file, else
    #: the exports (:meth:`script`)
    text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "agent": self.agent,
            "files": [{"path": f.path, "content": f.content} for f in self.files],
            "env": self.standalone_env(),
            "args": list(self.args),
            "run": self.run,
            "notes": list(self.notes) + list(self.warnings),
            "once": list(self.once),
        }

    def standalone_env(self) -> dict[str, str]:
        """The environment with every reference to the key (``"$PODKIT_API_KEY"``) replaced by
        what the key variable itself holds (``"$(cat KEYFILE)"``), so each value stands alone: a
        JSON object has no order (podkit's JSON sorts its keys), and a reader that exports the
        variables in another order than :meth:`exports` still gets the key in each."""
        own = self.env.get(KEY_VAR)
        return {name: own if own and value == KEY_REF else value for name, value in self.env.items()}

    def exports(self) -> str:
        """The environment as ``export`` lines, in order (the key first, so later lines can use it)."""
        return "".join(f"export {name}={value}\n" for name, value in self.env.items())

    def script(self) -> str:
        """:meth:`exports` under a comment naming the agent and the host, for ``eval`` or ``source``;
        the flags the agent needs follow as a comment."""
        text = f"# {self.agent} for podkit host {one_line(self.host)}, from `podkit client --for {self.agent}`\n"
        text += self.exports()
        if self.args:
            text += f"# {self.agent} needs these flags: {one_line(' '.join(shlex.quote(arg) for arg in self.args))}\n"
        return text


@dataclass(frozen=True)
class Agent:
    """One agent ``--for`` knows. ``render`` builds its :class:`Setup` for a host; ``title`` and
    ``install`` name it for people (the docs are generated from these)."""

    name: str
    title: str
    install: str
    summary: str
    render: Callable[[ClientSettings], Setup]
    needs_context: bool = True
    #: one file for every selected host (llm's list of models): renders them all at once
    render_all: Callable[[list[ClientSettings]], Setup] | None = None
    short: str = ""
    #: what ``--show-key`` changes, where the agent takes the key itself (else a note says it does not)
    with_key: Callable[[ClientSettings, Setup, str], Setup] | None = None
    #: it does not read ``OPENAI_BASE_URL``: ``--for env`` alone would aim the key at its vendor
    ignores_base_url: bool = False

    @property
    def multi_host(self) -> bool:
        return self.render_all is not None

    @property
    def called(self) -> str:
        """What a message calls it ("Hermes", "Codex")."""
        return self.short or self.title


def unsafe_character(name: str) -> str | None:
    """The first character of ``name`` that no profile can hold as written (a control, a line or
    paragraph separator, a bidi or other format character, an unassigned code point), named."""
    for ch in name:
        if not ch.isprintable():
            label = unicodedata.name(ch, "") or {"\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN"}.get(ch, "")
            return f"U+{ord(ch):04X}" + (f" {label}" if label else "")
    return None


def check_name(cs: ClientSettings) -> None:
    """Refuse a served model name that an agent's file or a terminal would change or hide."""
    found = unsafe_character(cs.model) if cs.model else "nothing (the name is empty)"
    if found:
        raise ConnectError(
            f"{cs.host}: the served model name {ascii(cs.model)} holds {found}, which no agent's profile can "
            "hold as written: set vllm_served_model_name to a name of printable characters and re-apply"
        )


def setup_for(chosen: Agent, cs: ClientSettings) -> Setup:
    """``chosen``'s setup for ``cs``, its name checked, the host's warnings first."""
    check_name(cs)
    setup = chosen.render(cs)
    return replace(setup, warnings=tuple(warnings(cs)) + setup.warnings)


def key_env(cs: ClientSettings) -> dict[str, str]:
    """``PODKIT_API_KEY``, read from the controller's key file when the shell evaluates it."""
    return {KEY_VAR: f'"$(cat {shlex.quote(cs.key_file)})"'}


def openai_env(cs: ClientSettings, ca_var: str = "SSL_CERT_FILE") -> dict[str, str]:
    """The key, then the variables an OpenAI-compatible client reads, then ``ca_var`` naming the
    pinned CA certificate when the edge serves TLS from its own CA."""
    env = {**key_env(cs), "OPENAI_API_KEY": KEY_REF, "OPENAI_BASE_URL": shlex.quote(cs.base_url)}
    return env | ca_env(cs, ca_var)


def ca_env(cs: ClientSettings, var: str) -> dict[str, str]:
    return {var: shlex.quote(cs.ca_file)} if cs.ca_file else {}


def server_root(cs: ClientSettings) -> str:
    """The base URL without its ``/v1``: what a client that adds ``/v1/...`` itself takes."""
    return cs.base_url.removesuffix("/").removesuffix("/v1")


def limits(cs: ClientSettings, agent: str) -> tuple[int, int]:
    """The context and the output limit (see :func:`~podkit.client.connect.output_limit`) for
    ``agent``, which needs the context."""
    if cs.context_length is None:
        raise ConnectError(
            f"{cs.host}: the context length is unknown, and {agent} needs it: set vllm_max_model_len to a number"
        )
    context = int(cs.context_length)
    return context, output_limit(context)


def shell_word(word: str) -> str:
    """``word`` quoted for ``sh``; the ``PROMPT`` placeholder in double quotes, and a leading ``~/``
    left outside the quotes so the shell expands it."""
    if word == PROMPT:
        return '"PROMPT"'
    if word.startswith("~/") and len(word) > 2:
        return "~/" + shlex.quote(word[2:])
    return shlex.quote(word)


def command(*words: str) -> str:
    """A shell command line of ``words`` (see :func:`shell_word`)."""
    return " ".join(shell_word(word) for word in words)


def one_line(text: str) -> str:
    """``text`` as one line of a comment (see :func:`~podkit.client.connect.comment_text`)."""
    return comment_text(text)


def header(cs: ClientSettings, title: str, name: str) -> str:
    """A comment line naming the host and model (whitespace folded, so it stays one line)."""
    return f"# {title} on podkit host {one_line(cs.host)} ({one_line(cs.model)}), from `podkit client --for {name}`\n"


#: What :func:`podkit.text.clean` strips before text reaches a terminal (DEL, C1, the bidi
#: controls) and what YAML reads as a line break or refuses: escaped as ``\\uXXXX`` inside the
#: JSON, TOML and YAML strings here, so a file printed through ``clean`` keeps every value whole.
_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff\ufffe\uffff]")


def _escaped(text: str) -> str:
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def json_text(value: Any) -> str:
    """A JSON document: 2-space indent, non-ASCII kept but for the characters in :data:`_UNSAFE`."""
    return _escaped(json.dumps(value, indent=2, ensure_ascii=False)) + "\n"


def yaml_str(value: str) -> str:
    """A YAML scalar: a JSON string, which YAML reads as a double-quoted scalar (see :data:`_UNSAFE`)."""
    return _escaped(json.dumps(value, ensure_ascii=False))


def toml_str(value: str) -> str:
    """A TOML basic string: JSON's escapes, which TOML shares (see :data:`_UNSAFE`; DEL among them)."""
    return _escaped(json.dumps(value, ensure_ascii=False))


def where(path: str) -> str:
    """Where ``path`` goes, for people."""
    return path if path.startswith("~") else f"{path} (in the project folder)"


def guide(setup: Setup, shown: File | None) -> list[str]:
    """The comment lines that go to stderr beside ``shown`` (the file on stdout; None when the
    exports are): where it goes, the agent's other files, the variables, the commands to run once
    and the command to run."""
    lines = []
    if shown is not None:
        lines.append(f"# {setup.agent}: write this to {where(shown.path)}")
        for other in setup.files:
            if other is not shown:
                lines.append(
                    f"# {setup.agent} also reads {where(other.path)}: the same command with --file {other.path} prints it"
                )
        if setup.env:
            lines.append("# then, in the shell that runs it (or eval the same command with --exports):")
            lines += [f"#   export {name}={value}" for name, value in setup.env.items()]
    lines += [f"# once: {line}" for line in setup.once]
    if setup.run:
        lines.append(f"# run: {setup.run}")
    lines += [f"# note: {note}" for note in setup.notes]
    return lines
