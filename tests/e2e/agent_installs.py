"""The real coding agents and clients, pinned, each installed the way its users install it into a folder of its own.

npm agents go into an ``npm --prefix`` folder, PyPI agents and the clients (Hermes Agent, llm, the
Agents SDK) into a venv, all under a cache folder keyed by package and version
(``$PODKIT_AGENT_CACHE``, default ``~/.cache/podkit/e2e-agents``), so a second run on the same machine
reuses them; npm's and pip's own caches are used as they are. scripts/test.sh begins them before its
setup (the setup's pip keeps one core busy and leaves the other waiting), with the system's python3:
this module needs only the standard library. A folder
counts as installed only once its marker file is written after the last install step worked (a venv
cannot be renamed into place: its scripts name their folder), so a killed run's half install is
started again; a lock file keeps two sessions from installing the same one at once.

    python3 -m tests.e2e.agent_installs [NAME...]   # install (or find) them (all: none named), print seconds each
"""

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

INSTALL_TIMEOUT = 900
#: pip as it installs into the PyPI agents' and the clients' venvs: quiet, and without byte-compiling
#: every module it unpacks (each program imports a small part of what it installs)
PIP_INSTALL = ["install", "--quiet", "--no-compile", "--disable-pip-version-check"]
MARKER = ".podkit-installed"


@dataclass(frozen=True)
class Agent:
    """+ package: the npm or PyPI name; + version: pinned exactly; + command: the program it installs;
    + via: "npm" or "pip"; + extra: more pinned requirements installed beside it (a client whose own
    requirements leave ``openai`` floating)."""

    package: str
    version: str
    command: str
    via: str
    extra: tuple[str, ...] = ()
    #: the Python the venv is made with, where the agent needs another than this one (``"3.12"``)
    python: str = ""

    @property
    def key(self) -> str:
        return "+".join([f"{self.package.replace('/', '+')}@{self.version}", *self.extra])

    def folder(self, root: Path) -> Path:
        return root / self.key

    @property
    def relative_program(self) -> str:
        return f"node_modules/.bin/{self.command}" if self.via == "npm" else f"bin/{self.command}"

    def program(self, root: Path) -> Path:
        return self.folder(root) / self.relative_program

    def installed(self, root: Path) -> bool:
        return (self.folder(root) / MARKER).exists() and self.program(root).exists()

    def install_argv(self, into: Path) -> list[list[str]]:
        if self.via == "npm":
            # --prefix: the folder of its own; no audit/fund round trips; scripts run (Claude Code's and
            # goose's binaries come from their postinstall or optional packages)
            return [
                [
                    "npm",
                    "install",
                    "--prefix",
                    str(into),
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    f"{self.package}@{self.version}",
                ]
            ]
        # the venv without a pip of its own (ensurepip costs 3 CPU-seconds a venv): this interpreter's
        # pip installs into it (--python); what the agent imports is the same
        python = str(into / "bin" / "python")
        maker = interpreter(self.python)
        return [
            [maker, "-m", "venv", "--without-pip", str(into)],
            [
                maker,
                "-m",
                "pip",
                "--python",
                python,
                *PIP_INSTALL,
                f"{self.package}=={self.version}",
                *self.extra,
            ],
        ]


#: Every agent the e2e layer runs, pinned. Versions checked with ``npm view NAME@VER version`` and
#: ``pip index versions NAME``. Qwen Code: 0.15.10 is the newest that runs on node 20 (later ones need
#: node 22). goose's npm package @aaif/goose 0.20.1 bundles the goose binary.
AGENTS: dict[str, Agent] = {
    "codex": Agent("@openai/codex", "0.171.0", "codex", "npm"),
    "opencode": Agent("opencode-ai", "1.18.33", "opencode", "npm"),
    "continue": Agent("@continuedev/cli", "1.5.47", "cn", "npm"),
    "qwen": Agent("@qwen-code/qwen-code", "0.15.10", "qwen", "npm"),
    "goose": Agent("@aaif/goose", "0.20.1", "goose", "npm"),
    "claude": Agent("@anthropic-ai/claude-code", "2.1.332", "claude", "npm"),
    "aider": Agent("aider-chat", "0.86.2", "aider", "pip"),
    "mini-swe-agent": Agent("mini-swe-agent", "2.4.6", "mini", "pip"),
    "pi": Agent("@mariozechner/pi-coding-agent", "0.73.1", "pi", "npm"),
    "cline": Agent("cline", "3.0.65", "cline", "npm"),
    "kilo": Agent("@kilocode/cli", "7.7.7", "kilo", "npm"),
    "gemini": Agent("@google/gemini-cli", "0.61.0", "gemini", "npm"),
    "openhands": Agent("openhands", "1.16.0", "openhands", "pip", python="3.12"),
    "gptme": Agent("gptme", "0.35.1", "gptme", "pip"),
    "smolagents": Agent("smolagents[toolkit]", "1.26.0", "smolagent", "pip", extra=("openai==3.54.0",)),
    "litellm": Agent("litellm[proxy]", "1.108.7", "litellm", "pip"),
}

#: The clients podkit's users run, pinned: their config formats and flags are what tests/e2e/test_clients.py
#: checks. llm and openai-agents leave openai floating: pinned to podkit's own. The Agents SDK has no
#: program of its own: its venv's python runs the test's program.
CLIENTS: dict[str, Agent] = {
    "hermes": Agent("hermes-agent", "0.19.0", "hermes", "pip"),
    "llm": Agent("llm", "0.36", "llm", "pip", extra=("openai==3.54.0",)),
    "agents": Agent("openai-agents", "0.24.0", "python", "pip", extra=("openai==3.54.0",)),
}


def interpreter(version: str) -> str:
    """The Python that makes a venv: this one, or ``pythonVERSION`` on PATH or under pyenv's versions
    (OpenHands asks for exactly 3.12; its users get it from uv, which downloads one)."""
    if not version or sys.version.startswith(version + "."):
        return sys.executable
    # pyenv's own folder first (PYENV_ROOT, else ~/.pyenv): its shim on PATH fails unless that
    # version is selected
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pyenv = sorted((root / "versions").glob(f"{version}.*/bin/python{version}"))
    return str(pyenv[-1]) if pyenv else shutil.which(f"python{version}") or f"python{version}"


def named(name: str) -> Agent:
    """The agent or client of that name."""
    return AGENTS[name] if name in AGENTS else CLIENTS[name]


def cache_root() -> Path:
    root = os.environ.get("PODKIT_AGENT_CACHE") or Path.home() / ".cache" / "podkit" / "e2e-agents"
    return Path(root)


@dataclass
class Installed:
    """+ program: the agent's executable, or None; + seconds: this run's install time (0.0 when reused);
    + error: why it did not install."""

    program: Path | None
    seconds: float
    reused: bool
    error: str = ""


class _Install:
    """One agent's install under way: its lock held, its commands run one after another."""

    def __init__(self, agent: Agent, root: Path):
        self.agent, self.root = agent, root
        self.folder = agent.folder(root)
        self.lock = open(root / (agent.key + ".lock"), "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)  # another session installing it: wait, then reuse
        self.started = time.monotonic()
        self.steps = list(agent.install_argv(self.folder))
        self.proc: subprocess.Popen | None = None
        self.output = ""

    def start(self):
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self._next()

    def _next(self):
        argv = self.steps.pop(0)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def finish(self) -> Installed:
        """Run the remaining steps; mark the folder installed once they all worked."""
        try:
            while True:
                output, _ = self.proc.communicate(timeout=INSTALL_TIMEOUT)
                self.output += output
                if self.proc.returncode != 0:
                    return Installed(None, self._seconds(), False, self.output[-3000:])
                if not self.steps:
                    break
                self._next()
            if not self.agent.program(self.root).exists():
                return Installed(None, self._seconds(), False, f"installed, but no {self.agent.command} in it")
            (self.folder / MARKER).write_text(f"{self.agent.package} {self.agent.version}\n")
            return Installed(self.agent.program(self.root), self._seconds(), False)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return Installed(None, self._seconds(), False, f"install ran past {INSTALL_TIMEOUT} s")
        finally:
            self.lock.close()

    def _seconds(self) -> float:
        return round(time.monotonic() - self.started, 1)


def install(names: list[str], root: Path | None = None) -> dict[str, Installed]:
    """Install (or find installed) the named agents, all at once: npm and pip spend most of their time
    waiting on the network and unpacking, so running them side by side is faster even on two cores."""
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    result: dict[str, Installed] = {}
    running: dict[str, _Install] = {}
    for name in sorted(names):  # one order for every session: their locks cannot deadlock
        agent = named(name)
        if agent.installed(root):
            result[name] = Installed(agent.program(root), 0.0, True)
            continue
        pending = _Install(agent, root)
        if agent.installed(root):  # installed by another session while this one waited for the lock
            pending.lock.close()
            result[name] = Installed(agent.program(root), 0.0, True)
            continue
        pending.start()
        running[name] = pending
    for name, pending in running.items():
        result[name] = pending.finish()
    return result


if __name__ == "__main__":
    for name, got in install(sys.argv[1:] or [*AGENTS, *CLIENTS]).items():
        how = "reused" if got.reused else f"installed in {got.seconds} s"
        print(f"{name:15} {named(name).key}: {how if got.program else got.error}")
