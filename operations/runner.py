"""Operations for podkit's runner: the systemd-free supervisor of the vLLM server."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation


@operation()
def service(runner_script: str, running: bool, restarted: bool = False):
    """
    Ensure the runner supervises the server, restarting it only when asked.

    + runner_script: path of ``runner.sh`` on the host
    + running: whether the probe found the runner alive
    + restarted: restart a running runner (its files changed)

    **Example:**

    .. code:: python

        runner.service(
            name="Ensure the runner serves the current launch script",
            runner_script=paths.runner_script, running=True, restarted=launch.will_change,
        )
    """
    script = shlex.quote(runner_script)
    if not running:
        yield f"{script} stop >/dev/null && {script} start"
    elif restarted:
        yield f"{script} restart"
    else:
        host.noop("the runner serves the current launch script, env file and key")
