"""A router host (``podkit_role = "router"``): vllm-router in front of the replicas of
``podkit_router_group``, behind its own edge. It reads itself and checks its replicas first
(:meth:`Router.read`, with the servers' first steps); then, once every server of the run is ready,
it converges (:meth:`Router.converge`), so a fleet's first apply has each replica's edge CA pinned
on the controller before the router host needs it. Each step is numbered and told once in its
docstring, as a server's are (roles/server.py); docs/how-it-works.md's router table comes from them.
"""

from __future__ import annotations

from pyinfra import inventory
from pyinfra.api.exceptions import NoGroupError

from operations import facts, preflight, router, supervisor, vllm
from podkit.host.edge import edge_problems
from podkit.host.preflight import host_problems
from podkit.host.probe import server_config
from podkit.host.programs import ROUTER_PROGRAMS, edge_files, managed_files
from podkit.host.render import router_files
from podkit.host.router import port_problems, replicas_of, router_ports, router_problems, self_problems
from podkit.wayin import pin_ca
from roles.turn import Turn


class Router(Turn):
    def read(self) -> None:
        """1. Read the host and check its replicas: one remote command, and the hosts of
        podkit_router_group, reached as clients reach them, serve one model, before anything is
        installed.

        Converged: the only remote command.
        """
        settings, paths = self.settings, self.paths
        try:
            members = [(member.name, member.data.dict()) for member in inventory.get_group(settings.router_group)]
        except NoGroupError:
            members = None
        self.replicas = replicas_of(settings, members or [])
        self.certificates = [r.ca for r in self.replicas if r.ca]
        ports = router_ports(settings, self.replicas)
        self.pod = pod = facts.pod_state(
            settings, extra_files=[paths.replicas_file, *self.certificates], extra_ports=list(ports)
        )
        self.tools = [settings.router_package, settings.edge_package, settings.supervisor_package]
        self.missing_tools = pod.venv.missing_tools(self.tools)
        try:
            self.files = router_files(settings, replicas=self.replicas, way=self.way, host_name=self.name)
            render_problems = []
        except ValueError as bad:
            self.files, render_problems = {}, [str(bad)]
        count = len(self.replicas)
        preflight.checks(
            name="Ensure the router's replicas are known and serve one model before anything is installed",
            problems=pod.lock_problems()
            + host_problems(settings, pod, needs_install=bool(self.missing_tools) or not pod.venv.python_ok)
            + router_problems(settings, settings.router_group, self.replicas, found=members is not None)
            + self_problems(self.name, self.way, settings.router_group, self.replicas)
            + port_problems(settings, ports, pod.ports_held)
            + edge_problems(self.way)
            + render_problems,
            summary=f"router ({settings.router_policy}) in front of {count} replica"
            + ("s" if count != 1 else "")
            + f" of {settings.router_group}: "
            + ", ".join(f"{r.name} ({r.way.base_url})" for r in self.replicas),
        )

    def converge(self) -> None:
        """The router host's path once every server is ready (:meth:`read` came before)."""
        self.install()
        self.files_and_key()
        self.supervise()
        self.readiness()

    def install(self) -> None:
        """2. Install: the volume, its folders, and the router's tools in the venv: vllm-router, Caddy
        and supervisord.

        Converged: no change.
        """
        self.volume(router=True)
        self.installed = router.tools(
            name=f"Ensure {', '.join(map(str, self.tools))} are installed in {self.paths.venv}",
            paths=self.paths,
            tools=self.tools,
            missing=self.missing_tools,
            venv_python_ok=self.pod.venv.python_ok,
        )

    def files_and_key(self) -> None:
        """3. The key and the files: the router's launch script, the edge (the front for clients, and
        one loopback hop per replica to its edge), and each replica's pinned CA.

        Converged: no change.
        """
        settings, count = self.settings, len(self.replicas)
        self.secret("API key", self.paths.api_key, self.api_key)
        self.managed("Ensure the env file puts every cache on the volume", "env")
        self.managed(f"Ensure the volume lists the {count} replicas, for verify and status", "replicas")
        self.managed(
            f"Ensure the launch script runs vLLM's router ({settings.router_policy}) in front of "
            f"{count} replicas on 127.0.0.1 only",
            "launch",
        )
        self.managed("Ensure the edge script runs Caddy with the key from its file", "edge")
        self.managed(
            f"Ensure the Caddyfile lets only /v1 with the key and /health through port {settings.edge_port}, "
            "and carries the router's requests to each replica's edge",
            "caddyfile",
        )
        self.certified = router.replica_certificates(
            name="Ensure the router host trusts exactly each replica's pinned edge CA",
            replicas=self.replicas,
            current={path: self.pod.files.get(path) for path in self.certificates},
        )

    def supervise(self) -> None:
        """4. Supervise: supervisord runs the router and the edge; what reads a changed file (or runs
        outside the supervisor) restarts.

        Converged: no change.
        """
        settings, pod, will_install = self.settings, self.pod, self.installed.will_change
        strays = pod.stray_programs(ROUTER_PROGRAMS)
        restart_router = (
            "router" in strays
            or self.changed(managed_files(settings))
            or will_install
            or not pod.serving_current_files()
        )
        restart_edge = (
            "edge" in strays
            or self.changed(edge_files(settings))
            or will_install
            or self.certified.will_change
            or not pod.edge_current_files()
        )
        supervisor.orphans(
            name="Ensure no program runs outside the supervisor (stopped before any start)", found=pod.orphans
        )
        conf = self.managed("Ensure supervisord's config runs the router and the edge", "supervisord")
        running = pod.supervisor_pid is not None
        supervisor.programs(
            name="Ensure supervisord runs the router and the edge from the current files",
            config={**server_config(settings), "supervisord_log": self.paths.supervisord_log},
            running=running,
            programs=pod.programs,
            reload=conf.will_change,
            restart=[name for name, due in (("router", restart_router), ("edge", restart_edge)) if due],
            names=ROUTER_PROGRAMS,
        )
        self.restarted = restart_router or restart_edge or conf.will_change or not running

    def readiness(self) -> None:
        """5. Readiness: the router answers and lists the model (asked of a replica, with the key)
        behind the edge.

        Converged: no change.

        With TLS from Caddy's CA, its root certificate is pinned on the controller.
        """
        settings, pod, way = self.settings, self.pod, self.way
        if way.tls == "internal" and pod.ca_root:
            pin_ca(self.name, pod.ca_root)
        vllm.endpoint(
            name=f"Ensure the router answers and lists {settings.served_model_name} behind the edge on port "
            f"{settings.edge_port}",
            settings=settings,
            ready=pod.ready(settings.served_model_name)
            and pod.supervised(settings.supervisor, ROUTER_PROGRAMS)
            and not self.restarted,
            pin=way.tls == "internal" and not pod.ca_root,
        )
