"""One non-interactive turn of a real coding agent, set up only from ``podkit client --for AGENT --json``.

A setup is what a new user does with that JSON: each file written where its ``path`` says (``~`` the
fresh HOME, a relative path the project folder the agent runs in), each ``env`` value evaluated by sh
in order (``"$(cat KEYFILE)"`` reads the key there, never here), and the ``run`` line run by sh with
the prompt in place of ``PROMPT`` and the agent's installed folder first on PATH (the line holds
``args``). What only the test adds is said where it
happens: a tool named ``get_weather`` where the agent can be given one, and bounds on the turn.

The runs start together and are waited for together (:func:`start`, :meth:`Turn.wait`): each agent
spends most of a turn waiting on the one server, so side by side they take little longer than the
slowest alone.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: What every agent is asked. The sandbox's tiny model answers any request that offers tools with
#: ``get_weather({"city": "Paris", "unit": "celsius"})``, whatever the tools are.
PROMPT = "What is the weather in Paris? Use the get_weather tool."
#: The most one turn may take; every agent is bounded well below it by its own flags or a stop. A
#: hang guard, not a figure: the e2e layer runs every agent's two turns side by side (about 40
#: processes) on two cores shared with three other sessions: on CI the whole set once took 322 s.
TURN_TIMEOUT = 600


@dataclass
class Setup:
    """+ home: the fresh HOME; + work: the project folder; + env: the whole environment the agent
    gets (the rendered ``env`` evaluated by sh over a clean base); + argv: sh running the ``run`` line."""

    home: Path
    work: Path
    env: dict[str, str]
    argv: list[str]


def place_files(rendered: dict, home: Path, work: Path) -> list[Path]:
    """Write each rendered file where its ``path`` says; return the paths written."""
    written = []
    for item in rendered["files"]:
        path = item["path"]
        target = home / path[2:] if path.startswith("~/") else work / path
        assert not Path(path).is_absolute(), path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(item["content"])
        written.append(target)
    return written


def evaluate_env(rendered_env: dict[str, str], base: dict[str, str], cwd: Path) -> dict[str, str]:
    """The environment after ``export NAME=VALUE`` for each rendered variable, in order, in sh: the
    values are shell words (``"$(cat FILE)"``, ``"$PODKIT_API_KEY"``) and sh is what a user has."""
    script = "".join(f"export {name}={value}\n" for name, value in rendered_env.items()) + "exec env -0\n"
    proc = subprocess.run(["sh", "-c", script], env=base, cwd=cwd, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    pairs = [entry.split("=", 1) for entry in proc.stdout.decode().split("\0") if "=" in entry]
    return {name: value for name, value in pairs if name not in ("PWD", "SHLVL", "_", "OLDPWD")}


def run_line(rendered: dict, prompt: str, extra: list[str]) -> str:
    """The ``once`` lines, each of which must work, then the ``run`` line as sh runs it (``~``
    expanded, as a user's shell does), ``prompt`` in place of ``"PROMPT"`` and the test's own bounds
    (``extra``) after it. The line must hold ``args``."""
    line = rendered["run"]
    assert line.count('"PROMPT"') == 1, line
    words = shlex.split(line)
    args = rendered["args"]
    assert not args or any(words[i : i + len(args)] == args for i in range(len(words))), (args, words)
    once = "".join(f"{command} || exit 97\n" for command in rendered.get("once") or [])
    return once + "exec " + line.replace('"PROMPT"', shlex.join([prompt, *extra]))


def temporary(folder: Path) -> dict[str, str]:
    """TMPDIR (and tmux's own variable) in a folder of ``folder``'s, made here."""
    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp), "TMUX_TMPDIR": str(tmp)}


def setup(rendered: dict, program: Path, folder: Path, spec, key_file: str | None = None) -> Setup:
    """A fresh HOME and project folder under ``folder`` configured from ``rendered``, plus what ``spec``
    (:class:`tests.e2e.agent_specs.Spec`) adds. With ``key_file``, the rendered env reads the key from
    that file instead (a wrong key)."""
    home, work = folder / "home", folder / "work"
    home.mkdir(parents=True)
    work.mkdir()
    place_files(rendered, home, work)
    added = spec.prepare(folder, home, work)
    base = {
        # the agent's temporary files (Claude Code's, tmux's, OpenHands' editor history) in its folder,
        # not the machine's /tmp
        **temporary(folder),
        # the agent's own folder first (npm's bin and node, or the venv), then the system's
        "PATH": f"{program.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }
    env_words = dict(rendered["env"])
    if key_file is not None:
        env_words = {name: value.replace(_key_file(rendered), key_file) for name, value in env_words.items()}
        added = added | spec.wrong_extra_env
    env = evaluate_env(env_words, base, work) | added
    return Setup(home, work, env, ["sh", "-c", run_line(rendered, PROMPT, spec.extra)])


def _key_file(rendered: dict) -> str:
    """The key file the rendered env reads (``"$(cat FILE)"``): one file, however many variables
    carry the key (each stands alone in the JSON: ``PODKIT_API_KEY``, ``OPENAI_API_KEY``, ...)."""
    (path,) = {
        shlex.split(v.removeprefix('"$(cat ').removesuffix(')"'))[0] for v in rendered["env"].values() if "$(cat " in v
    }
    return path


def stop_group(proc: subprocess.Popen) -> None:
    """A process started in a session of its own and whatever it started (MCP servers, its own
    children): TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=10)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def stop_left(home: Path) -> list[int]:
    """Every process still running with ``home`` as its HOME once its turn ended, killed: what an
    agent left behind outside its session (Cline's hub daemon detaches into one of its own and
    served on, spending CPU, for the rest of the suite and after). The pids killed."""
    marker = b"\0HOME=" + str(home).encode() + b"\0"
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                env = b"\0" + handle.read()
        except OSError:
            continue
        if marker in env:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except ProcessLookupError:
                pass
    return killed


@dataclass
class Served:
    """A program a turn needs running beside it (the LiteLLM proxy): + url: where it answers."""

    url: str
    proc: subprocess.Popen
    folder: Path

    def stop(self) -> None:
        stop_group(self.proc)


def serve(rendered: dict, program: Path, folder: Path, port: int, added: dict[str, str], wrap=None) -> Served:
    """``rendered``'s ``run`` line started as a user starts a server from podkit's output alone (its
    files placed, its env evaluated), its ``--port`` the free ``port`` given; ready once its
    LiteLLM-style ``/health/liveliness`` answers (a :class:`Served`, or AssertionError with its log)."""
    home, work = folder / "home", folder / "work"
    home.mkdir(parents=True)
    work.mkdir()
    place_files(rendered, home, work)
    base = {
        "PATH": f"{program.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **temporary(folder),
    }
    env = evaluate_env(rendered["env"], base, work) | added
    words = shlex.split(rendered["run"])
    at = words.index("--port") + 1
    line = rendered["run"].replace(f"--port {words[at]}", f"--port {port}")
    argv = ["sh", "-c", "exec " + line]
    if wrap is not None:
        argv, env = wrap(argv, env)
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(
        argv, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
    )
    served = Served(f"http://127.0.0.1:{port}", proc, folder)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(served.url + "/health/liveliness", timeout=2):
                return served
        except OSError:
            time.sleep(0.5)
    served.stop()
    raise AssertionError(f"{words[0]} did not start: {(folder / 'server.log').read_text(errors='replace')[-3000:]}")


@dataclass
class Turn:
    """One agent's turn under way, then its outcome: + rc (None: ended by a signal, at the timeout or
    a stop); + stopped: ended by the test once its ``stop_when`` held."""

    name: str
    setup: Setup
    proc: subprocess.Popen
    started: float
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    stopped: bool = False
    timed_out: bool = False
    left: list[int] = field(default_factory=list)  # what outlived the turn, stopped after it

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def wait(self, timeout: float = TURN_TIMEOUT, stop_when: Callable[[Path], bool] | None = None) -> Turn:
        """Wait for the turn to end, at most ``timeout`` seconds from its start; with ``stop_when`` (read
        from the turn's folder), stop it as soon as that holds: for an agent with no turn limit, which
        answers the tiny model's next identical call for ever."""
        if self.seconds:
            return self
        folder = self.setup.home.parent
        while self.proc.poll() is None:
            if time.monotonic() - self.started > timeout:
                self.timed_out = True
                self._stop()
                break
            if stop_when is not None and stop_when(folder):
                self.stopped = True
                self._stop()
                break
            time.sleep(0.5)
        self.rc = None if self.proc.returncode < 0 else self.proc.returncode
        self.seconds = round(time.monotonic() - self.started, 1)
        self.left = stop_left(self.setup.home)
        self.stdout = (folder / "stdout.txt").read_text(errors="replace")
        self.stderr = (folder / "stderr.txt").read_text(errors="replace")
        return self

    def _stop(self):
        stop_group(self.proc)


def start(name: str, s: Setup) -> Turn:
    """Start the turn; its output goes to files beside HOME (no pipe to fill while others run)."""
    folder = s.home.parent
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen(
            s.argv, env=s.env, cwd=s.work, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
    return Turn(name, s, proc, time.monotonic())
