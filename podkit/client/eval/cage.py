"""The cages model-written code and its tests run in: bubblewrap (``bwrap``) in new namespaces,
with the kernel's limits.

A task's tests run in one cage and the answer in another, two interpreters that share only two
pipes (:mod:`.caged` is what runs inside): the tests come from a pristine copy the answer never
sees, the answer's files are never collected as tests, and what the answer does to its own
interpreter (patch ``unittest``, exit early) cannot touch the tests' verdict.

What isolates what (:func:`argv` builds each command line):

- ``--unshare-all``: new user, mount, PID, network, IPC, UTS and cgroup namespaces. The network
  namespace holds only its own loopback, so nothing on the controller or beyond is reachable; the
  PID namespace and its own ``--proc /proc`` hide every controller process (no
  ``/proc/<ppid>/environ``).
- A new root holding only ``/usr`` (with the ``/bin``, ``/lib*`` links into it), the cage's Python's
  prefix and the loader's ``/etc/ld.so.cache``, read-only; the answer's files copied into a tmpfs
  of fixed size at ``/workspace`` (the tests' cage: the task's tests, read-only, at ``/tests``); a
  ``/tmp`` of the same size; a minimal ``/dev``; the root and ``/dev`` then remounted read-only.
  No home, no rest of ``/etc``, no project folder, no secrets. Files go in as copies through file
  descriptors (``--file``), so the cage needs no path to the controller's folders.
- Limits (:class:`Limits`), set by the first process inside the cage's own user namespace, so the
  process count is the cage's alone: processes (``RLIMIT_NPROC``), address space per process
  (``RLIMIT_AS``), bytes per file (``RLIMIT_FSIZE``), the workspace's and ``/tmp``'s size (tmpfs
  ``size=``), wall time and output (read as bytes, capped, decoded with replacement). Each limit
  hit is one line in the run's record. Run as root, the kernel never counts processes, so the
  cages then run as ``nobody`` (uid 65534), with a Python that ``nobody`` can read (this one, or
  ``/usr/bin/python3``).
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

import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

WORKSPACE = "/workspace"  # the answer's files, in the answer's cage
TESTS = "/tests"  # the task's pristine tests, read-only, in the tests' cage
SCRIPT = "/podkit/caged.py"  # what runs in both cages (:mod:`.caged`)
CAGED = Path(__file__).with_name("caged.py")
#: The cage's whole environment.
CAGE_ENV = {"PATH": "/usr/bin:/bin", "HOME": WORKSPACE, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
#: bwrap's own environment (its process is readable from inside the cage).
BWRAP_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
NOT_RUN = "model-written code was not run"
NOBODY = 65534  # the cages' user when eval runs as root
_working: set[str] = set()  # bwrap binaries that started a cage in this process


@dataclass(frozen=True)
class Limits:
    """What one run of a task's tests may use, in each of its two cages."""

    seconds: float = 60.0  # wall time, both cages together
    processes: int = 32  # processes and threads of the cage's user in the cage
    memory: int = 1 << 30  # bytes of address space per process
    file: int = 64 << 20  # bytes per file
    workspace: int = 128 << 20  # bytes in the workspace, and in /tmp
    output: int = 1 << 20  # bytes printed, all processes together

    def kernel(self) -> dict[str, int]:
        """The limits the cage's first process sets (:func:`.caged.set_limits`)."""
        return {k: v for k, v in asdict(self).items() if k in ("processes", "memory", "file", "workspace")}


class CageUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces; the message is one line naming the fix."""


def cage_user() -> int | None:
    """The uid the cages run as: ``nobody`` when eval runs as root (whose processes the kernel
    never counts against RLIMIT_NPROC), else the user's own (None)."""
    return NOBODY if os.geteuid() == 0 else None


def _readable_by_all(path: str) -> bool:
    """Every folder above ``path`` searchable, and ``path`` readable, by any user."""
    try:
        if not all(folder.stat().st_mode & stat.S_IXOTH for folder in Path(path).parents):
            return False
        return bool(os.stat(path).st_mode & stat.S_IROTH)
    except OSError:
        return False


def python() -> str:
    """The interpreter the cages run: this one's real file (a venv's ``python`` links to it), or
    ``/usr/bin/python3`` where the cages run as ``nobody`` and cannot read this one."""
    own = os.path.realpath(sys.executable)
    if cage_user() is None or _readable_by_all(own) and _readable_by_all(os.path.realpath(sys.base_prefix)):
        return own
    system = os.path.realpath("/usr/bin/python3")
    return system if _readable_by_all(system) else own


def python_binds() -> list[str]:
    """The folders the cage's interpreter needs besides ``/usr``: its prefix (stdlib, libpython)
    and its own folder."""
    interpreter = python()
    wanted = {os.path.dirname(interpreter)}
    if interpreter == os.path.realpath(sys.executable):
        wanted |= {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
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


def argv(
    command: list[str],
    limits: Limits,
    folder: str = WORKSPACE,
    files: dict[str, int] | None = None,
    writable: bool = True,
    script: int | None = None,
    bwrap: str = "bwrap",
) -> list[str]:
    """The bwrap command line that runs ``command`` in ``folder``: a tmpfs of ``limits.workspace``
    bytes holding ``files`` (name -> a file descriptor to copy), read-only unless ``writable``;
    ``script``: a descriptor of :mod:`.caged`, copied to ``/podkit/caged.py``."""
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    for name, value in CAGE_ENV.items():
        args += ["--setenv", name, value]
    args += ["--ro-bind", "/usr", "/usr", *_system_links(), "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for bound in python_binds():
        args += ["--ro-bind", bound, bound]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.workspace), "--tmpfs", "/tmp"]
    args += ["--size", str(limits.workspace), "--tmpfs", folder]
    for name, fd in (files or {}).items():
        args += ["--file", str(fd), f"{folder}/{name}"]
    if script is not None:
        args += ["--ro-bind-data", str(script), SCRIPT]
    if not writable:
        args += ["--remount-ro", folder]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", folder, "--", *command]
    return args


def _memfd(name: str, content: bytes) -> int:
    """A file descriptor holding ``content``, read from its start (what bwrap's ``--file`` copies)."""
    fd = os.memfd_create(name, 0)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _start(args: list[str], fds: list[int]) -> subprocess.Popen:
    user = cage_user()
    return subprocess.Popen(
        args,
        env=BWRAP_ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=fds,
        user=user,
        group=user,
        extra_groups=[] if user is not None else None,
    )


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
    try:
        proc = _start(argv([python(), "-I", "-S", "-c", ""], Limits(), bwrap=bwrap), [])
        _, err = proc.communicate(timeout=60)
        first = (err.decode(errors="replace").strip().splitlines() or [f"exit {proc.returncode}"])[0]
        failed = proc.returncode != 0 and first
    except (OSError, subprocess.SubprocessError) as exc:
        failed = f"{type(exc).__name__}: {exc}"
    if failed:
        return (
            f"eval's cage did not start ({bwrap}: {failed}); allow unprivileged user namespaces "
            f"(sysctl kernel.unprivileged_userns_clone=1, on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0) "
            f"or run eval where namespaces are permitted; {NOT_RUN}"
        )
    _working.add(bwrap)
    return None


def run_tests(
    answer: dict[str, bytes],
    tests: dict[str, bytes],
    modules: list[str],
    task_files: list[str],
    limits: Limits | None = None,
) -> dict[str, Any]:
    """The task's ``tests`` (name -> content, pristine) run in one cage against the ``modules`` of
    ``answer`` (name -> content: the answer's workspace) served from another; a file the answer
    adds beside ``task_files`` that a test runner would read is a cheat. Returns the verdict:
    passed, ran, the output, the limits hit and the cheats found, one line each. CageUnavailable,
    with nothing run, when the cage cannot start."""
    limits = limits or Limits()
    reason = problem()
    if reason:
        raise CageUnavailable(reason)
    bwrap = shutil.which("bwrap") or "bwrap"
    to_answer, to_tests, verdict = os.pipe(), os.pipe(), os.pipe()
    common = {"limits": limits.kernel(), "modules": modules}
    answer_files = {name: _memfd(name, content) for name, content in answer.items()}
    test_files = {name: _memfd(name, content) for name, content in tests.items()}
    scripts = [_memfd("caged.py", CAGED.read_bytes()) for _ in range(2)]
    config = {**common, "requests": to_answer[0], "replies": to_tests[1]}
    command = [python(), "-I", "-S", SCRIPT]
    started = time.monotonic()
    procs: list[subprocess.Popen] = []
    try:
        procs.append(
            _start(
                argv(
                    [*command, "answer", json.dumps(config)], limits, WORKSPACE, answer_files, True, scripts[0], bwrap
                ),
                [*answer_files.values(), scripts[0], to_answer[0], to_tests[1]],
            )
        )
        config = {**common, "requests": to_answer[1], "replies": to_tests[0], "verdict": verdict[1]}
        config["task_files"] = sorted(task_files)
        procs.append(
            _start(
                argv([*command, "tests", json.dumps(config)], limits, TESTS, test_files, False, scripts[1], bwrap),
                [*test_files.values(), scripts[1], to_answer[1], to_tests[0], verdict[1]],
            )
        )
    finally:
        for fd in [*answer_files.values(), *test_files.values(), *scripts, *to_answer, *to_tests, verdict[1]]:
            os.close(fd)
    try:
        outputs, said, hit = _collect(procs, verdict[0], limits, started)
    finally:
        for proc in procs:
            _end(proc)
    return _verdict(procs, outputs, said, hit, round(time.monotonic() - started, 2))


def _collect(procs: list[subprocess.Popen], verdict: int, limits: Limits, started: float):
    """Everything the cages print (at most ``limits.output`` bytes in all) and the tests' verdict,
    until the tests' cage is done, the time is up or the output too much; the limit hit, if any."""
    answer, tests = procs
    pipes = [answer.stdout, answer.stderr, tests.stdout, tests.stderr]
    assert all(pipes), "the cages are started with every stream piped"
    streams: dict[Any, bytes] = {pipe: b"" for pipe in pipes}
    said, printed, hit = b"", 0, None
    selector = selectors.DefaultSelector()
    for stream in streams:
        selector.register(stream, selectors.EVENT_READ)
    selector.register(verdict, selectors.EVENT_READ)
    open_ends = len(streams) + 1
    while open_ends:
        left = started + limits.seconds - time.monotonic()
        if left <= 0:
            hit = f"time limit hit: the tests did not finish in {limits.seconds:g} s"
            break
        for key, _ in selector.select(min(left, 1.0)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_ends -= 1
            elif key.fileobj == verdict:
                said = (said + chunk)[: 1 << 20]
            else:
                printed += len(chunk)
                streams[key.fileobj] = (streams[key.fileobj] + chunk)[-limits.output :]
        if printed > limits.output:
            hit = f"output limit hit: more than {limits.output >> 10} KiB printed; the cages were stopped"
            break
        if tests.poll() is not None and all(
            k.fileobj not in (verdict, tests.stdout) for k in selector.get_map().values()
        ):
            break  # the verdict is in: what the answer's cage still prints is of no use
    selector.close()
    os.close(verdict)
    return [streams[s].decode(errors="replace") for s in (answer.stdout, answer.stderr, tests.stderr)], said, hit


def _end(proc: subprocess.Popen) -> None:
    """Kill a cage (bwrap; --die-with-parent takes everything in it) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _verdict(procs, outputs: list[str], said: bytes, hit: str | None, seconds: float) -> dict[str, Any]:
    answer_out, answer_err, tests_err = outputs
    try:
        found = json.loads(said.decode(errors="replace"))
    except ValueError:
        found = None
    if not isinstance(found, dict):
        why = tests_err.strip().splitlines()[-1:] or [f"exit {procs[1].returncode}"]
        found = {"passed": False, "ran": 0, "output": "", "limits": [], "cheats": []}
        if not hit:
            hit = f"the tests ended without a verdict ({why[0][:300]})"
    limits = [str(line) for line in found.get("limits") or []] + ([hit] if hit else [])
    printed = (answer_out + answer_err).strip()
    output = str(found.get("output") or "") + (f"\n--- the answer printed:\n{printed[-3000:]}" if printed else "")
    return {
        "passed": bool(found.get("passed")) and not hit,
        "ran": found.get("ran") or 0,
        "output": output.strip()[-4000:],
        "limits": limits,
        "cheats": [str(line) for line in found.get("cheats") or []],
        "seconds": seconds,
    }
