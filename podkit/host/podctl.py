"""podctl seen from the controller: the one command that runs it on a host, and the one reader of
its answer.

podctl (``podkit/remote/podctl/``, put together into one program by :func:`podctl_source`)
travels inline with each remote command and prints one line of JSON, its answer, last.
:func:`read_answer` is the only place that line is read: every podctl action
(probe, wait, describe, cache, fetch-status, reap, supervise, status, down) comes back through it,
and anything else that comes back (no python3, a shell's noise, a traceback, no output at all) is
a :class:`PodctlError` in one style, naming the action and what came back instead.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from podkit.host.shipped import program

_HEREDOC = "PODKIT_PODCTL_EOF"
#: What the command prints itself when the host has no python3 to run podctl with.
NO_PYTHON = {"podctl": 0, "error": "python3 not found on PATH"}
PYTHON_FIX = "podkit needs python3 on the host (Debian/Ubuntu: apt-get install -y python3 python3-venv)"


class PodctlError(RuntimeError):
    """podctl gave no answer podkit can read; the message says what came back instead."""


def podctl_source() -> str:
    """podctl as it runs on a host: one program put together from ``podkit/remote/podctl/``."""
    return program("podkit.remote.podctl")


def podctl_command(action: str, cfg: dict[str, Any]) -> str:
    """One shell command that runs podctl's ``ACTION`` with ``cfg`` on the host.

    The program travels in a quoted heredoc, so nothing in it is expanded; ``cfg``
    holds paths and names only, never a secret.
    """
    source = podctl_source()
    assert _HEREDOC not in source
    return (
        f"command -v python3 >/dev/null 2>&1 || {{ echo {shlex.quote(json.dumps(NO_PYTHON))}; exit 0; }}\n"
        f"python3 - {shlex.quote(action)} {shlex.quote(json.dumps(cfg, sort_keys=True))} <<'{_HEREDOC}'\n"
        f"{source}\n{_HEREDOC}"
    )


def read_answer(action: str, stdout: str, stderr: str = "", status: int | None = None, **decode: Any) -> dict[str, Any]:
    """podctl ``action``'s answer: the JSON object on the last line of ``stdout``.

    + action: the podctl action that ran, named in the error
    + stdout, stderr, status: what the remote command gave back (stderr and a non-zero status
      only say more when there is no answer)
    + decode: keywords for ``json.loads`` (``podkit status`` reads every number as a reading)

    Raises :class:`PodctlError` when the last line is not JSON (saying the last line that came
    back, on stderr first: a traceback's last line), is JSON but not an object, or is the
    command's own word that the host has no python3.

    **Example:**

    .. code:: python

        answer = read_answer("cache", result.stdout, result.stderr, result.status)
    """
    lines = stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1], **decode)
    except (IndexError, ValueError):
        raise PodctlError(no_answer(action, stdout, stderr, status)) from None
    if not isinstance(answer, dict):
        raise PodctlError(f"podctl {action} answered something else: {lines[-1][:200]}")
    if answer.get("podctl") == 0:
        raise PodctlError(f"{answer.get('error') or 'podctl could not run'}: {PYTHON_FIX}")
    return answer


def no_answer(action: str, stdout: str, stderr: str, status: int | None) -> str:
    """What came back instead of an answer, in one line: how podctl exited when it failed, and the
    last line it left (on stderr first: a traceback's last line says what went wrong)."""
    said = last_line(stderr) or last_line(stdout)
    if status:
        return f"podctl {action} exited {status} without an answer" + (f": {said}" if said else "")
    return f"podctl {action} printed no JSON: {said}" if said else f"podctl {action} printed nothing"


def last_line(text: str) -> str:
    """The last line with anything on it (a traceback's says what went wrong), at most 200 characters."""
    found = [line.strip() for line in text.splitlines() if line.strip()]
    return found[-1][-200:] if found else ""
