"""What a host is like, read in one round trip.

:func:`probe_config` says what ``podctl probe`` reads (the command that runs it is
:func:`podkit.host.podctl.podctl_command`); :func:`parse_probe` turns its answer into a :class:`HostState`.
What the answer says of the host (its GPUs, installs, units, files, programs) is
:mod:`podkit.host.hoststate`. Everything here is pure: tests feed it recorded probe
output. What the deploy decides from it (can the host converge, which vLLM) is in
:mod:`podkit.host.preflight`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podkit.host.hoststate import Gpu, HostState, Unit, VllmInstall, parse_nvidia_smi
from podkit.host.podctl import PodctlError, read_answer
from podkit.host.programs import copies, edge_files, idle_files, managed_files, programs_for, supervision_files
from podkit.paths import EDGE_UNIT_NAME, IDLE_UNIT_NAME, UNIT_NAME
from podkit.settings import Settings


def listener_holder(where: dict[str, Any]) -> str:
    """Who holds a port, from podctl's ``listener``: ``pid 4242 (python3)``, or the user when the
    SSH user cannot see the process."""
    if where.get("pid"):
        return f"pid {where['pid']} ({where.get('program') or '?'})"
    return f"a process of user {where.get('user') or '?'} that the SSH user cannot see"


class ProbeError(RuntimeError):
    """The host could not be read; the message says what to install or fix."""


def server_config(settings: Settings, tls: bool = False) -> dict[str, Any]:
    """What every podctl action needs to find the server, the edge and what supervises them.
    ``tls``: the edge serves HTTPS (its loopback health check speaks TLS)."""
    paths = settings.paths
    return {
        "host": "127.0.0.1",
        "port": settings.port,
        "program": programs_for(settings)[0],  # what serves on port: vLLM, or on a router host the router
        # a router's /health fails while any replica is out; it serves while one is in (/readiness)
        **({"health_path": "/readiness"} if settings.role == "router" else {}),
        "edge": {"port": settings.edge_port, "tls": tls},
        "key_file": paths.api_key,
        "run_dir": paths.run,
        # the idle watcher's last reading: its proof that a pod can stop itself (``self_stop``) among it
        "idle_state": paths.idle_state,
        "accepted_launches": paths.accepted_launches,
        "supervisor": settings.supervisor,
        "unit": UNIT_NAME,
        "edge_unit": EDGE_UNIT_NAME,
        "idle_unit": IDLE_UNIT_NAME,
        "supervisord": {
            "conf": paths.supervisord_conf,
            "pidfile": paths.supervisord_pid,
            "socket": paths.supervisor_socket,
            "bin": f"{paths.venv}/bin/supervisord",
        },
        "ca_root": paths.ca_root,
        "legacy_runner": paths.legacy_runner_script,
        # what the programs run from: a process running one of these outside the supervisor is a stray
        "program_files": {
            "launch": paths.launch_script,
            "edge": paths.edge_script,
            "caddyfile": paths.caddyfile,
            "idle": paths.idle_script,
            "idle_config": paths.idle_config,
        },
        # each program's log: a program that is not running is named with its last line
        "program_logs": {
            programs_for(settings)[0]: paths.router_log if settings.role == "router" else paths.log_file,
            "edge": paths.edge_log,
            "idle": paths.idle_log,
        },
    }


def probe_config(
    settings: Settings,
    controller: dict[str, Any] | None = None,
    extra_files: Sequence[str] = (),
    extra_ports: Sequence[int] = (),
) -> dict[str, Any]:
    """What ``podctl probe`` reads. With ``controller`` (the deploy's host name, pid and user) the
    probe also takes the deploy lock on the volume for this run (see podctl's ``deploy_lock``).
    ``extra_files`` are summed too (a router host's copies of its replicas' CA certificates), and
    ``extra_ports`` say who listens on them (a router host's hops and metrics port)."""
    paths = settings.paths
    model = settings.model
    local = model.startswith("/")
    lock = (
        {"lock": {"path": paths.deploy_lock, "volume": settings.volume, "controller": controller}} if controller else {}
    )
    return {
        **lock,
        "hub_cache": paths.hub_cache,
        "record": paths.checkpoint_record,
        "model": model,
        **server_config(settings),
        "volume": paths.volume,
        "venv": paths.venv,
        # the token's sum decides its upload only; the unit's (volume copy and installed) its install
        "files": managed_files(settings)
        + edge_files(settings)[:2]
        + idle_files(settings)
        + [paths.plan_file, paths.hf_token]
        + supervision_files(settings)
        + (copies(settings) if settings.role == "server" else [])
        + list(extra_files),
        "dirs": sorted(paths.directories(router=settings.role == "router")),
        "model_dir": model if local else None,
        "measured": f"{paths.measure}/measured.json",
        **({"extra_ports": sorted(ports)} if (ports := probed_ports(settings, extra_ports)) else {}),
        # a cluster's node: how it reaches the head (the Instant Cluster variables stand in for data)
        **({"cluster": {"head": settings.cluster_head, "port": settings.cluster_port}} if settings.cluster else {}),
    }


def probed_ports(settings: Settings, extra_ports: Sequence[int] = ()) -> set[int]:
    """The ports whose listener the probe names: ``extra_ports`` (a router host's hops and metrics)
    and a cluster node's store port (``podkit_cluster_port``, which its head listens on)."""
    return set(extra_ports) | ({settings.cluster_port} if settings.cluster else set())


def parse_probe(output: str) -> HostState:
    try:
        data = read_answer("probe", output)
    except PodctlError as exc:
        raise ProbeError(str(exc)) from None
    gpu_raw = data["gpus"]
    gpu_error = None
    gpus: list[Gpu] = []
    if gpu_raw["nvidia_smi"]:
        if gpu_raw["rc"] == 0:
            gpus = parse_nvidia_smi(gpu_raw["lines"])
        else:
            gpu_error = " ".join(gpu_raw["lines"])[-300:] or f"exit status {gpu_raw['rc']}"
    vol = data["volume"]
    venv, system = data["vllm"]["venv"], data["vllm"]["system"]
    runner = data["supervisor"]
    return HostState(
        python=data["python"],
        venv_module=data["venv_module"],
        gpus=gpus,
        gpu_error=gpu_error,
        volume_exists=vol["exists"],
        volume_writable=vol["writable"],
        free_bytes=vol["free_bytes"],
        systemd=data["systemd"],
        venv=VllmInstall(
            "venv",
            venv["dists"],
            venv["vllm_bin"],
            venv["python_ok"],
            venv["vllm_bin"].rsplit("/", 1)[0] + "/python",
            others=venv.get("others") or {},
            tools=venv.get("tools") or {},
        ),
        system=VllmInstall("system", system["dists"], system["vllm_bin"], True, system["python"]),
        files=data["files"],
        dirs=data["dirs"],
        supervisor_pid=runner["pid"],
        vllm_pid=runner["vllm_pid"],
        serving=runner["serving"],
        crashes=runner["crashes"],
        programs=runner.get("programs") or {},
        edge_pid=runner.get("edge_pid"),
        edge_serving=runner.get("edge_serving") or {},
        edge=data.get("edge"),
        ca_root=data.get("ca_root"),
        legacy_runner=data.get("legacy_runner"),
        supervisord_left=runner.get("supervisord"),
        port_listening=data["port_listening"],
        ports_held={int(port): held for port, held in (data.get("ports_held") or {}).items()},
        endpoint=data["endpoint"],
        model_dir=data.get("model_dir"),
        checkpoint=data.get("checkpoint"),
        measured=data.get("measured"),
        accepted_launches=tuple(str(d) for d in data.get("accepted_launches") or ()),
        cache_problems=data.get("cache_problems") or [],
        fetch_running=bool(data.get("fetch_running")),
        hub_repos=data.get("hub_repos") or {},
        uid=data.get("uid"),
        user=data.get("user"),
        group=data.get("group"),
        tree_writable=vol.get("tree_writable"),
        unit=Unit(**data["unit"]) if data.get("unit") else None,
        edge_unit=Unit(**data["edge_unit"]) if data.get("edge_unit") else None,
        idle_unit=Unit(**data["idle_unit"]) if data.get("idle_unit") else None,
        sudo=data.get("sudo") or {},
        modes=data.get("modes") or {},
        orphans=data.get("orphans") or [],
        lock=data.get("lock"),
        cluster=data.get("cluster"),
        self_stop=data.get("self_stop") if isinstance(data.get("self_stop"), dict) else None,
        raw=data,
    )
