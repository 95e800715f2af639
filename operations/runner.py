"""Operations for what keeps the vLLM server running: podkit's runner (the default, no
systemd, no root) or a systemd unit (``podkit_supervisor = "systemd"``)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation


@operation()
def service(runner_script: str, running: bool, restarted: bool = False, present: bool = True):
    """
    Ensure the runner supervises the server, restarting it only when asked.

    + runner_script: path of ``runner.sh`` on the host
    + running: whether the probe found the runner alive
    + restarted: restart a running runner (its files changed)
    + present: False when systemd supervises instead: stop a runner left running

    **Example:**

    .. code:: python

        runner.service(
            name="Ensure the runner serves the current launch script",
            runner_script=paths.runner_script, running=True, restarted=launch.will_change,
        )
    """
    script = shlex.quote(runner_script)
    if not present:
        if running:
            yield f"{script} stop"
        else:
            host.noop("podkit's runner is not running (systemd supervises vLLM)")
        return
    if not running:
        yield f"{script} stop >/dev/null && {script} start"
    elif restarted:
        yield f"{script} restart"
    else:
        host.noop("the runner serves the current launch script, env file and key")


def _sudo(as_root: bool) -> str:
    return "" if as_root else "sudo -n "


@operation()
def unit(source: str, path: str, current_sha256: str | None, sha256: str, as_root: bool = False):
    """
    Ensure the systemd unit is installed from its copy on the volume, reloading systemd when it changed.

    The copy is written as the SSH user like every other file; only this
    install and ``systemctl daemon-reload`` run with ``sudo -n`` (unless the
    user is root).

    + source: the unit's copy on the volume (already current)
    + path: where systemd reads it, e.g. ``/etc/systemd/system/podkit-vllm.service``
    + current_sha256: the probe's checksum of ``path`` (None: absent)
    + sha256: checksum of the copy's content
    + as_root: the SSH user is root (no sudo)

    **Example:**

    .. code:: python

        runner.unit(
            name="Ensure systemd has the current podkit-vllm.service",
            source=paths.unit_copy, path=UNIT_PATH,
            current_sha256=pod.files.get(UNIT_PATH), sha256=files["unit"].sha256,
        )
    """
    if current_sha256 == sha256:
        host.noop(f"{path} is up to date")
        return
    sudo = _sudo(as_root)
    yield f"{sudo}install -m 0644 {shlex.quote(source)} {shlex.quote(path)} && {sudo}systemctl daemon-reload"


@operation()
def unit_service(
    unit: str, enabled: bool, up: bool, restarted: bool = False, present: bool = True, as_root: bool = False
):
    """
    Ensure the systemd unit is enabled and running, restarting it only when asked.

    + unit: the unit's name, e.g. ``podkit-vllm.service``
    + enabled: whether the probe found it enabled (started at boot)
    + up: whether the probe found it active (or starting)
    + restarted: restart it (its files changed)
    + present: False when podkit's runner supervises instead: stop and disable a unit left from before
    + as_root: the SSH user is root (no sudo)

    **Example:**

    .. code:: python

        runner.unit_service(
            name="Ensure podkit-vllm.service serves the current launch script",
            unit="podkit-vllm.service", enabled=True, up=True, restarted=launch.will_change,
        )
    """
    systemctl = f"{_sudo(as_root)}systemctl"
    name = shlex.quote(unit)
    if not present:
        if enabled or up:
            yield f"{systemctl} disable --now {name}"
        else:
            host.noop(f"{unit} is neither enabled nor running (podkit's runner supervises vLLM)")
        return
    commands = [] if enabled else [f"{systemctl} enable {name}"]
    if restarted or not up:
        commands.append(f"{systemctl} restart {name}")
    if not commands:
        host.noop(f"{unit} is enabled and serves the current launch script, env file and key")
        return
    yield " && ".join(commands)
