"""Converge a host into a serving, verified vLLM endpoint.

    pyinfra -y inventories/sandbox.py deploy.py      # the local sandbox pod
    pyinfra -y inventories/mine.py deploy.py         # your own hosts (an inventory you write)

Reads top to bottom in the order a host converges: read the host (one remote
command), plan and preflight, the volume, vLLM (with Caddy and supervisord),
checkpoint, the installed vLLM's check of the new launch (only when a restart is
due) with a copy of the files a working server runs, caches, key, launch script,
the edge, what supervises them (supervisord, or systemd units), readiness (which
puts the copied files back when the new start fails). On a converged host every
operation reports "No changes" and the run costs one remote command.

A node of a cluster (``podkit_cluster``: one model across several hosts) also reads
the other nodes' probes (each host is still probed once), stops with them when they
disagree or any of them is refused, and starts its rank in the same step as theirs; a follower runs vLLM
headless, without the edge. A router host (``podkit_role = "router"``) converges
after every server of the run.

Everything runs as the SSH user. A non-root user needs sudo for two things only:
making the volume root theirs when it is missing or root's, and, with
``podkit_supervisor = "systemd"``, installing the units and running systemctl.
"""

import os

from pyinfra import host, inventory, state
from pyinfra.api.exceptions import DeployError, NoGroupError

from operations import checkpoint, facts, interrupt, preflight, rollback, router, supervisor, vllm, volume
from podkit import project_path
from podkit.host.cluster import Member, cluster_of
from podkit.host.edge import edge_problems
from podkit.host.hostplan import plan_host
from podkit.host.hoststate import Unit
from podkit.host.launchcheck import check_command, serve_arguments
from podkit.host.measure import deploy_step
from podkit.host.preflight import host_problems
from podkit.host.probe import server_config
from podkit.host.profile import device_of, wait_profile
from podkit.host.programs import ROUTER_PROGRAMS, edge_files, idle_files, managed_files, programs_for
from podkit.host.render import host_files, idle_config_problems, reuse_key, router_files, serve_argv, server_env
from podkit.host.rollback import restorable as rollback_due
from podkit.host.rollback import restore_config, to_keep
from podkit.host.router import port_problems, replicas_of, router_ports, router_problems, self_problems
from podkit.host.startup import plan_record
from podkit.keys import ApiKeyError, ensure_key, file_content, key_digest, read_hf_token
from podkit.paths import EDGE_UNIT_NAME, EDGE_UNIT_PATH, IDLE_UNIT_NAME, IDLE_UNIT_PATH, UNIT_NAME, UNIT_PATH
from podkit.plan.checkpoints import from_hub
from podkit.remote.idle.clock import follow_grace
from podkit.settings import Settings, SettingsError
from podkit.wayin import pin_ca, record_role, way_in

try:  # all of the host's data, so a misspelt podkit_/vllm_ key is refused, not ignored
    settings = Settings.from_mapping(host.data.dict())
except SettingsError as bad:  # before any remote command: say which datum and how to fix it
    raise DeployError(f"{host.name}: {bad}") from None
paths = settings.paths
way = way_in(host.name, host.data.dict(), settings.edge_port)  # how clients come in: TLS or not
try:  # the controller's key and HF token, before any remote command: a bad file or variable is one line
    key = ensure_key(project_path(settings.api_key_file))
    hf_token = read_hf_token(project_path(settings.hf_token_file))
except ApiKeyError as bad:
    raise DeployError(f"{host.name}: {bad}") from None


# What both kinds of host do the same way. `pod` (the probe's snapshot) and `files` (the rendered
# files) are set by the branch below before any of these runs.
def the_volume(router: bool = False) -> None:
    """The volume root (made the SSH user's with sudo if it is missing or root's) and its folders."""
    volume.root(
        name=f"Ensure {settings.volume} exists and {pod.user or 'the SSH user'} can write it",
        path=settings.volume,
        user=pod.user or "root",
        group=pod.group or "root",
        writable=pod.volume_writable,
    )
    volume.directories(
        name=f"Ensure podkit's folders exist on {settings.volume}, each with its mode and owner",
        paths=paths.directories(router=router),
        present=pod.dirs,
        modes=pod.modes,
        owner=pod.owner,
    )


def the_secret(what: str, path: str, value: str) -> None:
    """A secret whose source is the controller's file (read above): the host gets a 0600 copy."""
    volume.secret(
        name=f"Ensure the host's {what} matches the controller's, mode 0600",
        path=path,
        what=what,
        content=file_content(value),
        current_sha256=pod.files.get(path),
        sha256=key_digest(value),
        current=pod.modes.get(path),
        owner=pod.owner,
    )


def managed(name, role):
    rendered = files[role]
    return volume.file(
        name=name,
        path=rendered.path,
        content=rendered.content,
        mode=rendered.mode,
        current_sha256=pod.files.get(rendered.path),
        sha256=rendered.sha256,
        current=pod.modes.get(rendered.path),
        owner=pod.owner,
    )


def the_cluster(me: Member):
    """This host's cluster: every node of it in the inventory, each read once (``me``: this host,
    as its own turn read it), side by side. Nodes this run cannot reach stop the whole cluster."""
    members, problems = [], []
    for other in inventory:
        data = other.data.dict()
        if data.get("podkit_cluster") != settings.cluster:
            continue
        if other.name == me.name:
            members.append(me)
            continue
        if other not in state.active_hosts:
            problems.append(
                f"cluster {settings.cluster}: {other.name} is not in this run (it could not be reached, or --limit "
                "left it out): a cluster converges as a whole; reach every node"
            )
            continue
        try:
            theirs = Settings.from_mapping(data)
        except SettingsError:
            problems.append(f"cluster {settings.cluster}: {other.name}'s data is refused (see its own line); fix it")
            continue
        members.append(Member(other.name, theirs, facts.pod_state(theirs, on=other)))
    found = cluster_of(host.name, members)
    found.problems[:0] = problems
    return found


def as_a_whole(cluster, what: str, step: str) -> None:
    """A cluster converges as a whole or not at all: every node stops here when one was refused at ``step``
    (pyinfra runs an operation on every host before the next, so each node has had its turn)."""
    preflight.together(
        name=f"Ensure every node of {cluster.name} {what}",
        cluster=cluster.name,
        members=[m.name for m in cluster.members],
        step=step,
    )


def changed(paths_read: list[str]) -> bool:
    """Whether any of these files differs from what is on the host (a restart is due)."""
    sums = {f.path: f.sha256 for f in files.values()} | {paths.api_key: key_digest(key)}
    return any(pod.files.get(path) != sums[path] for path in paths_read)


# A server host (every host but a router) converges 1-10; a router host converges 11-14 below. The
# router comes last in this file so that its operations run after every replica's (pyinfra runs
# operations in the order of their lines): in a fleet's first apply, each replica's edge CA is
# pinned on the controller by its readiness step before the router host needs it.
if settings.role == "server":
    # 1. Read the host (GPUs, volume, installed vLLM, managed files and their modes, supervisor, server,
    #    edge, orphaned engines) and take its deploy lock, in one command. Ctrl-C exits non-zero, saying what is left.
    interrupt.exit_nonzero_on_interrupt()
    pod = facts.pod_state(settings)
    me = Member(host.name, settings, pod)
    # A node of a cluster reads every other node too (once each), before anything changes anywhere.
    cluster = the_cluster(me) if settings.cluster else None
    follower = cluster is not None and not cluster.is_head
    # The controller keeps each node's rank (RunPod's NODE_RANK is only on the pod): clients skip followers.
    if not (cluster and cluster.problems):  # a cluster refused this run keeps the rank it last had
        record_role(host.name, *((cluster.name, cluster.rank) if cluster else (None, None)))
    package, found = me.vllm  # chosen once: the install, the plan and the cluster's checks read it

    # Plan before spending: checkpoint (FP8 if it helps), context, TP (and PP across a cluster's nodes),
    # parsers, disk.
    launch = plan_host(
        settings,
        pod,
        vllm_version=package.version,
        nodes=cluster.nnodes if cluster else 1,
        prefer_fp8=settings.prefer_fp8,
        resolve=lambda m: from_hub(m, token=hf_token),
    )
    served = f"{launch.fetch.repo}@{launch.fetch.revision[:12]}" if launch.fetch else launch.model
    preflight.checks(
        name="Ensure the model, its context and its download fit this host before anything is installed",
        problems=pod.lock_problems()
        + host_problems(settings, pod, needs_install=found is None)
        + edge_problems(way)
        + idle_config_problems(settings, host.name, host.data.get("runpod_pod_id"))
        + launch.problems
        + (cluster.problems if cluster else []),
        summary="; ".join(filter(None, [launch.summary(), cluster and cluster.summary(), pod.lock_note()])),
    )

    # A cluster converges as a whole or not at all: a node refused above stops every node here.
    if cluster:
        as_a_whole(cluster, "passed its preflight before any node changes", "their preflight")

    # 2. The volume (made the SSH user's with sudo if it is missing or root's), its folders, and vLLM
    #    (the system's if it matches, else a venv on the volume) with Caddy and supervisord in the venv.
    the_volume()
    tools = [settings.edge_package, settings.supervisor_package]
    installed = vllm.venv(
        name=f"Ensure {package} is installed ({paths.venv} unless the system has it), with Caddy and supervisord "
        "in the venv and no package that breaks it",
        package=package,
        paths=paths,
        found=found,
        venv_python_ok=pod.venv.python_ok,
        tools=tools,
        missing_tools=pod.venv.missing_tools(tools),
    )
    vllm_bin, python = (
        (found.vllm_bin, found.python) if found else (f"{paths.venv}/bin/vllm", f"{paths.venv}/bin/python")
    )
    device = device_of(pod.gpus)
    files = host_files(
        settings,
        package=package,
        vllm_bin=vllm_bin,
        launch=launch,
        way=way,
        user=pod.user,
        group=pod.group,
        host_name=host.name,
        pod_id=host.data.get("runpod_pod_id"),
        cluster=cluster,
        device=device,
    )
    # the KV cache size a ready start measured, for the next start on the same key (CPU build)
    profile = wait_profile(
        reuse_key(
            package, serve_argv(settings, vllm_bin, launch, cluster), server_env(settings, cluster), device, cluster
        ),
        paths.profile_record,
    )

    # 3. One API key: the controller's file is the source (read above); the host gets a 0600 copy.
    the_secret("API key", paths.api_key, key)

    # 3b. With podkit_plan_measure: vLLM itself starts once with these flags and random weights
    #     (config and tokenizer only) before the first download of a new checkpoint.
    measure_step = deploy_step(settings, launch, pod, vllm_bin)
    if settings.plan_measure:
        preflight.measured(
            name="Ensure vLLM starts with these flags on this host (measured with random weights) before the download",
            step=measure_step,
            python=python,
            endpoint=os.environ.get("HF_ENDPOINT"),
            record=plan_record(settings, launch),
        )

    # 4. The checkpoint: a clean hub cache, then the planned snapshot in it (fetched on the host).
    if hf_token:
        the_secret("Hugging Face token", paths.hf_token, hf_token)
    checkpoint.cache_clean(
        name="Ensure the hub cache holds no partial downloads, stale locks or broken links",
        paths=paths,
        problems=pod.cache_problems,
        fetch_running=pod.fetch_running,
    )
    if launch.fetch:
        checkpoint.fetched(
            name=f"Ensure {launch.fetch.repo}@{launch.fetch.revision[:12]} is complete on the volume",
            spec=launch.fetch,
            paths=paths,
            python=python,
            endpoint=os.environ.get("HF_ENDPOINT"),
            deadline=settings.fetch_timeout,
            complete=launch.fetched,
            running=pod.fetch_running,
            note=(pod.checkpoint or {}).get("ignored"),
        )

    # 5. Before vLLM restarts (its files changed, or it does not run them), the installed vLLM reads the
    #    new launch (its own parser and config validation), and a working server's files are kept, to put
    #    back if the new start fails. Nothing the server reads has changed yet; a converged host pays nothing.
    programs = programs_for(settings, follower=follower)
    strays = pod.stray_programs(programs)  # a copy outside the supervisor: stopped below, so this one restarts
    restart_vllm = (
        "vllm" in strays
        or changed(managed_files(settings))
        or installed.will_change
        or not pod.serving_current_files()
        or bool(cluster and cluster.peers_due())
    )
    serve = serve_arguments(serve_argv(settings, vllm_bin, launch, cluster))
    preflight.launch(
        name=f"Ensure the installed vLLM accepts the new launch of {served} before the server restarts",
        command=check_command(python, serve, server_env(settings, cluster), settings.generation_config),
        due=restart_vllm,
        settings=settings,
        argv=serve,
        package=str(package),
    )
    if cluster:
        as_a_whole(
            cluster, "has its launch accepted by its vLLM before any node restarts", "vLLM's check of their launch"
        )
    restorable = rollback_due(
        settings, pod, restart_due=restart_vllm, reinstall=installed.will_change, cluster=bool(cluster)
    )
    rollback.kept(
        name="Ensure the files that serve now are kept beside them, to put back if the new start fails",
        paths=to_keep(settings, pod),
        restorable=restorable,
    )

    # 6. Every cache on the volume, through one env file the launch script sources.
    managed("Ensure the env file puts every cache on the volume", "env")

    # 6. The launch script, 7. the edge (Caddy: only /v1 with the key, /health; TLS when clients come
    #    in directly), 8. the idle watcher, and 9. what keeps them running: supervisord, or systemd units.
    #    A cluster's follower runs vLLM headless for the head: no API, so no edge; its idle watcher follows the head.
    if follower:
        managed(
            f"Ensure the launch script runs rank {cluster.rank} of {cluster.name} headless for the head at "
            f"{cluster.head}, serving {served}",
            "launch",
        )
    else:
        managed(f"Ensure the launch script serves {served} as {settings.served_model_name} on 127.0.0.1 only", "launch")
        managed("Ensure the edge script runs Caddy with the key from its file", "edge")
        managed(
            f"Ensure the Caddyfile lets only /v1 with the key and /health through port {settings.edge_port}"
            + (f" (TLS: {way.tls})" if way.tls != "off" else ""),
            "caddyfile",
        )
    # 8. The idle watcher: after podkit_idle_stop_minutes without a request it stops the pod (RunPod)
    #    or the server (bare metal); at 0 it only keeps the idle time for podkit status. A follower's
    #    stops its own once the head has not answered for that long (a minute at most: idle.follow_grace).
    idle_what = "the pod" if host.data.get("runpod_pod_id") else "the server"
    managed("Ensure the idle watcher's program is current", "idle_script")
    if not settings.idle_stop_minutes:
        idle_name = "Ensure the idle watcher keeps the idle time and stops nothing (podkit_idle_stop_minutes = 0)"
    elif follower:
        grace = follow_grace(settings.idle_stop_minutes * 60)
        idle_name = (
            f"Ensure the idle watcher stops {idle_what} {grace:g} s after the head at {cluster.head} stops answering"
        )
    else:
        idle_name = (
            f"Ensure the idle watcher stops {idle_what} after {settings.idle_stop_minutes:g} minute"
            + ("s" if settings.idle_stop_minutes != 1 else "")
            + " without a request"
        )
    managed(idle_name, "idle_config")
    managed("Ensure the volume records what the plan predicts, for podkit status to check against vLLM's log", "plan")

    # Restart what reads changed files (content: a mode put back changes nothing), or runs older files
    # (vLLM's, above); a cluster's node also when another node restarts (its ranks start together).
    restart_edge = not follower and (
        "edge" in strays or changed(edge_files(settings)) or installed.will_change or not pod.edge_current_files()
    )
    restart_idle = "idle" in strays or changed(idle_files(settings)) or installed.will_change
    supervisor.legacy_runner(
        name="Ensure no runner from an older podkit holds the port",
        runner_script=paths.legacy_runner_script,
        pid=pod.legacy_runner,
    )
    supervisor.orphans(
        name="Ensure no vLLM engine outlives its server and no program runs outside the supervisor "
        "(stopped before any start)",
        found=pod.orphans,
    )
    systemd = settings.supervisor == "systemd"
    units = {
        UNIT_NAME: ("unit", UNIT_PATH, restart_vllm, pod.unit or Unit(UNIT_NAME)),
        EDGE_UNIT_NAME: ("edge_unit", EDGE_UNIT_PATH, restart_edge, pod.edge_unit or Unit(EDGE_UNIT_NAME)),
        IDLE_UNIT_NAME: ("idle_unit", IDLE_UNIT_PATH, restart_idle, pod.idle_unit or Unit(IDLE_UNIT_NAME)),
    }
    if systemd:
        supervisor.supervisord_stopped(
            name="Ensure no supervisord runs (systemd supervises vLLM and the edge)",
            supervisorctl=f"{paths.venv}/bin/supervisorctl",
            conf=paths.supervisord_conf,
            pid=pod.supervisord_left,
        )
        for unit_name, (role, unit_path, restart, unit) in units.items():
            managed(f"Ensure the volume holds the current {unit_name}", role)
            installed_unit = supervisor.unit(
                name=f"Ensure systemd has the current {unit_name} (daemon-reload when it changed)",
                source=files[role].path,
                path=unit_path,
                current_sha256=pod.files.get(unit_path),
                sha256=files[role].sha256,
                as_root=pod.root,
            )
            supervisor.unit_service(
                name=f"Ensure {unit_name} is enabled and runs from the current files",
                unit=unit_name,
                enabled=unit.is_enabled,
                up=unit.up,
                restarted=restart or installed_unit.will_change,
                as_root=pod.root,
            )
        restarted = restart_vllm
    else:
        # one supervisor at a time: units left from podkit_supervisor = "systemd" let go of the ports first
        for unit_name, (_, _, _, unit) in units.items():
            if unit.present:
                supervisor.unit_service(
                    name=f"Ensure {unit_name} is stopped and disabled (supervisord supervises)",
                    unit=unit_name,
                    enabled=unit.is_enabled,
                    up=unit.up,
                    present=False,
                    as_root=pod.root,
                )
        what = "vLLM (headless)" if follower else "vLLM, the edge and the idle watcher"
        conf = managed(f"Ensure supervisord's config runs {what}", "supervisord")
        running = pod.supervisor_pid is not None
        # A cluster's nodes reach this operation together: each starts its rank at the same step.
        supervisor.programs(
            name=f"Ensure supervisord runs {what} from the current files",
            config={**server_config(settings), "supervisord_log": paths.supervisord_log},
            running=running,
            programs=pod.programs,
            reload=conf.will_change,
            restart=[
                name for name, due in (("vllm", restart_vllm), ("edge", restart_edge), ("idle", restart_idle)) if due
            ],
            names=programs,
        )
        restarted = restart_vllm or conf.will_change or not running

    # 10. Readiness: vLLM answers on loopback and lists the served model (with the key), and the edge
    #    answers /health; with TLS from Caddy's CA, its root certificate is pinned on the controller.
    #    A cluster's head answers only once every rank joined: its readiness is the cluster's.
    if way.tls == "internal" and pod.ca_root and not follower:
        pin_ca(host.name, pod.ca_root)
    if not follower:
        vllm.endpoint(
            name=f"Ensure vLLM answers and lists {settings.served_model_name} behind the edge on port "
            f"{settings.edge_port}" + (f" (every rank of {cluster.name} joined)" if cluster else ""),
            settings=settings,
            ready=pod.ready(settings.served_model_name)
            and pod.supervised(settings.supervisor)
            and not restarted
            and not restart_edge,
            pin=way.tls == "internal" and not pod.ca_root,
            profile=profile,
            # supervise starts the exit count again at a restart; a server left running keeps its own
            crashes_before=0 if restarted and not systemd else pod.crashes,
            restore=restore_config(settings, pod, tls=way.tls != "off") if restorable else None,
        )

else:
    interrupt.exit_nonzero_on_interrupt()
    # 11. A router host: read it (one remote command), and check its replicas agree, before anything
    #     is installed. Its replicas are the hosts of podkit_router_group, reached as clients reach them.
    try:
        members = [(member.name, member.data.dict()) for member in inventory.get_group(settings.router_group)]
    except NoGroupError:
        members = None
    replicas = replicas_of(settings, members or [])
    certificates = [r.ca for r in replicas if r.ca]
    ports = router_ports(settings, replicas)
    pod = facts.pod_state(settings, extra_files=[paths.replicas_file, *certificates], extra_ports=list(ports))
    tools = [settings.router_package, settings.edge_package, settings.supervisor_package]
    missing_tools = pod.venv.missing_tools(tools)
    try:
        files = router_files(settings, replicas=replicas, way=way, host_name=host.name)
        render_problems = []
    except ValueError as bad:
        files, render_problems = {}, [str(bad)]
    preflight.checks(
        name="Ensure the router's replicas are known and serve one model before anything is installed",
        problems=pod.lock_problems()
        + host_problems(settings, pod, needs_install=bool(missing_tools) or not pod.venv.python_ok)
        + router_problems(settings, settings.router_group, replicas, found=members is not None)
        + self_problems(host.name, way, settings.router_group, replicas)
        + port_problems(settings, ports, pod.ports_held)
        + edge_problems(way)
        + render_problems,
        summary=f"router ({settings.router_policy}) in front of {len(replicas)} replica"
        + ("s" if len(replicas) != 1 else "")
        + f" of {settings.router_group}: "
        + ", ".join(f"{r.name} ({r.way.base_url})" for r in replicas),
    )

# Every host: the point a router host waits for. pyinfra runs each host's operations in order and a
# shared operation once every host that has it got there, so a router converges after every server
# in this run is ready (a fleet's first apply pins each replica's edge CA on the controller first).
router.after_servers(
    name="Ensure every server in this run is ready before a router host converges",
    role=settings.role,
)

if settings.role == "router":
    # 12. The volume, its folders, and the router's tools in the venv: vllm-router, Caddy, supervisord.
    the_volume(router=True)
    installed = router.tools(
        name=f"Ensure {', '.join(map(str, tools))} are installed in {paths.venv}",
        paths=paths,
        tools=tools,
        missing=missing_tools,
        venv_python_ok=pod.venv.python_ok,
    )

    # 13. The key, the router's launch script, the edge (the front for clients, and one loopback hop
    #     per replica to its edge), each replica's pinned CA, and supervisord running both programs.
    the_secret("API key", paths.api_key, key)
    managed("Ensure the env file puts every cache on the volume", "env")
    managed(f"Ensure the volume lists the {len(replicas)} replicas, for verify and status", "replicas")
    managed(
        f"Ensure the launch script runs vLLM's router ({settings.router_policy}) in front of "
        f"{len(replicas)} replicas on 127.0.0.1 only",
        "launch",
    )
    managed("Ensure the edge script runs Caddy with the key from its file", "edge")
    managed(
        f"Ensure the Caddyfile lets only /v1 with the key and /health through port {settings.edge_port}, "
        "and carries the router's requests to each replica's edge",
        "caddyfile",
    )
    certified = router.replica_certificates(
        name="Ensure the router host trusts exactly each replica's pinned edge CA",
        replicas=replicas,
        current={path: pod.files.get(path) for path in certificates},
    )

    strays = pod.stray_programs(ROUTER_PROGRAMS)
    restart_router = (
        "router" in strays
        or changed(managed_files(settings))
        or installed.will_change
        or not pod.serving_current_files()
    )
    restart_edge = (
        "edge" in strays
        or changed(edge_files(settings))
        or installed.will_change
        or certified.will_change
        or not pod.edge_current_files()
    )
    supervisor.orphans(
        name="Ensure no program runs outside the supervisor (stopped before any start)", found=pod.orphans
    )
    conf = managed("Ensure supervisord's config runs the router and the edge", "supervisord")
    running = pod.supervisor_pid is not None
    supervisor.programs(
        name="Ensure supervisord runs the router and the edge from the current files",
        config={**server_config(settings), "supervisord_log": paths.supervisord_log},
        running=running,
        programs=pod.programs,
        reload=conf.will_change,
        restart=[name for name, due in (("router", restart_router), ("edge", restart_edge)) if due],
        names=ROUTER_PROGRAMS,
    )

    # 14. Readiness: the router answers on loopback and lists the model (asked of a replica, with the
    #     key), and the edge answers /health.
    if way.tls == "internal" and pod.ca_root:
        pin_ca(host.name, pod.ca_root)
    vllm.endpoint(
        name=f"Ensure the router answers and lists {settings.served_model_name} behind the edge on port "
        f"{settings.edge_port}",
        settings=settings,
        ready=pod.ready(settings.served_model_name)
        and pod.supervised(settings.supervisor, ROUTER_PROGRAMS)
        and not (restart_router or restart_edge or conf.will_change or not running),
        pin=way.tls == "internal" and not pod.ca_root,
    )
