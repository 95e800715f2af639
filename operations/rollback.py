"""The last line before a restart: keep the files that serve, and put them back when the new start fails
(see :mod:`podkit.host.start.rollback`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pyinfra import host, logger
from pyinfra.api import operation

from operations.supervisor import podctl_answer
from podkit.host.start.rollback import keep_command, restored_line
from podkit.settings import Settings
from podkit.text import clean


@operation()
def kept(paths: list[str], restorable: bool):
    """
    Ensure a copy of the files the working server started from lies beside them, to put back if the
    new start fails.

    + paths: the served files whose copy is missing or differs (``podkit.host.start.rollback.to_keep``)
    + restorable: a working server is about to restart (nothing to keep otherwise)

    **Example:**

    .. code:: python

        rollback.kept(
            name="Ensure the files that serve now are kept, to put back if the new start fails",
            paths=to_keep(settings, pod), restorable=True,
        )
    """
    if not restorable:
        host.noop("no working server restarts in this run: nothing to keep")
        return
    if not paths:
        host.noop("the files that serve now are kept beside them")
        return
    yield keep_command(paths)


def restore_served(state, host, settings: Settings, cfg: dict, cause: str, wait: Callable[..., bool]) -> bool:
    """The new start failed readiness with ``cause``: put back the kept files, restart vLLM from them,
    wait for it (``wait``: the readiness loop), and say what was refused. False either way: the run
    did not converge to what was asked."""
    host.log_styled(
        "the new start failed: putting back the files that served before it and restarting vLLM from them",
        fg="yellow",
        log_func=logger.warning,
    )
    result = podctl_answer(host, "restore", cfg)
    if not result.get("ok"):
        host.log_styled(
            f"refused the new launch: {cause}; putting back the files that served before failed too "
            f"({clean(str(result.get('error')))}): fix the setting that caused it and re-apply",
            fg="red",
            log_func=logger.error,
        )
        return False
    start = time.monotonic()
    if wait(state, host, settings):
        host.log_styled(restored_line(settings, cause, time.monotonic() - start), fg="red", log_func=logger.error)
    else:
        host.log_styled(
            f"refused the new launch: {cause}; the files that served before were put back but did not start "
            "either (see above): fix the host, or the setting, and re-apply",
            fg="red",
            log_func=logger.error,
        )
    return False
