"""Facts: what a host is like, read in as few round trips as possible.

``PodState`` runs podctl's ``probe`` (``podkit/remote/podctl/``) on the host: one command
that returns GPUs, the volume, installed vLLM builds, the checksums, modes and
owners of every file podkit manages, the runner's and server's state and any
vLLM engine that outlived its server, and that takes the deploy lock (one deploy
per host at a time; it lasts as long as this run's connection to the host).
pyinfra does not cache facts, so :func:`pod_state` keeps the answer for the rest
of the run: every operation reads the same snapshot instead of asking the host again.
"""

from __future__ import annotations

import getpass
import json
import os
import socket

from gevent.lock import Semaphore
from pyinfra import host, state
from pyinfra.api import FactBase

from podkit.host.hoststate import HostState
from podkit.host.podctl import podctl_command
from podkit.host.probe import ProbeError, parse_probe, probe_config
from podkit.settings import Settings


class PodState(FactBase):
    """
    Returns a ``podkit.host.hoststate.HostState`` built from one probe of the host:

    .. code:: python

        HostState(
            gpus=[Gpu(index=0, name="NVIDIA H100 80GB HBM3", memory_mib=81559, compute_capability="9.0")],
            free_bytes=48_000_000_000,
            venv=VllmInstall(where="venv", dists={"vllm": "0.33.0"}, ...),
            files={"/workspace/podkit/bin/launch.sh": "9f86d0...", ...},
            runner_pid=4242, vllm_pid=4243, endpoint={"health": 200, "models": ["coder"]},
            ...
        )
    """

    def command(self, config: str) -> str:
        return podctl_command("probe", json.loads(config))

    def process(self, output: list[str]) -> HostState:
        try:
            return parse_probe("\n".join(output))
        except ProbeError as exc:  # fails this host's preflight, not the whole run
            return HostState.blank(str(exc))

    @staticmethod
    def default() -> None:
        return None


_SNAPSHOTS: dict[tuple[int, str], HostState] = {}
# pyinfra runs the deploy file for its hosts at once (gevent): one node's turn may ask for another
# node's probe while that node's own turn is reading it; the second waits for the first's answer.
_READING: dict[tuple[int, str], Semaphore] = {}


def controller() -> dict[str, object]:
    """Who runs this deploy, as the deploy lock names it to a second run: host, pid, user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"host": socket.gethostname(), "pid": os.getpid(), "user": user}


def pod_state(settings: Settings, extra_files: list[str] = (), on=None, extra_ports: list[int] = ()) -> HostState:
    """The probe's answer for the current host (or host ``on``: another node of its cluster), read
    once per run (and the deploy lock, taken). ``extra_files``: more files to sum (a router host's
    copies of its replicas' CA certificates); ``extra_ports``: more ports whose listener to name."""
    target = on or host
    key = (id(state), target.name)
    with _READING.setdefault(key, Semaphore()):
        if key not in _SNAPSHOTS:
            config = json.dumps(
                probe_config(settings, controller=controller(), extra_files=extra_files, extra_ports=extra_ports),
                sort_keys=True,
            )
            _SNAPSHOTS[key] = target.get_fact(PodState, config=config)
    return _SNAPSHOTS[key]
