"""A server host (every host but a router), in the order it converges: :meth:`Server.converge` is
the path, one step a line; each step is a method below, in the same order, numbered and told once
in its docstring: ``N. Title: what it does`` (the first paragraph), then ``Converged: ...`` (what it
costs a converged host). docs/how-it-works.md's step table is made from them (docs/hooks.py).

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
from podkit.host.measure import deploy_step
from podkit.host.preflight import host_problems
from podkit.host.programs import edge_files, idle_files, managed_files, programs_for
from podkit.host.render import host_files, reuse_key, serve_argv, server_env
from podkit.host.start.launchcheck import accept_config, check_command, launch_digest, serve_arguments
from podkit.host.start.profile import device_of, wait_profile
from podkit.host.start.rollback import restorable as rollback_due
from podkit.host.start.rollback import restore_config, to_keep
from podkit.host.start.startup import plan_record
from podkit.paths import EDGE_UNIT_NAME, EDGE_UNIT_PATH, IDLE_UNIT_NAME, IDLE_UNIT_PATH, UNIT_NAME, UNIT_PATH
from podkit.plan.checkpoints import from_hub
from podkit.remote.idle.clock import follow_grace
from podkit.settings import Settings, SettingsError
from podkit.wayin import pin_ca, record_role
from roles.supervision import Supervision


class Server(Supervision):
    cluster: Cluster | None

    def converge(self) -> None:
        """The server's path. On a converged host every operation reports "No changes" and the run
        costs one remote command (the probe)."""
        self.read()
        self.plan()
        self.install()
        self.key()
        self.measure()
        self.checkpoint()
        self.check_launch()
        self.scripts()
        self.supervise()
        self.readiness()
        self.self_stop()

    def read(self) -> None:
        """1. Read the host: its GPUs, volume, vLLM, every file podkit manages, the supervisor, the
        server and the edge, in one command that also takes the host's deploy lock; a node of a
        cluster reads every other node too, before anything changes anywhere.

        Converged: the only remote command.
        """
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
        """2. Plan before spending: the checkpoint (FP8 where the GPUs take it), the context, TP and
        PP, the parsers, memory and disk; what cannot work is refused, each with its fix, before
        anything is installed or downloaded.

        Converged: no change; the plan in one line.
        """
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

    def as_a_whole(self, what: str, step: str, then: str = "") -> None:
        """On a cluster, every node stops here when one was refused at ``step`` (pyinfra runs an
        operation on every host before the next, so each node has had its turn)."""
        if self.cluster is not None:
            preflight.together(
                name=f"Ensure every node of {self.cluster.name} {what}",
                cluster=self.cluster.name,
                members=[m.name for m in self.cluster.members],
                step=step,
                then=then,
            )

    def install(self) -> None:
        """3. Install: the volume and its folders, the pinned vLLM (the system's if it is that one,
        else a venv on the volume) with Caddy and supervisord; every file the host gets is rendered
        here.

        Converged: no change.
        """
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
        """4. The API key: the controller's file is the source; the host gets a 0600 copy.

        Converged: no change (compared by checksum).
        """
        self.secret("API key", self.paths.api_key, self.api_key)

    def measure(self) -> None:
        """5. The measured plan: with podkit_plan_measure, before the first download of a new
        checkpoint, vLLM starts once with these flags and random weights, and says whether they fit.

        Converged: no change (the outcome is kept on the host).
        """
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
        """6. The checkpoint: a clean hub cache, then the planned snapshot, downloaded on the host
        (only the files vLLM reads).

        Converged: no change, and no request to the hub.
        """
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
        """7. Check the new launch: before vLLM restarts, the installed vLLM reads the new command line
        (its own argument, engine config and sampling checks) while the server still serves, and
        the files that serve are kept beside them, to put back if the new start fails. With no
        server running, the start is the check.

        Converged: nothing runs (no restart is due).
        """
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
        accepted = digest in pod.accepted_launches and not self.reinstall
        serving = bool(pod.server_pid)
        preflight.launch(
            name=f"Ensure the installed vLLM accepts the new launch of {self.served} before the server restarts",
            command=check_command(self.python, serve, env, generation, self.paths.accepted_launches, digest),
            due=self.restart_vllm,
            accepted=accepted,
            serving=serving,
            settings=settings,
            argv=serve,
            package=str(self.package),
        )
        # a launch no check read (no server ran to keep) is recorded as accepted once it serves
        self.unchecked = (
            accept_config(self.paths.accepted_launches, digest)
            if self.restart_vllm and not accepted and not serving
            else None
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
        """8. The files: the env file (every cache on the volume), the launch script, the edge (Caddy),
        the idle watcher and its config, and what the plan predicts.

        Converged: no change.

        A cluster's follower runs vLLM headless for the head: no API, so no edge; its idle watcher
        stops its own once the head has not answered for that long (a minute at most).
        """
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
        """9. Supervise: supervisord (or systemd units) runs vLLM, the edge and the idle watcher; only
        what reads a changed file, or runs older files, restarts; what outlived its server is
        stopped first.

        Converged: no change.

        A mode put back changes no content, so restarts nothing; a cluster's node restarts also when
        another node does (its ranks start together).
        """
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
        # a node whose programs did not start fails the others here: the head would otherwise wait
        # its whole podkit_ready_timeout for a rank that cannot join
        self.as_a_whole(
            "started its programs before the head waits for every rank",
            "the start of their programs",
            then="the head does not wait for ranks that cannot join",
        )

    def readiness(self) -> None:
        """10. Readiness: vLLM answers and lists the model behind the edge; a new start that fails puts
        back the kept files and starts from them again, and the run fails naming the cause.

        Converged: no change.

        With TLS from Caddy's CA, its root certificate is pinned on the controller. A cluster's head
        answers only once every rank joined: its readiness is the cluster's.
        """
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
            accept=self.unchecked,
        )

    def self_stop(self) -> None:
        """11. Prove the self-stop: a RunPod pod that stops itself when idle proves it can, before it
        must: its idle watcher reads the pod through RunPod's API with the pod's own key.

        Converged: no change (proven when the watcher started).

        A watcher this run (re)started proves it at its start (one more remote command, then only).
        """
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
