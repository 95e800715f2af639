"""Run one command on an inventory host over SSH, the way pyinfra would reach it.

For the CLI's read-mostly commands (``cache``): connects with paramiko (what
pyinfra itself uses) from the host's ``ssh_*`` data, honouring the known_hosts
file and strict checking it names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import paramiko


class RemoteError(RuntimeError):
    """The host could not be reached or the command could not run; the message says which."""


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str


def run(name: str, data: dict[str, Any], command: str, timeout: float = 120) -> Result:
    client = paramiko.SSHClient()
    known = data.get("ssh_known_hosts_file")
    if known:
        client.load_host_keys(os.path.expanduser(known))
    else:
        client.load_system_host_keys()
    strict = str(data.get("ssh_strict_host_key_checking", "accept-new")).lower()
    client.set_missing_host_key_policy(paramiko.RejectPolicy() if strict == "yes" else paramiko.AutoAddPolicy())
    try:
        client.connect(
            data.get("ssh_hostname") or name,
            port=int(data.get("ssh_port") or 22),
            username=data.get("ssh_user") or None,
            key_filename=os.path.expanduser(data["ssh_key"]) if data.get("ssh_key") else None,
            timeout=15,
            allow_agent=not data.get("ssh_key"),
        )
        _, out, err = client.exec_command(command, timeout=timeout)
        status = out.channel.recv_exit_status()
        return Result(status, out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    except (paramiko.SSHException, OSError) as exc:
        raise RemoteError(f"{name}: cannot run the command over SSH ({type(exc).__name__}: {exc})") from None
    finally:
        client.close()
