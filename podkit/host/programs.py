"""The programs podkit runs on a host, and the files each one reads.

The launch and edge scripts record the sums of the files they read when they start (the
renderer gives them these lists); the probe reads the same files' sums; a file that differs
restarts the program that reads it. What the renderer writes and what the probe asks for come
from here, so the two cannot disagree.
"""

from __future__ import annotations

from podkit.paths import EDGE_UNIT_PATH, IDLE_UNIT_PATH, UNIT_PATH
from podkit.settings import Settings

# what supervisord runs: the server, the edge, the idle watcher; on a router host, the router and the edge
PROGRAMS = ("vllm", "edge", "idle")
ROUTER_PROGRAMS = ("router", "edge")
# a cluster's follower (rank 1, 2, ...) runs vLLM headless: no API of its own, so no edge; its idle
# watcher follows the head
FOLLOWER_PROGRAMS = ("vllm", "idle")


def programs_for(settings: Settings, follower: bool = False) -> tuple[str, ...]:
    """The programs supervisord runs on this host (``follower``: a cluster node other than the head)."""
    if settings.role == "router":
        return ROUTER_PROGRAMS
    return FOLLOWER_PROGRAMS if follower else PROGRAMS


def managed_files(settings: Settings) -> list[str]:
    """Files whose content decides what the running server is (the launch script records their sums)."""
    paths = settings.paths
    return [paths.launch_script, paths.env_file, paths.api_key]


def edge_files(settings: Settings) -> list[str]:
    """Files whose content decides what the running edge is (its script records their sums)."""
    paths = settings.paths
    return [paths.edge_script, paths.caddyfile, paths.api_key]


def idle_files(settings: Settings) -> list[str]:
    """Files whose content decides what the running idle watcher is."""
    paths = settings.paths
    return [paths.idle_script, paths.idle_config]


def supervision_files(settings: Settings) -> list[str]:
    """What supervises the programs: supervisord's config, or the units (volume copy and installed)."""
    paths = settings.paths
    if settings.supervisor == "systemd":
        return [paths.unit_copy, UNIT_PATH, paths.edge_unit_copy, EDGE_UNIT_PATH, paths.idle_unit_copy, IDLE_UNIT_PATH]
    return [paths.supervisord_conf]


# What a failed start puts back (podkit.host.start.rollback): the files a server starts from, copied beside them.
SUFFIX = ".served"


def kept_files(settings: Settings) -> list[str]:
    """What a server starts from and a failed start puts back: the launch script (the argv, the
    generation config), the env file and the plan podkit status compares the start with. The key is
    not among them: the controller's key is the source, and the launch script reads it at start."""
    paths = settings.paths
    return [paths.launch_script, paths.env_file, paths.plan_file]


def copy_of(path: str) -> str:
    return path + SUFFIX


def copies(settings: Settings) -> list[str]:
    """The copies' paths (the probe sums them, so keeping them costs no read)."""
    return [copy_of(path) for path in kept_files(settings)]
