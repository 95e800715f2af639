"""Hosts as the deploy sees them: pyinfra's own inventory loader and SSH connector.

The commands that read hosts (verify, bench, eval, cache) load an inventory with
pyinfra's loader (``pyinfra_cli.inventory.make_inventory``: the same group_data
folders, precedence and Python inventories as ``pyinfra INVENTORY deploy.py``)
and run their one remote command through pyinfra's SSH connector (the same
``ssh_*`` data, known_hosts file and strict host-key checking). There is no
second loader or SSH client to drift from the deploy's.

Importing ``pyinfra_cli`` monkey-patches the whole process with gevent. The
deploy wants that; these commands do not (bench times requests on real
threads), so the package is imported with the patch held off.
"""

from __future__ import annotations

import contextlib
import io
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from podkit import PROJECT_ROOT, project_path
from podkit.client.targets import Target
from podkit.host.shell import RemoteError, Result
from podkit.keys import ApiKeyError, read_key
from podkit.settings import Settings, SettingsError

_LOCK = threading.Lock()


def _pyinfra():
    """pyinfra's inventory loader and state, without gevent's monkey-patching of this process."""
    import gevent.monkey

    patch_all = gevent.monkey.patch_all
    gevent.monkey.patch_all = lambda *args, **kwargs: None
    try:
        from pyinfra.api import Config, State
        from pyinfra.context import ctx_inventory, ctx_state
        from pyinfra_cli.inventory import make_inventory
    finally:
        gevent.monkey.patch_all = patch_all
    return make_inventory, Config, State, ctx_state, ctx_inventory


@dataclass
class Remote:
    """A host given by its pyinfra data, and a way to run a command on it."""

    name: str
    data: dict[str, Any]
    _host: Any = field(default=None, repr=False)

    def run(self, command: str, timeout: float = 120) -> Result:
        """Run ``command`` over pyinfra's SSH connector. Raises :class:`RemoteError` when the host
        cannot be reached; a command that fails is a :class:`Result` with a non-zero status."""
        from pyinfra.api.command import StringCommand
        from pyinfra.api.exceptions import ConnectError, PyinfraError

        try:
            if not self._host.connected:
                self._host.connect(reason="podkit", show_errors=False, raise_exceptions=True)
            ok, output = self._host.run_shell_command(StringCommand(command), _timeout=timeout)
        except (ConnectError, PyinfraError, OSError) as exc:
            detail = exc.args[0] if exc.args else type(exc).__name__
            raise RemoteError(f"{self.name}: cannot run the command over SSH ({detail})") from None
        except Exception as exc:  # paramiko and gevent timeouts: name them, never a traceback
            raise RemoteError(f"{self.name}: cannot run the command over SSH ({type(exc).__name__}: {exc})") from None
        return Result(0 if ok else 1, output.stdout, output.stderr)

    def disconnect(self) -> None:
        if self._host is not None and self._host.connected:
            self._host.disconnect()

    def group(self, name: str) -> list[tuple[str, dict[str, Any], Any]]:
        """The hosts of inventory group ``name`` (a router's replicas): ``(name, data, pyinfra host)``
        each, in the inventory's order; empty when the inventory has no such group."""
        inventory = getattr(self._host, "inventory", None)
        members = inventory.get_group(name, default=[]) if inventory is not None else []
        return [(member.name, member.data.dict(), member) for member in members]


@dataclass
class Host(Remote):
    """One inventory host: a :class:`Remote` with its validated settings."""

    settings: Settings = field(kw_only=True)


def _with_state(make):
    """An inventory from ``make(make_inventory)``, with the pyinfra state its hosts connect through."""
    make_inventory, Config, State, ctx_state, ctx_inventory = _pyinfra()
    from pyinfra.connectors.sshuserclient.client import get_host_keys

    with _LOCK:
        # pyinfra reads each known_hosts file once per process (memoized): right for one
        # deploy, stale for a second state in the same process after the file changed.
        get_host_keys.cache.clear()
        state = State(check_for_changes=False)
        state.cwd = str(PROJECT_ROOT)
        ctx_state.set(state)
        inventory = make(make_inventory)
        ctx_inventory.set(inventory)
        state.init(inventory, Config())
    return inventory


def run_on(name: str, data: dict[str, Any], command: str, timeout: float = 120) -> Result:
    """Run ``command`` on a host given only by its pyinfra data (``ssh_*``), as the deploy would reach it."""
    from pyinfra.api import Inventory

    inventory = _with_state(lambda _: Inventory(([(name, dict(data))], {})))
    host = Remote(name, dict(data), inventory.get_host(name))
    try:
        return host.run(command, timeout)
    finally:
        host.disconnect()


def _cause(exc: click.ClickException) -> str:
    """One line for an error pyinfra's loader raised: the user code's exception when it wraps one."""
    inner = getattr(exc, "exception", None)
    if isinstance(inner, Exception):
        return f"{type(inner).__name__}: {inner}"
    return str(getattr(exc, "message", "") or type(exc).__name__)


#: The fallbacks already said in this process (a command loads its inventory more than once).
_SAID: set[str] = set()


def inventory_file(inventory: str) -> Path:
    """INVENTORY as the user means it: an absolute path as given, a relative one from the current
    folder, else (said once on stderr) from the podkit project's folder, where ``inventories/`` is."""
    given = Path(inventory).expanduser()
    if given.is_absolute() or given.exists():
        if given.exists():
            return given.absolute()
    else:
        fallback = project_path(str(given))
        if fallback.exists():
            if inventory not in _SAID:
                _SAID.add(inventory)
                click.echo(f"{inventory}: not in {Path.cwd()}; using {fallback}", err=True)
            return fallback
    raise click.BadParameter(f"{inventory}: no such inventory file", param_hint="INVENTORY")


def load_hosts(inventory: str, host_names: tuple[str, ...] = ()) -> list[Host]:
    """Each selected host of ``inventory`` (:func:`inventory_file`) with its data exactly as the
    deploy sees it."""
    path = inventory_file(inventory)

    def load(make_inventory):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return make_inventory(str(path), cwd=str(PROJECT_ROOT))
        except SystemExit as exc:  # a dynamic inventory's own one-line refusal (inventories/runpod.py)
            raise click.ClickException(str(exc.code) if exc.code not in (None, 0) else f"{inventory} exited") from None
        except click.ClickException as exc:  # pyinfra's own errors show a traceback: name the cause instead
            raise click.ClickException(f"cannot load {inventory}: {_cause(exc)}") from None
        except Exception as exc:
            raise click.ClickException(f"cannot load {inventory}: {type(exc).__name__}: {exc}") from None

    loaded = _with_state(load)
    hosts = []
    for host in loaded:
        if host_names and host.name not in host_names:
            continue
        data = host.data.dict()
        try:
            settings = Settings.from_mapping(data)
        except SettingsError as exc:
            raise click.ClickException(f"{host.name}: {exc}") from None
        hosts.append(Host(host.name, data, host, settings=settings))
    if not hosts:
        wanted = f" named {', '.join(host_names)}" if host_names else ""
        raise click.BadParameter(f"no hosts{wanted} in {inventory}", param_hint="INVENTORY")
    return hosts


def load_targets(inventory: str, host_names: tuple[str, ...] = ()) -> list[Target[Host]]:
    """Every selected host with its endpoint and the key the deploy gave it (read-only commands)."""
    from podkit.wayin import cluster_rank

    targets: list[Target[Host]] = []
    for host in load_hosts(inventory, host_names):
        cluster = host.settings.cluster
        rank = cluster_rank(host.name, cluster, host.settings.cluster_rank)
        if cluster and rank:  # a follower runs vLLM headless: the cluster's endpoint is its head's
            if host_names:
                raise click.ClickException(
                    f"{host.name}: rank {rank} of cluster {cluster} serves no API (its head, rank 0, does): "
                    "name the head with --host"
                )
            continue
        try:
            key = read_key(project_path(host.settings.api_key_file))
        except ApiKeyError as exc:  # the host it was read for, the file and the fix: one line
            raise click.ClickException(f"{host.name}: {exc}") from None
        if key is None:
            raise click.ClickException(
                f"{host.name}: no API key at {host.settings.api_key_file}; apply the deploy first (it creates the key)"
            )
        targets.append(Target(host, key))
    return targets
