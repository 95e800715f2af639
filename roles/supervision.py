"""What keeps a server host's programs running: systemd units, or supervisord (the default).

:meth:`Server.supervise <roles.server.Server.supervise>` decides what restarts and calls one of
these; each runs the programs from the current files and restarts only what it is told to.
"""

from __future__ import annotations

from operations import supervisor
from podkit.host.probe import server_config
from roles.turn import Turn


class Supervision(Turn):
    """A server's supervisor steps; the role sets what they read (``restart_vllm``, ``programs``,
    ``follower``) before it calls them."""

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
