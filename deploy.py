"""Converge a host into a serving, verified vLLM endpoint.

    pyinfra -y inventories/sandbox.py deploy.py      # the local sandbox pod
    pyinfra -y inventories/mine.py deploy.py         # your own hosts (an inventory you write)

Each host takes its role's path. A server (every host but a router) reads top to bottom in the
order it converges (``roles/server.py``: each step numbered and told in its docstring, from reading
the host in one remote command to readiness; docs/how-it-works.md's table is made from them). A
router host (``podkit_role = "router"``, ``roles/router.py``) reads itself and checks its replicas
with the servers' first steps, and converges after every server of the run is ready. On a
converged host every operation reports "No changes" and the run costs one remote command.

Everything runs as the SSH user. A non-root user needs sudo for two things only:
making the volume root theirs when it is missing or root's, and, with
``podkit_supervisor = "systemd"``, installing the units and running systemctl.
"""

from pyinfra import host

from operations import interrupt, router
from roles.router import Router
from roles.server import Server
from roles.turn import Turn

# The settings, the way in, the key and the token, before any remote command: a bad one is one line.
role = Turn.settings_of(host).role
turn = Server(host) if role == "server" else Router(host)
interrupt.exit_nonzero_on_interrupt()  # Ctrl-C exits non-zero, saying what is left

# pyinfra runs operations in the order of these lines, each host's in turn, and a shared operation
# once every host that has it got there: the router converges after every server is ready.
if isinstance(turn, Server):
    turn.converge()
else:
    turn.read()
router.after_servers(name="Ensure every server in this run is ready before a router host converges", role=role)
if isinstance(turn, Router):
    turn.converge()
