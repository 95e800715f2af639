"""How a client reaches a running :class:`~podkit.sandbox.sshd.PrivateSshd`: pyinfra data, an ssh command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SshHost:
    """Everything a client needs to reach a running :class:`PrivateSshd`.

    Attributes:
        hostname: the address to connect to (e.g. ``"127.0.0.1"``).
        port: the TCP port sshd listens on.
        user: the login user.
        key_file: the client's private key (ed25519, no passphrase).
        known_hosts_file: a known_hosts file pinning the server's host key,
            for use with strict host key checking.
    """

    hostname: str
    port: int
    user: str
    key_file: Path
    known_hosts_file: Path

    def pyinfra_data(self) -> dict:
        """Return pyinfra 3.x host data for the SSH connector.

        The keys are the connector's own data names (``ssh_hostname``,
        ``ssh_port``, ...), with strict host key checking against
        :attr:`known_hosts_file`, so nothing is read from or written to
        ``~/.ssh``. Use it as an inventory entry::

            hosts = [("sandbox", host.pyinfra_data())]
        """
        return {
            "ssh_hostname": self.hostname,
            "ssh_port": self.port,
            "ssh_user": self.user,
            "ssh_key": str(self.key_file),
            "ssh_known_hosts_file": str(self.known_hosts_file),
            "ssh_strict_host_key_checking": "yes",
        }

    def ssh_argv(self, *command: str) -> list[str]:
        """Return an OpenSSH client command line that runs ``command`` on the host.

        The options pin the host key (strict checking against
        :attr:`known_hosts_file`), use only :attr:`key_file`, and never prompt.
        With no ``command`` the result opens an interactive shell.
        """
        return [
            "ssh",
            "-i", str(self.key_file),
            "-p", str(self.port),
            "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts_file}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR",
            f"{self.user}@{self.hostname}",
            *command,
        ]  # fmt: skip
