"""``podkit tunnel``: each host's edge on 127.0.0.1 here, through the SSH the deploy uses."""

from __future__ import annotations

import contextlib
import signal
import socket
import time

import click

from podkit import PROJECT_ROOT
from podkit.client.agents import AGENTS
from podkit.client.connect import ConnectError, ssh_forward_argv, through_tunnel
from podkit.client.wakefront import WAKE_TIMEOUT_SECONDS, Front, WakeHook, through_front

from .child import Child
from .client import BadInput, client_settings, emit_settings, say
from .hosts import load_targets
from .output import host_option

#: seconds ssh gets to log in and open the forward
OPEN_TIMEOUT = 45.0


class TunnelClosed(click.ClickException):
    """An ssh forward ended (exit 3): the host, ssh's status and its last line."""

    exit_code = 3


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Forward(Child):
    """One ``ssh -N -L`` child: its host, local port and the last lines it wrote on stderr."""

    def __init__(self, host: str, argv: list[str], local_port: int) -> None:
        self.host, self.local_port = host, local_port
        try:
            super().__init__(argv)
        except OSError as exc:
            raise click.ClickException(
                f"cannot run OpenSSH's ssh ({exc.strerror or exc}): install openssh-client"
            ) from None

    def closed(self) -> TunnelClosed:
        self._reader.join(timeout=2)
        last = self.lines[-1] if self.lines else "it wrote nothing"
        return TunnelClosed(f"{self.host}: ssh exited (status {self.proc.returncode}): {last}")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.local_port), timeout=0.5):
                return True
        except OSError:
            return False

    def wait_open(self, timeout: float = OPEN_TIMEOUT) -> None:
        """Until 127.0.0.1:local_port accepts a connection; :class:`TunnelClosed` when ssh exits first."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise self.closed()
            if self.answers():
                return
            if time.monotonic() > deadline:
                raise TunnelClosed(
                    f"{self.host}: ssh opened no forward on 127.0.0.1:{self.local_port} within {timeout:.0f} s"
                    + (f" ({self.lines[-1]})" if self.lines else "")
                )
            time.sleep(0.1)


def _health(cs) -> str | None:
    """Why /health does not answer through the tunnel, else None."""
    from podkit.client.api import VllmApi

    answer = VllmApi(cs.base_url[: -len("/v1")], "", cs.model, ca_file=cs.ca_file).fetch(
        "/health", key=False, timeout=10
    )
    if answer.ok:
        return None
    return f"HTTP {answer.status}" if answer.status is not None else answer.error or "no answer"


def _opened(name: str, edge_port: int, forward: Forward, cs) -> list[str]:
    """What to say once ``forward`` is open: where it goes, and whether the edge answers through it."""
    lines = [f"{name}: 127.0.0.1:{forward.local_port} here -> its port {edge_port}, over ssh"]
    why = _health(cs)
    if why:
        time.sleep(0.2)  # ssh says why the forwarded connection failed, if it knows
        ssh_said = f"; ssh: {forward.lines[-1]}" if forward.lines else ""
        lines.append(f"{name}: the tunnel is open but /health does not answer through it ({why}{ssh_said})")
    return lines


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM and SIGINT end the tunnel as Ctrl-C does (exit 0, ssh children ended). SIGINT too:
    a process started in the background by a non-interactive shell (a CI job, ``podkit tunnel &`` in
    a script) inherits SIGINT ignored, and Python then installs no Ctrl-C handler of its own."""

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    try:
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@click.command("tunnel")
@click.argument("inventory")
@host_option
@click.option(
    "--local-port",
    type=click.IntRange(1, 65535),
    help="Port on 127.0.0.1 here (one host only); default: a free one per host.",
)
@click.option(
    "--for", "client", type=click.Choice(list(AGENTS)), help="Print this agent's settings (as podkit client)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the settings as a JSON list.")
@click.option(
    "--wake",
    is_flag=True,
    help="Serve a local front (Caddy) that starts a host that stopped itself when a request with the key comes.",
)
@click.option(
    "--wake-timeout",
    type=click.IntRange(10, 7200),
    default=WAKE_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds a request is held while its host starts, before a 503 that says why.",
)
def tunnel(inventory, host_names, local_port, client, as_json, wake, wake_timeout):
    """Reach each host's edge on 127.0.0.1 here, through SSH. Runs until Ctrl-C.

    For each host, runs OpenSSH's ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:EDGE_PORT
    with the host's own SSH data (address, port, user, key, known_hosts
    file and host-key policy, as the deploy connects). Once the forward
    answers, prints the client settings for the local address (as podkit
    client prints them; --for and --json too): plain HTTP when the edge
    serves plain HTTP, else HTTPS with the pinned CA (the edge's certificate
    names 127.0.0.1). Useful when the edge listens on loopback only
    (podkit_public = False) or behind RunPod's proxy, which cuts a quiet
    request after about 100 s.

    With --wake, a local front (Caddy, on the same 127.0.0.1 ports, plain
    HTTP) stands before the forwards: when a pod stopped itself (the idle
    watcher), a /v1 request with the key resumes it through RunPod's API,
    applies the deploy as podkit up does, opens the forward again and only
    then goes through; the client just waits (at most --wake-timeout
    seconds, then a 503 that says why and what to run). A request without
    the key wakes nothing.

    \b
    Exit codes: 0 closed with Ctrl-C (or SIGTERM), 1 error, 2 bad input,
    3 ssh exited (its last line says why; with --wake it is started again).

    \b
    podkit tunnel inventories/runpod.py --host coder-1
    podkit tunnel inventories/baremetal.py --host gpu-box-1 --local-port 18000 --for env
    podkit tunnel inventories/runpod.py --host coder-1 --local-port 18000 --wake
    """
    targets = load_targets(inventory, host_names)
    if local_port is not None and len(targets) > 1:
        raise BadInput(f"--local-port is one port but {len(targets)} hosts are selected: pick one with --host")
    if client and not as_json and not AGENTS[client].multi_host and len(targets) > 1:
        raise BadInput(
            f"--for {client} writes one host's settings but {len(targets)} are selected: pick one with --host"
        )
    if local_port is not None and not port_is_free(local_port):
        raise BadInput(f"127.0.0.1:{local_port} is in use here: pick another --local-port, or leave it out")
    ports: list[int] = []
    while len(ports) < len(targets):
        port = local_port or free_port()
        if port not in ports:
            ports.append(port)
    settings = []
    for (cs, problem), port in zip(client_settings(targets), ports):
        if client and AGENTS[client].needs_context and problem:
            raise click.ClickException(
                f"{problem}; {AGENTS[client].called} needs it: set vllm_max_model_len to a number"
            )
        try:
            settings.append(((through_front if wake else through_tunnel)(cs, port), problem))
        except ConnectError as exc:
            raise click.ClickException(str(exc)) from None
    # with --wake the forwards take ports of their own; the front (Caddy) takes the ports given
    forward_ports = [free_port() for _ in targets] if wake else ports
    argvs = []
    for target, port in zip(targets, forward_ports):
        try:
            argvs.append(ssh_forward_argv(target.name, target.data, port, target.settings.edge_port, PROJECT_ROOT))
        except ConnectError as exc:
            raise click.ClickException(str(exc)) from None
    if wake:
        cas = [cs.ca_file for cs, _ in client_settings(targets)]
        _wake_tunnel(inventory, targets, ports, forward_ports, cas, argvs, settings, client, as_json, wake_timeout)
        return

    forwards: list[Forward] = []
    with _sigterm_as_interrupt():
        try:
            for target, argv, port in zip(targets, argvs, ports):
                forwards.append(Forward(target.name, argv, port))
            for forward in forwards:
                forward.wait_open()
            for target, forward, (cs, _) in zip(targets, forwards, settings):
                say(_opened(target.name, target.settings.edge_port, forward, cs))
            emit_settings(settings, {t.name: t.key for t in targets}, client, as_json, show_key=False)
            say(["Ctrl-C closes the tunnel"])
            while True:
                for forward in forwards:
                    if forward.proc.poll() is not None:
                        raise forward.closed()
                time.sleep(0.5)
        except KeyboardInterrupt:
            say(["closing the tunnel"])
        finally:
            for forward in forwards:
                forward.stop()


def _wake_tunnel(inventory, targets, ports, forward_ports, cas, argvs, settings, client, as_json, timeout) -> None:
    """``podkit tunnel --wake``: the forwards behind the local front, each started again by a wake."""
    from .hosts import load_targets
    from .pods import pod_selection, quietly
    from .wakeup import LocalFront, Waker

    forwards: dict[str, Forward] = {}
    by_name = {t.name: (t, fport) for t, fport in zip(targets, forward_ports)}
    closed: set[str] = set()

    def reopen(name: str) -> None:
        (target,) = quietly(lambda: load_targets(inventory, (name,)))  # its new address and host key
        try:
            argv = ssh_forward_argv(name, target.data, by_name[name][1], target.settings.edge_port, PROJECT_ROOT)
        except ConnectError as exc:
            raise click.ClickException(str(exc)) from None
        forwards[name].stop()
        forwards[name] = Forward(name, argv, by_name[name][1])
        forwards[name].wait_open()
        closed.discard(name)

    hook = WakeHook(
        {t.name: t.key for t in targets},
        Waker(inventory, pod_selection(inventory), reopen),
        lambda name: name in forwards and forwards[name].proc.poll() is None,
        lambda name: f"podkit up {inventory} --host {name}",
        timeout=timeout,
    )
    fronts = [
        Front(t.name, port, fport, ca, f"PODKIT_KEY_{i}")
        for i, (t, port, fport, ca) in enumerate(zip(targets, ports, forward_ports, cas))
    ]
    front = None
    with _sigterm_as_interrupt():
        try:
            for target, argv, fport in zip(targets, argvs, forward_ports):
                forwards[target.name] = Forward(target.name, argv, fport)
            for target in targets:
                try:
                    forwards[target.name].wait_open()
                except TunnelClosed as exc:  # a host that is down now: a request with the key starts it
                    say([f"{exc.format_message()}; a request with the key starts it"])
                    closed.add(target.name)
            front = LocalFront(fronts, hook.keys, hook)
            for target, port in zip(targets, ports):
                say([f"{target.name}: 127.0.0.1:{port} here -> a local front that wakes it -> its edge, over ssh"])
            emit_settings(settings, {t.name: t.key for t in targets}, client, as_json, show_key=False)
            say(["Ctrl-C closes the tunnel"])
            told = 0
            while True:
                if not front.alive():
                    raise click.ClickException(
                        "the local front (Caddy) exited: " + (front.lines[-1] if front.lines else "it said nothing")
                    )
                for name, forward in forwards.items():
                    if forward.proc.poll() is not None and name not in closed and name not in hook.current:
                        closed.add(name)
                        said = forward.lines[-1] if forward.lines else "the host went away"
                        say([f"{name}: the tunnel closed ({said}): the next request with the key starts it again"])
                for done in hook.wakes[told:]:
                    told += 1
                    outcome = "woke" if done["ok"] else "could not wake"
                    say(
                        [
                            f"{done['name']}: {outcome} in {done['seconds']:.1f} s, {done['held']} request(s) held "
                            f"meanwhile ({done['said']})"
                        ]
                    )
                time.sleep(0.5)
        except KeyboardInterrupt:
            say(["closing the tunnel"])
        finally:
            if front is not None:
                front.stop()
            for forward in forwards.values():
                forward.stop()
