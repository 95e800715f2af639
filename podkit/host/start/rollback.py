"""The last line: when a new start fails readiness, the files that served before are put back and started.

The checks before a restart (podkit's own, and the installed vLLM's parser and config validation:
:mod:`podkit.host.start.launchcheck`) catch what can be known without starting; some values fail only at
engine start (a KV cache too small for one request, memory that is not there). So when a deploy is
about to restart a server that answers (ready, and running the files on disk), it first keeps a copy
of those files beside them (``launch.sh.served``, ...), and when the new start then fails readiness it
puts them back, restarts vLLM from them, waits for it, and fails the run saying what it refused and
why: the endpoint comes back without a second apply.

Not for a cluster's nodes (their ranks restart together: the cluster converges as a whole or not at
all), nor when vLLM itself is reinstalled in the same run (the old files would start the new vLLM).

Pure: the deploy gives it the probe's snapshot; the copies' sums come in that same probe (which
files are kept, and where their copies lie, is :mod:`podkit.host.programs`).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from podkit.host.probe import server_config
from podkit.host.programs import copy_of, kept_files
from podkit.settings import Settings

if TYPE_CHECKING:
    from podkit.host.hoststate import HostState


def restorable(settings: Settings, pod: HostState, *, restart_due: bool, reinstall: bool, cluster: bool) -> bool:
    """Whether this run would take down a working server that it can bring back: it answers, under
    its supervisor, from the files on disk, and a restart is due with the same vLLM."""
    return (
        restart_due
        and not reinstall
        and not cluster
        and pod.ready(settings.served_model_name)
        and pod.supervised(settings.supervisor)
        and pod.serving_current_files()
    )


def to_keep(settings: Settings, pod: HostState) -> list[str]:
    """The served files whose copy is missing or differs (the probe's sums): those the keep copies."""
    return [
        path
        for path in kept_files(settings)
        if pod.files.get(path) is not None and pod.files.get(copy_of(path)) != pod.files.get(path)
    ]


def keep_command(paths: list[str]) -> str:
    """Copy each file beside itself (mode kept; written whole, then renamed into place)."""
    steps = []
    for path in paths:
        live, kept = shlex.quote(path), shlex.quote(copy_of(path))
        part = shlex.quote(copy_of(path) + ".part")
        steps.append(f"cp -p {live} {part} && mv -f {part} {kept}")
    return " && ".join(steps)


def restore_config(settings: Settings, pod: HostState, tls: bool = False) -> dict[str, Any]:
    """What ``podctl restore`` needs: each copy and the file it goes back to (those the probe saw,
    as they are then the copies), the supervisor's config, and how to restart vLLM."""
    return {
        **server_config(settings, tls=tls),
        "pairs": [[copy_of(path), path] for path in kept_files(settings) if pod.files.get(path) is not None],
        "restart": ["vllm"],
        "sudo": not pod.root,
    }


def restored_line(settings: Settings, cause: str, elapsed: float) -> str:
    """The run's last word on a host whose new start failed and whose old files serve again."""
    names = ", ".join(path.rsplit("/", 1)[-1] for path in kept_files(settings))
    return (
        f"refused the new launch: {cause}; put back the files that served before ({names}) and vLLM answers "
        f"again on port {settings.edge_port} ({elapsed:.0f} s); fix the setting that caused it and re-apply"
    )
