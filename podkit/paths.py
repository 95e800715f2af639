"""Where podkit keeps everything on a host: every file and folder under ``<volume>/podkit``,
and the systemd units it installs when ``podkit_supervisor`` is ``systemd``.

``Settings.paths`` gives a host's (``Paths(settings.volume)``); what takes only the volume
(installing, fetching) takes a :class:`Paths`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

# The systemd units podkit installs when podkit_supervisor is "systemd" (one server per host).
UNIT_NAME = "podkit-vllm.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
EDGE_UNIT_NAME = "podkit-edge.service"
EDGE_UNIT_PATH = f"/etc/systemd/system/{EDGE_UNIT_NAME}"
IDLE_UNIT_NAME = "podkit-idle.service"
IDLE_UNIT_PATH = f"/etc/systemd/system/{IDLE_UNIT_NAME}"


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
    edge_script = property(lambda self: self._at("bin", "edge.sh"))
    caddyfile = property(lambda self: self._at("bin", "Caddyfile"))
    supervisord_conf = property(lambda self: self._at("bin", "supervisord.conf"))
    supervisord_pid = property(lambda self: self._at("run", "supervisord.pid"))
    supervisor_socket = property(lambda self: self._at("run", "supervisor.sock"))
    # Caddy's data (its internal CA's keys, its certificates): a secret folder of its own
    edge_data = property(lambda self: self._at("edge"))
    ca_root = property(lambda self: self._at("edge", "caddy", "pki", "authorities", "local", "root.crt"))
    edge_log = property(lambda self: self._at("logs", "edge.log"))
    # every request the edge answered: method, path, status, size and time (never a header, body or
    # key), rolled by Caddy itself (see templates/Caddyfile.j2)
    access_log = property(lambda self: self._at("logs", "access.log"))
    supervisord_log = property(lambda self: self._at("logs", "supervisord.log"))
    legacy_runner_script = property(
        lambda self: self._at("bin", "runner.sh")
    )  # podkit's own runner, before supervisord
    run = property(lambda self: self._at("run"))
    # a measured start's scratch folder (config and tokenizer only, its log, its last outcome)
    measure = property(lambda self: self._at("measure"))
    logs = property(lambda self: self._at("logs"))
    log_file = property(lambda self: self._at("logs", "vllm.log"))
    fetch_log = property(lambda self: self._at("logs", "fetch.log"))
    install_log = property(lambda self: self._at("logs", "install.log"))
    checkpoint_record = property(lambda self: self._at("run", "checkpoint.json"))
    deploy_lock = property(lambda self: self._at("run", "deploy.lock"))  # one deploy per host at a time
    hf_token = property(lambda self: self._at("secrets", "hf_token"))
    unit_copy = property(lambda self: self._at("bin", UNIT_NAME))  # installed to UNIT_PATH with sudo
    edge_unit_copy = property(lambda self: self._at("bin", EDGE_UNIT_NAME))
    # the idle watcher: its program and config, the state it leaves for podkit status, its log, and
    # the marker that says the server was stopped on purpose (the edge reads it; a start removes it)
    idle_script = property(lambda self: self._at("bin", "idle.py"))
    idle_config = property(lambda self: self._at("bin", "idle.json"))
    idle_state = property(lambda self: self._at("run", "idle.json"))
    idle_log = property(lambda self: self._at("logs", "idle.log"))
    stopped_marker = property(lambda self: self._at("run", "stopped.json"))
    idle_unit_copy = property(lambda self: self._at("bin", IDLE_UNIT_NAME))
    # sleep and wake on request (podkit/remote/idle/wake.py): the hook's socket, the marker of a wake
    # under way (the edge holds requests meanwhile), the last wake, and the answer a sleeping server
    # must give again when it wakes
    wake_socket = property(lambda self: self._at("run", "wake.sock"))
    waking_marker = property(lambda self: self._at("run", "waking.json"))
    wake_record = property(lambda self: self._at("run", "wake.json"))
    wake_proof = property(lambda self: self._at("run", "proof.json"))
    # what the deploy predicted for the server it started: podkit status puts it beside vLLM's log
    plan_file = property(lambda self: self._at("bin", "plan.json"))
    # the KV cache size a start measured, with its key (read by the launch script: podkit/host/start/profile.py),
    # and the last starts, each with its phases (podctl wait appends one when a start passes readiness)
    profile_record = property(lambda self: self._at("run", "profile"))
    starts_record = property(lambda self: self._at("run", "starts.jsonl"))
    # the launches the installed vLLM accepted (one digest a line, podkit/host/start/launchcheck.py): not checked again
    accepted_launches = property(lambda self: self._at("run", "launches.accepted"))
    # a router host: vLLM's router in vLLM's place, and each replica's edge CA certificate (public)
    router_script = property(lambda self: self._at("bin", "router.sh"))
    router_log = property(lambda self: self._at("logs", "router.log"))
    replicas_file = property(lambda self: self._at("bin", "replicas.json"))  # which loopback hop is which replica
    replicas_dir = property(lambda self: self._at("replicas"))

    def replica_ca(self, name: str) -> str:
        """Where a router host keeps replica ``name``'s edge CA root certificate."""
        return posixpath.join(self.replicas_dir, f"{name}.crt")

    @property
    def hub_cache(self) -> str:
        return self.cache_env()["HF_HUB_CACHE"]

    def repo_cache(self, repo: str) -> str:
        """The hub cache folder of one repo (``models--org--name``)."""
        return posixpath.join(self.hub_cache, "models--" + repo.replace("/", "--"))

    def cache_env(self) -> dict[str, str]:
        """Environment that puts every cache vLLM and its stack write on the volume: each variable
        the pinned builds read with a default under ``$HOME`` or ``/tmp`` (tests/fixtures/cache_vars,
        made by scripts/cache_vars.py), so a pod's stop, which wipes both, keeps every compiled kernel."""
        hf, at = posixpath.join(self.cache, "huggingface"), lambda *parts: posixpath.join(self.cache, *parts)
        return {
            "HF_HOME": hf,
            "HF_HUB_CACHE": posixpath.join(hf, "hub"),
            "HUGGINGFACE_HUB_CACHE": posixpath.join(hf, "hub"),
            "XDG_CACHE_HOME": at("xdg"),
            # vLLM's own (vllm/envs.py): torch.compile artefacts, its startup plan, assets, config
            "VLLM_CACHE_ROOT": at("vllm"),
            "VLLM_ASSETS_CACHE": at("vllm", "assets"),
            "VLLM_XLA_CACHE_PATH": at("vllm", "xla_cache"),
            "VLLM_CONFIG_ROOT": at("vllm-config"),
            "VLLM_RPC_BASE_PATH": self.tmp,
            # the JIT kernels of the stack under it; DeepGEMM's where vLLM would put it
            "DG_JIT_CACHE_DIR": at("vllm", "deep_gemm"),
            "FLASHINFER_WORKSPACE_BASE": at("flashinfer"),
            "TORCHINDUCTOR_CACHE_DIR": at("torchinductor"),
            "TRITON_CACHE_DIR": at("triton"),
            "TRITON_HOME": at("triton-home"),
            "TORCH_EXTENSIONS_DIR": at("torch_extensions"),
            "CUDA_CACHE_PATH": at("nv", "ComputeCache"),
            "CCACHE_DIR": at("ccache"),
            # kernel libraries vLLM bundles, each with a cache of its own under ~
            "MINFER_FMHA_CACHE_DIR": at("minfer"),
            "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": at("flash_attention_cute_dsl"),
            "FLYDSL_RUNTIME_CACHE_DIR": at("flydsl"),
            "OUTLINES_CACHE_DIR": at("outlines"),
            "PIP_CACHE_DIR": at("pip"),
            "TMPDIR": self.tmp,
        }

    def directories(self, router: bool = False) -> dict[str, str]:
        """Every folder the deploy creates, with its mode (a router host's: with its replicas' CAs')."""
        dirs = {self.root: "755", self.bin: "755", self.run: "755", self.logs: "755", self.tmp: "700"}
        if router:
            dirs[self.replicas_dir] = "755"
        dirs[self.secrets] = "700"
        dirs[self.edge_data] = "700"
        for path in sorted(set(self.cache_env().values()) - {self.tmp}):
            dirs[path] = "755"
        return dirs
