"""A private OpenSSH server on loopback, for the local sandbox "pod" and the tests.

:class:`PrivateSshd` keeps everything it needs in one state directory: its own
host key, a client key allowed to log in, an ``sshd_config``, a pid file, a log
file and a ``known_hosts`` file pinning the host key. It runs the system
``sshd`` binary (OpenSSH 9.2 on Debian 12) in a session of its own, so the
server outlives the Python process that started it (``cli.py sandbox up``
returns while it keeps running) and a later process finds it again through
the pid file.

Typical use::

    sshd = PrivateSshd(Path(".sandbox/sshd"))
    host = sshd.start()                 # idempotent; returns an SshHost
    inventory = [("sandbox", host.pyinfra_data())]
    ...
    before = len(sshd.sessions())
    ...                                 # run a deploy
    remote_commands = len(sshd.sessions()) - before
    sshd.stop()                         # idempotent

The server logs at ``LogLevel VERBOSE`` to ``sshd.log`` in the state
directory. OpenSSH 9.2 writes exactly one ``Starting session:`` line per
session channel (one per remote command, one per SFTP session), which is
what :meth:`PrivateSshd.sessions` returns::

    Starting session: command for root from 127.0.0.1 port 37942 id 0
    Starting session: command on pts/0 for root from 127.0.0.1 port 37986 id 0
    Starting session: subsystem 'sftp' for root from 127.0.0.1 port 37964 id 0
    Starting session: shell on pts/0 for root from 127.0.0.1 port 37990 id 0

This module is pure logic: standard library only, no pyinfra, no click.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from podkit.sandbox import procs
from podkit.sandbox.procs import free_port
from podkit.sandbox.sshhost import SshHost

__all__ = ["SshHost", "PrivateSshd", "SshdError", "free_port"]

#: How long :meth:`PrivateSshd.start` waits for the server to answer, and
#: :meth:`PrivateSshd.stop` waits for it to exit.
DEADLINE_S = 5.0

#: The prefix of the one log line sshd writes per session channel.
SESSION_MARKER = "Starting session: "


class SshdError(RuntimeError):
    """The private sshd could not be configured, started or stopped.

    The message includes the relevant sshd output (``sshd -t`` errors or the
    tail of the server log).
    """


class PrivateSshd:
    """A private sshd whose keys, config, pid file and log live in ``state_dir``.

    Args:
        state_dir: directory for all state; created (mode 0700) if missing.
            Two instances on the same directory manage the same server.
        listen: the address sshd listens on (``ListenAddress``).
        port: a fixed port. ``None`` picks a free one on first start and keeps
            it in ``state_dir/port``, so the port stays the same across
            :meth:`stop`/:meth:`start` unless something else took it meanwhile.
        user: the login user reported in :class:`SshHost`; defaults to the
            current user. The client key may log in as any local user, but
            ``root`` only by key (``PermitRootLogin prohibit-password``).
        netns: run sshd inside this existing network namespace
            (``ip netns exec NAME sshd ...``). The namespace, its addresses and
            routes are the caller's business; ``listen`` should be an address
            inside it that this side can reach. Free ports cannot be probed
            from outside the namespace, so an automatic port there is 22.
        setup: shell commands run as root in a private mount namespace
            (``unshare --mount --propagation private``) just before sshd is
            exec'd there, e.g. mounts that only this server's sessions see:
            a tmpfs standing for a pod's wiped container disk, or a bind
            mount putting another folder at the volume's path.

    Files in ``state_dir``: ``ssh_host_ed25519_key[.pub]`` (host key),
    ``id_ed25519[.pub]`` (client key), ``authorized_keys``, ``sshd_config``,
    ``sshd.pid``, ``sshd.log``, ``known_hosts`` and ``port``.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        listen: str = "127.0.0.1",
        port: int | None = None,
        user: str | None = None,
        netns: str | None = None,
        setup: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        self.listen = listen
        self.port = port
        self.user = user or pwd.getpwuid(os.getuid()).pw_name
        self.netns = netns
        self.setup = setup

    # -- paths -----------------------------------------------------------

    @property
    def host_key(self) -> Path:
        """The server's private ed25519 host key."""
        return self.state_dir / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        """The client's private ed25519 key (no passphrase)."""
        return self.state_dir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    @property
    def config_file(self) -> Path:
        return self.state_dir / "sshd_config"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "sshd.pid"

    @property
    def log_file(self) -> Path:
        """The server log (``sshd -E``); appended to across restarts."""
        return self.state_dir / "sshd.log"

    @property
    def known_hosts_file(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def port_file(self) -> Path:
        return self.state_dir / "port"

    # -- setup -----------------------------------------------------------

    def ensure_keys(self) -> None:
        """Create the host key, the client key and ``authorized_keys``.

        Idempotent: existing keys are kept (a missing ``.pub`` is re-derived
        from its private key), so the host key and the client key stay the
        same across restarts. Private keys and ``authorized_keys`` are 0600.
        """
        self._ensure_state_dir()
        for key, comment in ((self.host_key, "podkit-sshd-host"), (self.client_key, "podkit-sshd-client")):
            pub = key.with_name(key.name + ".pub")
            if not key.exists():
                pub.unlink(missing_ok=True)
                _run([_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
            elif not pub.exists():
                out = _run([_tool("ssh-keygen"), "-y", "-f", str(key)])
                pub.write_text(out.strip() + "\n")
            key.chmod(0o600)
        client_pub = self.client_key.with_name(self.client_key.name + ".pub").read_text()
        _write_private(self.authorized_keys, client_pub.strip() + "\n")

    def write_config(self) -> Path:
        """Write ``sshd_config`` and validate it with ``sshd -t``.

        The port is the fixed ``port`` if given, else the one kept in
        ``state_dir/port`` (if it is still free, or held by this server), else
        a new free port; the choice is saved to ``state_dir/port``. Keys are
        created if missing. Returns the config path; raises :class:`SshdError`
        if ``sshd -t`` rejects the config.
        """
        self.ensure_keys()
        port = self._choose_port()
        lines = [
            "# Written by podkit.sshd; rewritten on every start.",
            f"ListenAddress {_listen_address(self.listen)}",
            f"Port {port}",
            f"HostKey {self.host_key}",
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "PrintLastLog no",
            "Subsystem sftp internal-sftp",
            # The default 10:30:100 drops parallel connections from pyinfra.
            "MaxStartups 100:30:200",
            "MaxSessions 100",
            # VERBOSE logs one "Starting session:" line per channel, see sessions().
            "LogLevel VERBOSE",
        ]
        self.config_file.write_text("\n".join(lines) + "\n")
        self.port_file.write_text(f"{port}\n")
        _ensure_privsep_dir()
        proc = subprocess.run(
            [self._sshd_binary(), "-t", "-f", str(self.config_file)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SshdError(f"sshd -t rejected {self.config_file}: {proc.stderr.strip() or proc.stdout.strip()}")
        return self.config_file

    # -- lifecycle -------------------------------------------------------

    def start(self) -> SshHost:
        """Start the server (or find it running) and return how to reach it.

        Idempotent: if the pid file names a live sshd of this state directory
        that answers with an SSH banner on its port, that server is reused
        (unless a different fixed ``port`` was asked for, which restarts it).
        Otherwise keys and config are (re)written and ``sshd -D -f CONFIG -E
        LOG`` is started in a new session, so it survives this process. Waits
        up to :data:`DEADLINE_S` for the banner, then writes ``known_hosts``.

        Raises :class:`SshdError` with the log tail if sshd exits (e.g. the
        fixed port is taken) or does not answer in time.
        """
        pid = self._alive_pid()
        if pid is not None:
            port = self._saved_port()
            if port is not None and (self.port in (None, port)) and self._answers(port):
                return self._host(port)
            self.stop()

        self.write_config()
        port = self._saved_port()
        assert port is not None
        self.pid_file.unlink(missing_ok=True)
        argv = [self._sshd_binary(), "-D", "-f", str(self.config_file), "-E", str(self.log_file)]
        if self.setup:
            script = f'set -e\n{self.setup}\nexec "$@"'
            argv = [_tool("unshare"), "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh", *argv]
        if self.netns:
            argv = [_tool("ip"), "netns", "exec", self.netns, *argv]
        # -D keeps sshd in the foreground so that an early exit (port taken,
        # bad key) is seen at once; detached, it outlives this Python process.
        proc = procs.spawn_detached(argv)
        deadline = time.monotonic() + DEADLINE_S
        while not (self._alive_pid() is not None and self._answers(port)):
            if proc.poll() is not None:
                procs.STARTED.pop(proc.pid, None)
                raise SshdError(f"sshd exited {proc.returncode} on start\n{self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                procs.send_signal(proc.pid, signal.SIGKILL)
                procs.reap(proc.pid)
                raise SshdError(
                    f"sshd did not answer on {self.listen}:{port} within {DEADLINE_S:.0f}s\n{self._log_tail()}"
                )
            time.sleep(0.02)
        return self._host(port)

    def stop(self) -> None:
        """Stop the server and the sessions still open on it.

        Idempotent: does nothing if no server of this state directory runs.
        Ends the processes under the listener first, deepest first (remote
        commands, then per-connection sshd processes), then the listener, each
        with SIGTERM and, after :data:`DEADLINE_S`, SIGKILL; waits for them to
        exit. Processes that remote commands detached (``setsid``, double
        fork) are not under the listener and keep running. Raises
        :class:`SshdError` if the listener survives SIGKILL.
        """
        pid = self._alive_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        if not procs.end_tree(pid, DEADLINE_S):
            raise SshdError(f"sshd (pid {pid}) did not exit")
        self.pid_file.unlink(missing_ok=True)

    def status(self) -> dict:
        """Return ``{"running", "pid", "port", "log"}`` without side effects.

        ``running`` means a live sshd of this state directory is named by the
        pid file (its port is not probed); ``pid`` is ``None`` otherwise.
        ``port`` is the saved port (also when stopped), or ``None`` before the
        first start. ``log`` is the log file path as a string.
        """
        pid = self._alive_pid()
        return {
            "running": pid is not None,
            "pid": pid,
            "port": self._saved_port(),
            "log": str(self.log_file),
        }

    def sessions(self) -> list[str]:
        """Return the ``Starting session:`` lines logged so far, oldest first.

        sshd logs one such line per session channel, when it starts the
        command: one per remote command (``exec``), one per SFTP session
        (``subsystem 'sftp'``), one per interactive shell. The line is written
        before the client's exec request is answered, so it is there once a
        client call like paramiko's ``exec_command`` returns. The log is kept
        across restarts: count a workload as the difference in ``len()``
        before and after it.
        """
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [line.strip() for line in text.splitlines() if SESSION_MARKER in line]

    # -- internals -------------------------------------------------------

    def _ensure_state_dir(self) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _sshd_binary(self) -> str:
        # sshd re-executes itself and insists on an absolute path.
        return _tool("sshd")

    def _saved_port(self) -> int | None:
        try:
            return int(self.port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _choose_port(self) -> int:
        if self.port is not None:
            return self.port
        saved = self._saved_port()
        if saved is not None:
            if self.netns or procs.port_free(self.listen, saved) or self._alive_pid() is not None:
                return saved
        if self.netns:
            return 22
        return free_port(self.listen)

    def _alive_pid(self) -> int | None:
        """The pid from the pid file if it is a live sshd run with our config."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        if not procs.alive(pid):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
        # The listener's title reads "sshd: /usr/sbin/sshd -f CONFIG -E LOG [listener] ...".
        if "sshd" not in cmdline or str(self.config_file) not in cmdline:
            return None
        return pid

    def _client_host(self) -> str:
        if self.listen in ("0.0.0.0", ""):
            return "127.0.0.1"
        if self.listen == "::":
            return "::1"
        return self.listen

    def _answers(self, port: int, timeout: float = 1.0) -> bool:
        """True if something on ``port`` greets with an SSH banner."""
        host = self._client_host()
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                return sock.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def _host(self, port: int) -> SshHost:
        host = self._client_host()
        pub = self.host_key.with_name(self.host_key.name + ".pub").read_text().split()
        name = host if port == 22 else f"[{host}]:{port}"
        self.known_hosts_file.write_text(f"{name} {pub[0]} {pub[1]}\n")
        return SshHost(
            hostname=host,
            port=port,
            user=self.user,
            key_file=self.client_key,
            known_hosts_file=self.known_hosts_file,
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_file})"
        return "\n".join(text.splitlines()[-lines:])


# -- helpers ----------------------------------------------------------------


#: sshd's privilege-separation directory. A root sshd refuses to start (and ``sshd -t``
#: refuses its config) without it; systemd's ssh.service normally makes it, so a machine
#: where sshd never ran as a service has none, and /run is a fresh tmpfs after a reboot.
PRIVSEP_DIR = Path("/run/sshd")


def _ensure_privsep_dir() -> None:
    """Make /run/sshd when running as root (a non-root sshd does not use it)."""
    if os.geteuid() != 0:
        return
    try:
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise SshdError(
            f"cannot create sshd's privilege-separation directory {PRIVSEP_DIR} ({exc.strerror}); "
            f"create it as root: install -d -m 755 {PRIVSEP_DIR}"
        ) from None


def _tool(name: str) -> str:
    """Absolute path of an OpenSSH/iproute2 tool, also when PATH lacks /usr/sbin."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise SshdError(f"{name} not found (install openssh-server / openssh-client / iproute2)")
    return os.path.abspath(found)


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SshdError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


def _listen_address(host: str) -> str:
    return f"[{host}]" if ":" in host else host
