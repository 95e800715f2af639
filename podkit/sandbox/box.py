"""The local sandbox "pod": a private sshd on loopback, a volume folder and a tiny model.

It lets anyone without a GPU box see the whole product work: the deploy runs
over real SSH against this machine, installs the CPU build of vLLM into the
sandbox volume's venv, and serves a tiny random-weight Qwen2-style model that
``podkit.sandbox.tinymodel`` writes locally (no hub access). Its state lives in one
git-ignored folder (``.sandbox/`` unless ``$PODKIT_SANDBOX_DIR`` says otherwise):

    sshd/            host key, client key, known_hosts, sshd_config, pid, log
    volume/          the pod's persistent volume (podkit keeps everything under volume/podkit)
    volume/models/tiny-coder/   the checkpoint the sandbox serves
    api_key          the sandbox's API key (0600), used by the deploy and cli.py verify
    sandbox.json     ports and paths, read by inventories/sandbox.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podkit import PROJECT_ROOT
from podkit.sandbox.sshd import PrivateSshd, free_port
from podkit.sandbox.tinymodel import write_tiny_model

SERVED_MODEL_NAME = "tiny-coder"
ENV_DIR = "PODKIT_SANDBOX_DIR"


@dataclass
class Applied:
    """One run of the deploy against the sandbox, with the remote sessions it cost."""

    rc: int
    stdout: str
    stderr: str
    seconds: float
    sessions: list[str] = field(default_factory=list)

    @property
    def results(self) -> dict[str, Any]:
        return json.loads(self.stdout)["results"] if self.stdout.strip() else {}

    def changed(self, host: str | None = None) -> list[str]:
        """The operations that changed something (on ``host`` only, when given)."""
        return [
            op["name"]
            for op in self.results.get("operations", [])
            if op["success"] and (host is None or host in op["success"])
        ]

    def unchanged(self) -> list[str]:
        return [op["name"] for op in self.results.get("operations", []) if op["no_change"]]


class SandboxError(RuntimeError):
    """The sandbox is not usable as asked; the message says what to run."""


def default_state_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or PROJECT_ROOT / ".sandbox").absolute()


class Sandbox:
    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = Path(state_dir or default_state_dir()).absolute()
        self.sshd = PrivateSshd(self.state_dir / "sshd")

    volume = property(lambda self: self.state_dir / "volume")
    model_dir = property(lambda self: self.volume / "models" / SERVED_MODEL_NAME)
    state_file = property(lambda self: self.state_dir / "sandbox.json")
    api_key_file = property(lambda self: self.state_dir / "api_key")
    supervisord_conf = property(lambda self: self.volume / "podkit" / "bin" / "supervisord.conf")
    supervisorctl_bin = property(lambda self: self.volume / "podkit" / "venv" / "bin" / "supervisorctl")

    def _saved(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def up(self) -> dict[str, Any]:
        """Start (or find) the sandbox; idempotent. Returns the inventory's host data."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.volume.mkdir(parents=True, exist_ok=True)
        write_tiny_model(self.model_dir)
        ssh = self.sshd.start()
        saved = self._saved() or {}
        ports = {name: saved.get(name) or free_port() for name in ("edge_port", "vllm_port")}
        state = {**ports, "ssh": ssh.pyinfra_data()}
        self.state_file.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        return self.host_data()

    def host_data(self) -> dict[str, Any]:
        """pyinfra host data for the sandbox: SSH access plus what differs from group_data."""
        saved = self._saved()
        if saved is None or not self.sshd.status()["running"]:
            raise SandboxError(f"the sandbox in {self.state_dir} is not up: run podkit sandbox up")
        return {
            **saved["ssh"],
            "podkit_volume": str(self.volume),
            "podkit_api_key_file": str(self.api_key_file),
            "vllm_model": str(self.model_dir),
            "vllm_served_model_name": SERVED_MODEL_NAME,
            "podkit_edge_port": saved["edge_port"],
            "vllm_port": saved["vllm_port"],
        }

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a process that should see this sandbox (not the default one)."""
        # the controller's state for this sandbox (its edge CA when TLS is on) stays with the sandbox
        controller = {"PODKIT_STATE_DIR": str(self.state_dir / "controller")}
        env = {**os.environ, ENV_DIR: str(self.state_dir), "PYTHONUNBUFFERED": "1", **controller, **extra}
        env.pop("PODKIT_API_KEY", None)
        return env

    def apply(
        self, *args: str, inventory: str = "inventories/sandbox.py", timeout: float = 1800, env: dict | None = None
    ) -> Applied:
        """Run ``pyinfra -y --json INVENTORY deploy.py ARGS`` from the project root, counting remote sessions."""
        before = len(self.sshd.sessions())
        start = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "pyinfra"), "-y", "--json", inventory, "deploy.py", *args],
            cwd=PROJECT_ROOT,
            env=self.env(**(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        applied = Applied(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
        applied.sessions = self.sshd.sessions()[before:]
        return applied

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``python cli.py ARGS`` from the project root against this sandbox."""
        return subprocess.run(
            [sys.executable, "cli.py", *args],
            cwd=PROJECT_ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def supervisorctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess | None:
        if not (self.supervisord_conf.exists() and self.supervisorctl_bin.exists()):
            return None
        return subprocess.run(
            [str(self.supervisorctl_bin), "-c", str(self.supervisord_conf), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop_serving(self) -> bool:
        """Stop supervisord, vLLM and the edge (and wait until they are gone); False when never started."""
        pid_file = self.volume / "podkit" / "run" / "supervisord.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            pid = None
        stopped = self.supervisorctl("shutdown")
        # shutdown returns once supervisord is asked; wait until it (after its programs) is gone
        deadline = time.monotonic() + 90
        while pid and stopped is not None and time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.2)
        return stopped is not None

    def down(self) -> dict[str, Any]:
        """Stop supervisord (vLLM and the edge) and the sshd; the volume (venv, model) stays."""
        stopped = self.stop_serving()
        self.sshd.stop()
        return {"sshd": "stopped", "supervisord": "stopped" if stopped else "never started"}

    def status(self) -> dict[str, Any]:
        saved = self._saved() or {}
        sshd = self.sshd.status()
        status = self.supervisorctl("status", timeout=30)
        programs = "not installed" if status is None else (status.stdout.strip() or status.stderr.strip())
        return {
            "state_dir": str(self.state_dir),
            "sshd": sshd,
            "edge_port": saved.get("edge_port"),
            "vllm_port": saved.get("vllm_port"),
            "base_url": f"http://127.0.0.1:{saved['edge_port']}/v1" if saved.get("edge_port") else None,
            "volume": str(self.volume),
            "supervisord": programs,
        }
