"""The preflight: stop a host that cannot work before anything is installed or downloaded."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from podkit.text import clean


def _refuse(state, host, problems: list[str]) -> bool:
    for problem in problems:
        host.log_styled(clean(f"preflight: {problem}"), fg="red", log_func=logger.error)
    return False


@operation(is_idempotent=False)
def checks(problems: list[str], summary: str = ""):
    """
    Ensure the host can be converged; fail it (only it) with each reason and fix.

    + problems: what is wrong with this host, each naming its fix (empty: nothing)
    + summary: the plan in one line, shown when the host passes

    **Example:**

    .. code:: python

        preflight.checks(
            name="Ensure the host can serve the model before anything is installed",
            problems=host_problems(settings, pod),
        )
    """
    if not problems:
        host.noop(summary or "python3, the volume, the port and the GPUs are usable")
        return
    yield FunctionCommand(_refuse, (problems,), {})
