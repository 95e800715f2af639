"""A server host (every host but a router), in the order it converges: :meth:`Server.converge` is
the path, one step a line; each step is a method below, in the same order.

A node of a cluster (``podkit_cluster``: one model across several hosts) also reads the other
nodes' probes (each host is still probed once), stops with them when they disagree, and starts its
rank in the same step as theirs; a follower runs vLLM headless, without the edge.
"""

from __future__ import annotations

import os

from pyinfra import inventory, state

from operations import checkpoint, facts, preflight, rollback, supervisor, vllm
from podkit.host.cluster import Cluster, Member, cluster_of
from podkit.host.edge import edge_problems
from podkit.host.hostplan import plan_host
from podkit.host.hoststate import Unit
from podkit.host.idlefiles import idle_config_problems
from podkit.host.launchcheck import check_command, launch_digest, serve_arguments
from podkit.host.measure import deploy_step
from podkit.host.preflight import host_problems
from podkit.host.probe import server_config
from podkit.host.profile import device_of, wait_profile
from podkit.host.programs import edge_files, idle_files, managed_files, programs_for
from podkit.host.render import host_files, reuse_key, serve_argv, server_env
from podkit.host.rollback import restorable as rollback_due
from podkit.host.rollback import restore_config, to_keep
from podkit.host.startup import plan_record
from podkit.paths import EDGE_UNIT_NAME, EDGE_UNIT_PATH, IDLE_UNIT_NAME, IDLE_UNIT_PATH, UNIT_NAME, UNIT_PATH
from podkit.plan.checkpoints import from_hub
from podkit.remote.idle.clock import follow_grace
from podkit.settings import Settings, SettingsError
from podkit.wayin import pin_ca, record_role
from roles.turn import Turn


class Server(Turn):
    cluster: Cluster | None

    def converge(self) -> None:
        """The server's path. On a converged host every operation reports "No changes" and the run
        costs one remote command (the probe)."""
        self.read()  # 1. the host in one command (and its deploy lock); on a cluster, every node
        self.plan()  #    plan before spending, and refuse what cannot work before anything changes
        self.install()  # 2. the volume, its folders, vLLM with Caddy and supervisord; the files rendered
        self.key()  # 3. the API key
        self.measure()  # 3b. with podkit_plan_measure: vLLM starts once with random weights
        self.checkpoint()  # 4. a clean hub cache, the planned snapshot
        self.check_launch()  # 5. before a restart: the installed vLLM reads the new launch; the files kept
        self.scripts()  # 6-8. the env file, the launch script, the edge, the idle watcher
        self.supervise()  # 9. what keeps them running: supervisord, or systemd units
        self.readiness()  # 10. vLLM answers and lists the model behind the edge (else the kept files back)
        self.self_stop()  # 11. a pod that stops itself when idle has proven it can (its own key, RunPod's API)

    def read(self) -> None:
        """1. Read the host (GPUs, volume, installed vLLM, managed files and their modes, supervisor,
        server, edge, orphaned engines) and take its deploy lock, in one command. A node of a
        cluster reads every other node too (once each), before anything changes anywhere."""
        self.pod = facts.pod_state(self.settings)
        self.me = Member(self.name, self.settings, self.pod)
        self.cluster = self.the_cluster() if self.settings.cluster else None
        self.follower = self.cluster is not None and not self.cluster.is_head
        cluster = self.cluster
        # The controller keeps each node's rank (RunPod's NODE_RANK is only on the pod): clients skip followers.
        if not (cluster and cluster.problems):  # a cluster refused this run keeps the rank it last had
            record_role(self.name, *((cluster.name, cluster.rank) if cluster else (None, None)))
        self.package, self.found = self.me.vllm  # chosen once: the install, the plan and the cluster's checks

    def the_cluster(self) -> Cluster:
        """This host's cluster: every node of it in the inventory, each read once (this host as its
        own turn read it), side by side. Nodes this run cannot reach stop the whole cluster."""
        members, problems, name = [], [], self.settings.cluster
        for other in inventory:
            data = other.data.dict()
            if data.get("podkit_cluster") != name:
                continue
            if other.name == self.name:
                members.append(self.me)
                continue
            if other not in state.active_hosts:
                problems.append(
                    f"cluster {name}: {other.name} is not in this run (it could not be reached, or --limit "
                    "left it out): a cluster converges as a whole; reach every node"
                )
                continue
            try:
                theirs = Settings.from_mapping(data)
            except SettingsError:
                problems.append(f"cluster {name}: {other.name}'s data is refused (see its own line); fix it")
                continue
            members.append(Member(other.name, theirs, facts.pod_state(theirs, on=other)))
        found = cluster_of(self.name, members)
        found.problems[:0] = problems
        return found

    def plan(self) -> None:
        """Plan before spending: checkpoint (FP8 if it helps), context, TP (and PP across a cluster's
        nodes), parsers, disk; and refuse, each with its fix, what cannot work."""
        settings, pod, cluster = self.settings, self.pod, self.cluster
        self.launch = plan_host(
            settings,
            pod,
            vllm_version=self.package.version,
            nodes=cluster.nnodes if cluster else 1,
            prefer_fp8=settings.prefer_fp8,
            resolve=lambda m: from_hub(m, token=self.hf_token),
        )
        preflight.checks(
            name="Ensure the model, its context and its download fit this host before anything is installed",
            problems=pod.lock_problems()
            + host_problems(settings, pod, needs_install=self.found is None)
            + edge_problems(self.way)
            + idle_config_problems(settings, self.name, self.host.data.get("runpod_pod_id"))
            + self.launch.problems
            + (cluster.problems if cluster else []),
            summary="; ".join(filter(None, [self.launch.summary(), cluster and cluster.summary(), pod.lock_note()])),
        )
        launch = self.launch
        self.served = f"{launch.fetch.repo}@{launch.fetch.revision[:12]}" if launch.fetch else launch.model
        # A cluster converges as a whole or not at all: a node refused above stops every node here.
        self.as_a_whole("passed its preflight before any node changes", "their preflight")

    def as_a_whole(self, what: str, step: str) -> None:
        """On a cluster, every node stops here when one was refused at ``step`` (pyinfra runs an
        operation on every host before the next, so each node has had its turn)."""
        if self.cluster is not None:
            preflight.together(
                name=f"Ensure every node of {self.cluster.name} {what}",
                cluster=self.cluster.name,
                members=[m.name for m in self.cluster.members],
                step=step,
            )

    def install(self) -> None:
        """2. The volume (made the SSH user's with sudo if it is missing or root's), its folders, and
        vLLM (the system's if it matches, else a venv on the volume) with Caddy and supervisord in
        the venv; then every file this host gets, rendered here."""
        settings, pod, paths, found = self.settings, self.pod, self.paths, self.found
        self.volume()
        tools = [settings.edge_package, settings.supervisor_package]
        self.installed = vllm.venv(
            name=f"Ensure {self.package} is installed ({paths.venv} unless the system has it), with Caddy and "
            "supervisord in the venv and no package that breaks it",
            package=self.package,
            paths=paths,
            found=found,
            venv_python_ok=pod.venv.python_ok,
            tools=tools,
            missing_tools=pod.venv.missing_tools(tools),
        )
        self.vllm_bin = found.vllm_bin if found else f"{paths.venv}/bin/vllm"
        self.python = found.python if found else f"{paths.venv}/bin/python"
        device = device_of(pod.gpus)
        self.files = host_files(
            settings,
            package=self.package,
            vllm_bin=self.vllm_bin,
            launch=self.launch,
            way=self.way,
            user=pod.user,
            group=pod.group,
            host_name=self.name,
            pod_id=self.host.data.get("runpod_pod_id"),
            cluster=self.cluster,
            device=device,
        )
        # the KV cache size a ready start measured, for the next start on the same key (CPU build)
        argv = serve_argv(settings, self.vllm_bin, self.launch, self.cluster)
        key = reuse_key(self.package, argv, server_env(settings, self.cluster), device, self.cluster)
        self.profile = wait_profile(key, paths.profile_record)

    def key(self) -> None:
        """3. One API key: the controller's file is the source (read above); the host gets a 0600 copy."""
        self.secret("API key", self.paths.api_key, self.api_key)

    def measure(self) -> None:
        """3b. With podkit_plan_measure: vLLM itself starts once with these flags and random weights
        (config and tokenizer only) before the first download of a new checkpoint."""
        step = deploy_step(self.settings, self.launch, self.pod, self.vllm_bin)
        if self.settings.plan_measure:
            preflight.measured(
                name="Ensure vLLM starts with these flags on this host (measured with random weights) before the "
                "download",
                step=step,
                python=self.python,
                endpoint=os.environ.get("HF_ENDPOINT"),
                record=plan_record(self.settings, self.launch),
            )

    def checkpoint(self) -> None:
        """4. The checkpoint: a clean hub cache, then the planned snapshot in it (fetched on the host)."""
        pod, launch = self.pod, self.launch
        if self.hf_token:
            self.secret("Hugging Face token", self.paths.hf_token, self.hf_token)
        checkpoint.cache_clean(
            name="Ensure the hub cache holds no partial downloads, stale locks or broken links",
            paths=self.paths,
            problems=pod.cache_problems,
            fetch_running=pod.fetch_running,
        )
        if launch.fetch:
            checkpoint.fetched(
                name=f"Ensure {launch.fetch.repo}@{launch.fetch.revision[:12]} is complete on the volume",
                spec=launch.fetch,
                paths=self.paths,
                python=self.python,
                endpoint=os.environ.get("HF_ENDPOINT"),
                deadline=self.settings.fetch_timeout,
                complete=launch.fetched,
                running=pod.fetch_running,
                note=(pod.checkpoint or {}).get("ignored"),
            )

    def check_launch(self) -> None:
        """5. Before vLLM restarts (its files changed, or it does not run them), the installed vLLM reads
        the new launch (its own parser and config validation), and a working server's files are kept,
        to put back if the new start fails. Nothing the server reads has changed yet; a converged host
        pays nothing."""
        settings, pod, cluster = self.settings, self.pod, self.cluster
        self.programs = programs_for(settings, follower=self.follower)
        self.strays = pod.stray_programs(self.programs)  # a copy outside the supervisor: stopped, so this restarts
        # the install puts back the very vLLM that serves (its venv deleted while it ran): nothing restarts for it
        self.reinstall = self.installed.will_change and not pod.serves_version(self.package.version)
        self.restart_vllm = (
            "vllm" in self.strays
            or self.changed(managed_files(settings))
            or self.reinstall
            or not pod.serving_current_files()
            or bool(cluster and cluster.peers_due())
        )
        serve = serve_arguments(serve_argv(settings, self.vllm_bin, self.launch, cluster))
        env, generation = server_env(settings, cluster), settings.generation_config
        digest = launch_digest(self.python, str(self.package), serve, env, generation)
        preflight.launch(
            name=f"Ensure the installed vLLM accepts the new launch of {self.served} before the server restarts",
            command=check_command(self.python, serve, env, generation, self.paths.accepted_launches, digest),
            due=self.restart_vllm,
            accepted=digest in pod.accepted_launches and not self.reinstall,
            settings=settings,
            argv=serve,
            package=str(self.package),
        )
        self.as_a_whole("has its launch accepted by its vLLM before any node restarts", "vLLM's check of their launch")
        self.restorable = rollback_due(
            settings, pod, restart_due=self.restart_vllm, reinstall=self.reinstall, cluster=bool(cluster)
        )
        rollback.kept(
            name="Ensure the files that serve now are kept beside them, to put back if the new start fails",
            paths=to_keep(settings, pod),
            restorable=self.restorable,
        )

    def scripts(self) -> None:
        """6. Every cache on the volume, through one env file the launch script sources; the launch
        script, 7. the edge (Caddy: only /v1 with the key, /health; TLS when clients come in
        directly), 8. the idle watcher: after podkit_idle_stop_minutes without a request it stops the
        pod (RunPod) or the server (bare metal); at 0 it only keeps the idle time. A cluster's
        follower runs vLLM headless for the head: no API, so no edge; its idle watcher stops its own
        once the head has not answered for that long (a minute at most)."""
        settings, cluster, served = self.settings, self.cluster, self.served
        self.managed("Ensure the env file puts every cache on the volume", "env")
        if cluster is not None and self.follower:
            self.managed(
                f"Ensure the launch script runs rank {cluster.rank} of {cluster.name} headless for the head at "
                f"{cluster.head}, serving {served}",
                "launch",
            )
        else:
            self.managed(
                f"Ensure the launch script serves {served} as {settings.served_model_name} on 127.0.0.1 only", "launch"
            )
            self.managed("Ensure the edge script runs Caddy with the key from its file", "edge")
            self.managed(
                f"Ensure the Caddyfile lets only /v1 with the key and /health through port {settings.edge_port}"
                + (f" (TLS: {self.way.tls})" if self.way.tls != "off" else ""),
                "caddyfile",
            )
        idle_what = "the pod" if self.host.data.get("runpod_pod_id") else "the server"
        self.managed("Ensure the idle watcher's program is current", "idle_script")
        if not settings.idle_stop_minutes:
            idle_name = "Ensure the idle watcher keeps the idle time and stops nothing (podkit_idle_stop_minutes = 0)"
        elif cluster is not None and self.follower:
            grace = follow_grace(settings.idle_stop_minutes * 60)
            idle_name = (
                f"Ensure the idle watcher stops {idle_what} {grace:g} s after the head at {cluster.head} stops "
                "answering"
            )
        else:
            idle_name = (
                f"Ensure the idle watcher stops {idle_what} after {settings.idle_stop_minutes:g} minute"
                + ("s" if settings.idle_stop_minutes != 1 else "")
                + " without a request"
            )
        self.managed(idle_name, "idle_config")
        self.managed(
            "Ensure the volume records what the plan predicts, for podkit status to check against vLLM's log", "plan"
        )

    def supervise(self) -> None:
        """9. What keeps them running: supervisord, or systemd units. Restart what reads changed files
        (content: a mode put back changes nothing), or runs older files (vLLM's, above); a cluster's
        node also when another node restarts (its ranks start together). What outlived its server or
        runs outside the supervisor is stopped first."""
        settings, pod, follower, strays = self.settings, self.pod, self.follower, self.strays
        will_install = self.reinstall
        self.restart_edge = not follower and (
            "edge" in strays or self.changed(edge_files(settings)) or will_install or not pod.edge_current_files()
        )
        # a pod whose last proof that it can stop itself failed proves it again now (what it lacked may be fixed)
        unproven = bool(self.host.data.get("runpod_pod_id") and (pod.self_stop or {}).get("ok") is False)
        self.restart_idle = "idle" in strays or self.changed(idle_files(settings)) or will_install or unproven
        supervisor.legacy_runner(
            name="Ensure no runner from an older podkit holds the port",
            runner_script=self.paths.legacy_runner_script,
            pid=pod.legacy_runner,
        )
        supervisor.orphans(
            name="Ensure no vLLM engine outlives its server and no program runs outside the supervisor "
            "(stopped before any start)",
            found=pod.orphans,
        )
        self.systemd = settings.supervisor == "systemd"
        units = {
            UNIT_NAME: ("unit", UNIT_PATH, self.restart_vllm, pod.unit or Unit(UNIT_NAME)),
            EDGE_UNIT_NAME: ("edge_unit", EDGE_UNIT_PATH, self.restart_edge, pod.edge_unit or Unit(EDGE_UNIT_NAME)),
            IDLE_UNIT_NAME: ("idle_unit", IDLE_UNIT_PATH, self.restart_idle, pod.idle_unit or Unit(IDLE_UNIT_NAME)),
        }
        if self.systemd:
            self.by_systemd(units)
        else:
            self.by_supervisord(units)

    def by_systemd(self, units: dict) -> None:
        """With podkit_supervisor = "systemd": no supervisord, and each unit current, enabled and
        running from the current files."""
        pod, paths = self.pod, self.paths
        supervisor.supervisord_stopped(
            name="Ensure no supervisord runs (systemd supervises vLLM and the edge)",
            supervisorctl=f"{paths.venv}/bin/supervisorctl",
            conf=paths.supervisord_conf,
            pid=pod.supervisord_left,
        )
        for unit_name, (role, unit_path, restart, unit) in units.items():
            self.managed(f"Ensure the volume holds the current {unit_name}", role)
            installed_unit = supervisor.unit(
                name=f"Ensure systemd has the current {unit_name} (daemon-reload when it changed)",
                source=self.files[role].path,
                path=unit_path,
                current_sha256=pod.files.get(unit_path),
                sha256=self.files[role].sha256,
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
            if role == "idle_unit":
                self.idle_restarted = restart or installed_unit.will_change or not unit.up
        self.restarted = self.restart_vllm

    def by_supervisord(self, units: dict) -> None:
        """supervisord runs the programs from the current files; units left from podkit_supervisor =
        "systemd" let go of the ports first (one supervisor at a time)."""
        pod, paths = self.pod, self.paths
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
        what = "vLLM (headless)" if self.follower else "vLLM, the edge and the idle watcher"
        conf = self.managed(f"Ensure supervisord's config runs {what}", "supervisord")
        running = pod.supervisor_pid is not None
        due = (("vllm", self.restart_vllm), ("edge", self.restart_edge), ("idle", self.restart_idle))
        # A cluster's nodes reach this operation together: each starts its rank at the same step.
        supervisor.programs(
            name=f"Ensure supervisord runs {what} from the current files",
            config={**server_config(self.settings), "supervisord_log": paths.supervisord_log},
            running=running,
            programs=pod.programs,
            reload=conf.will_change,
            restart=[name for name, restart in due if restart],
            names=self.programs,
        )
        self.restarted = self.restart_vllm or conf.will_change or not running
        self.idle_restarted = self.restart_idle or conf.will_change or not running

    def readiness(self) -> None:
        """10. vLLM answers on loopback and lists the served model (with the key), and the edge answers
        /health; with TLS from Caddy's CA, its root certificate is pinned on the controller. A
        cluster's head answers only once every rank joined: its readiness is the cluster's."""
        settings, pod, way, cluster = self.settings, self.pod, self.way, self.cluster
        if self.follower:
            return
        if way.tls == "internal" and pod.ca_root:
            pin_ca(self.name, pod.ca_root)
        vllm.endpoint(
            name=f"Ensure vLLM answers and lists {settings.served_model_name} behind the edge on port "
            f"{settings.edge_port}" + (f" (every rank of {cluster.name} joined)" if cluster else ""),
            settings=settings,
            ready=pod.ready(settings.served_model_name)
            and pod.supervised(settings.supervisor)
            and not self.restarted
            and not self.restart_edge,
            pin=way.tls == "internal" and not pod.ca_root,
            profile=self.profile,
            # supervise starts the exit count again at a restart; a server left running keeps its own
            crashes_before=0 if self.restarted and not self.systemd else pod.crashes,
            restore=restore_config(settings, pod, tls=way.tls != "off") if self.restorable else None,
        )

    def self_stop(self) -> None:
        """11. A RunPod pod that is to stop itself when idle proves, before it must, that it can: its idle
        watcher reads the pod through RunPod's API with the pod's own key, the same ways its stop goes.
        A watcher this run (re)started proves it at its start (one more remote command, then only)."""
        pod_id, minutes, pod = self.host.data.get("runpod_pod_id"), self.settings.idle_stop_minutes, self.pod
        if not pod_id or not minutes:
            return
        paths = self.paths
        supervisor.self_stop(
            name=f"Ensure pod {pod_id} can stop itself after {minutes:g} minute{'s' if minutes != 1 else ''} "
            "without a request (RunPod answers its own key)",
            pod_id=pod_id,
            minutes=minutes,
            proof=pod.self_stop,
            restarted=self.idle_restarted or pod.programs.get("idle") not in ("RUNNING", "ACTIVE"),
            cfg={
                "idle_state": paths.idle_state,
                "idle_log": paths.idle_log,
                "pod_id": pod_id,
                "after": (pod.self_stop or {}).get("checked_at") or 0,
                "window": 150,
            },
        )
