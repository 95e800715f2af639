"""The cage model-written code runs in: one command under bubblewrap (``bwrap``), in new namespaces.

What isolates what (:func:`argv` builds the command line):

- ``--unshare-all``: new user, mount, PID, network, IPC, UTS and cgroup namespaces. The network
  namespace holds only its own loopback, so nothing on the controller or beyond is reachable; the
  PID namespace and its own ``--proc /proc`` hide every controller process (no
  ``/proc/<ppid>/environ``).
- A new root holding only ``/usr`` (with the ``/bin``, ``/lib*`` links into it), this Python's
  prefix and the loader's ``/etc/ld.so.cache``, read-only; the workspace, read-write, at
  ``/workspace``; an empty ``/tmp``; a minimal ``/dev``. No home, no rest of ``/etc``, no project
  folder, no secrets.
- ``--clearenv`` then a four-variable environment; bwrap itself is started with a minimal
  environment too, since its process is PID 1 in the cage and its ``/proc/1/environ`` is readable.
- ``--cap-drop ALL``: run as root, bwrap leaves every capability in the cage, enough to remount a
  read-only bind read-write; dropped, the binds stay read-only.
- ``--die-with-parent``: when the time limit kills bwrap, everything in the cage dies with it;
  ``--new-session`` and stdin from ``/dev/null``: no access to the controller's terminal.

There is no fallback: without a bwrap that starts, :func:`run` raises :class:`CageUnavailable`
(a one-line reason and its fix) and runs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORKSPACE = "/workspace"  # where the workspace appears in the cage
#: The cage's whole environment.
CAGE_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORKSPACE, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
#: bwrap's own environment (its process is readable from inside the cage).
BWRAP_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
NOT_RUN = "model-written code was not run"
_working: set[str] = set()  # bwrap binaries that started a cage in this process


class CageUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces; the message is one line naming the fix."""


def python() -> str:
    """This interpreter's real file (a venv's ``python`` is a link to it); the cage runs it."""
    return os.path.realpath(sys.executable)


def python_binds() -> list[str]:
    """The folders the interpreter needs besides ``/usr``: its prefix (stdlib, libpython) and its own folder."""
    wanted = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)} | {os.path.dirname(python())}
    kept = sorted(p for p in wanted if p != "/" and not _under(p, "/usr"))
    return [p for p in kept if not any(_under(p, other) for other in kept if other != p)]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _system_links() -> list[str]:
    """``/bin``, ``/lib``... as on this machine: the same link into /usr, or a read-only bind."""
    args: list[str] = []
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def argv(workspace: Path, command: list[str], bwrap: str = "bwrap") -> list[str]:
    """The bwrap command line that runs ``command`` in ``/workspace`` (``workspace``, read-write)."""
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for name, value in CAGE_ENV.items():
        args += ["--setenv", name, value]
    args += ["--ro-bind", "/usr", "/usr", *_system_links(), "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for folder in python_binds():
        args += ["--ro-bind", folder, folder]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += ["--bind", str(workspace), WORKSPACE, "--chdir", WORKSPACE, "--", *command]
    return args


def problem() -> str | None:
    """Why the cage cannot start here (one line with the fix), or None when it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            f"eval needs bubblewrap to cage model-written code and bwrap is not on PATH; "
            f"install it (apt-get install bubblewrap, or scripts/setup.sh); {NOT_RUN}"
        )
    if bwrap in _working:
        return None
    with tempfile.TemporaryDirectory(prefix="podkit-cage-") as tmp:
        try:
            proc = subprocess.run(
                argv(Path(tmp), [python(), "-I", "-c", ""], bwrap),
                env=BWRAP_ENV,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
            failed = proc.returncode != 0 and (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[0]
        except (OSError, subprocess.TimeoutExpired) as exc:
            failed = f"{type(exc).__name__}: {exc}"
    if failed:
        return (
            f"eval's cage did not start ({bwrap}: {failed}); allow unprivileged user namespaces "
            f"(sysctl kernel.unprivileged_userns_clone=1, on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) "
            f"or run eval where namespaces are permitted; {NOT_RUN}"
        )
    _working.add(bwrap)
    return None


def run(workspace: Path, command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``command`` in the cage, its output captured, killed (with all it started) after ``timeout``
    seconds (TimeoutExpired). CageUnavailable, with nothing run, when the cage cannot start."""
    reason = problem()
    if reason:
        raise CageUnavailable(reason)
    return subprocess.run(
        argv(workspace, command, shutil.which("bwrap") or "bwrap"),
        env=BWRAP_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
