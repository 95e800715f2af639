"""A child process of the CLI (ssh, Caddy) with its last lines on stderr kept, and its end."""

from __future__ import annotations

import collections
import subprocess
import threading


class Child:
    """A child process of its own session (Ctrl-C reaches podkit, which then ends it) whose last
    lines on stderr are kept (``lines``); ``stop()`` ends it."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=20)
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr or ():  # stderr=PIPE: always a stream
            if line.strip():
                self.lines.append(line.strip())

    def stop(self) -> None:
        end_child(self.proc)


def end_child(proc: subprocess.Popen) -> None:
    """End a child of this process: SIGTERM, then SIGKILL after 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
