"""What running one command on a host gives back, whoever runs it.

The CLI runs its remote commands through pyinfra's SSH connector
(``podkit_cli/hosts.py``); the pure logic that needs a host's answer (e.g.
``podkit.client.serverinfo.describe``) takes a ``run`` callable returning a
:class:`Result`, so it never opens a connection of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class RemoteError(RuntimeError):
    """The host could not be reached or the command could not run; the message says which."""


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str


#: ``run(command, timeout) -> Result``; raises :class:`RemoteError` when the host cannot be reached.
Run = Callable[[str, float], Result]
