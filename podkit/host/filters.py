"""The filters every value a template receives goes through, one for each place a value lands, so
no datum can add a command or a unit line (settings refuse control characters first; these hold
even for a value that got past them).

- ``q``: a shell word (``shlex.quote``);
- ``env_name``: a shell variable name, refused unless it is one;
- ``comment``: text in a ``#`` comment, with control characters (line breaks)
  made spaces;
- ``systemd``: one word of a unit's command line, double-quoted, with ``%``,
  ``$``, ``\\``, ``"`` and control characters escaped;
- ``unit_text``: free text in a unit field (``Description=``): ``%`` escaped,
  control characters made spaces, no backslash to continue the line;
- ``unit_value``: a unit field with no escapes of its own (``User=``,
  ``StandardOutput=append:PATH``): ``%`` escaped, and a value that cannot be
  written on one line refused;
- ``supervisor_value``: a supervisord.conf value: ``%`` escaped (supervisord
  expands ``%(name)s``), one line, no leading or trailing space (stripped there);
- ``supervisor_command``: a ``command=`` line, each word quoted as supervisord
  splits it (``shlex``), ``%`` escaped;
- ``caddy_text``: a name inside a Caddyfile string: letters, digits and ``_.-``;
- ``caddy_path``: a file path in a Caddyfile, refused unless it is one plain token.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jinja2

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # line breaks, tabs, escapes: what settings refuse
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def environment(templates: Path) -> jinja2.Environment:
    """The templates in ``templates``, each filter under the name the templates use."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["env_name"] = env_name
    env.filters["comment"] = comment_text
    env.filters["systemd"] = systemd_quote
    env.filters["unit_text"] = unit_text
    env.filters["unit_value"] = unit_value
    env.filters["supervisor_value"] = supervisor_value
    env.filters["supervisor_command"] = supervisor_command
    env.filters["caddy_text"] = caddy_text
    env.filters["caddy_path"] = caddy_path
    return env


def caddy_path(value: str) -> str:
    """A file path in a Caddyfile (a replica's pinned CA): refused unless it is one token of
    letters, digits and ``_./-``, which Caddy reads as it is."""
    if not re.fullmatch(r"/[A-Za-z0-9_./-]+", str(value)):
        raise ValueError(f"{str(value)!r} cannot be written in a Caddyfile: use a volume path of letters, digits, _./-")
    return str(value)


def caddy_text(value: str) -> str:
    """A name inside a Caddyfile string (a host name in an error message): letters, digits and
    ``_.-`` only, the rest made ``-``, so it can neither end the string nor be a ``{placeholder}``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", str(value)) or "-"


def env_name(value: str) -> str:
    """A variable name for ``export NAME=...``: it cannot be quoted, so anything else is refused."""
    if not _ENV_NAME.fullmatch(str(value)):
        raise ValueError(f"{str(value)!r} is not a shell variable name: use letters, digits and _")
    return str(value)


def comment_text(value: str) -> str:
    """Text for a ``#`` comment (shell or unit): one line, control characters made spaces."""
    return _CONTROL.sub(" ", str(value))


def systemd_quote(value: str, program: bool = False) -> str:
    """One word of a systemd command line (``ExecStart=``): double-quoted, with systemd's own
    expansions escaped (``%`` specifiers everywhere, ``$`` variables in the arguments only:
    systemd does not expand them in the program's path), and control characters written as
    C escapes (``\\x0a``, which systemd turns back into the character), so it reaches the
    program unchanged and stays on its line."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    text = text if program else text.replace("$", "$$")
    return '"' + _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text) + '"'


def unit_text(value: str) -> str:
    """Free text for a unit field such as ``Description=``: ``%`` escaped, control characters
    made spaces, and no trailing backslash (which would join the next line to this one)."""
    return comment_text(value).replace("%", "%%").rstrip("\\")


def unit_value(value: str) -> str:
    """A unit field value with no escapes of its own (``User=``, ``Group=``, ``append:PATH``):
    ``%`` escaped; a control character or a trailing backslash cannot be written on the line
    and is refused (settings and the host's ``id`` never give one)."""
    text = str(value)
    if _CONTROL.search(text) or text.endswith("\\"):
        raise ValueError(f"{text!r} cannot be written in a systemd unit: it holds a line break or ends in \\")
    return text.replace("%", "%%")


def supervisor_value(value: str) -> str:
    """A supervisord.conf value: ``%`` escaped; refused when it cannot stand on one line as it is."""
    text = str(value)
    if _CONTROL.search(text) or text != text.strip() or " ;" in text or " #" in text:
        raise ValueError(
            f"{text!r} cannot be written in supervisord.conf: a line break, surrounding space, ' ;' or ' #'"
        )
    return text.replace("%", "%%")


def supervisor_command(argv: list[str] | str) -> str:
    """A supervisord ``command=``: each word shell-quoted (supervisord splits it with shlex), ``%`` escaped."""
    words = [argv] if isinstance(argv, str) else list(argv)
    return supervisor_value(" ".join(shlex.quote(str(word)) for word in words))
