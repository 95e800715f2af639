"""What the deploy decides from a probed host: what stops it, and which vLLM it runs.

Pure, like the probe: tests feed it :class:`~podkit.host.hoststate.HostState` values.
"""

from __future__ import annotations

import shlex

from podkit.host.hoststate import HostState, VllmInstall
from podkit.paths import UNIT_NAME
from podkit.settings import PackageSpec, Settings

#: Room a vLLM install takes on the volume (the venv, plus pip unpacking wheels in TMPDIR there):
#: the CPU build's venv is 2.5-3.5 GB (3.4 GB measured on the sandbox); a CUDA build's, with torch
#: and its NVIDIA libraries, is 9-11 GB.
INSTALL_BYTES = {"cpu": 5 * 10**9, "gpu": 14 * 10**9}


def install_space_problem(settings: Settings, state: HostState) -> str | None:
    """Why the vLLM install would fill the volume, checked before pip starts (a full volume mid-install
    gives pip's hundred-line traceback and a half-made venv)."""
    kind = "gpu" if state.gpus else "cpu"
    need, free = INSTALL_BYTES[kind], state.free_bytes
    if free is None or free >= need:
        return None
    package = settings.package_for(bool(state.gpus))
    return (
        f"installing {package} needs about {need / 1e9:.0f} GB on {settings.volume} but it has "
        f"{free / 1e9:.1f} GB free; free space there (podkit cache clean INVENTORY removes broken downloads) "
        "or grow the volume"
    )


def host_problems(settings: Settings, state: HostState, *, needs_install: bool) -> list[str]:
    """Reasons this host cannot be converged, each with its fix. Empty when it can."""
    if state.unreadable:
        return [state.unreadable]
    problems = []
    if needs_install and not state.venv_module:
        problems.append(
            f"{state.python} cannot create a venv (no venv/ensurepip module); "
            "install it (Debian/Ubuntu: apt-get install -y python3-venv) or use an image with vLLM"
        )
    if state.gpu_error:
        problems.append(
            f"nvidia-smi is installed but failed ({state.gpu_error}); fix the NVIDIA driver, "
            "or restart the pod if its GPU was taken"
        )
    problems += _volume_problems(settings, state)
    if needs_install and state.volume_writable and (space := install_space_problem(settings, state)):
        problems.append(space)
    problems += _supervisor_problems(settings, state)
    listening = state.port_listening
    if listening.get("vllm") and not state.server_pid and not state.legacy_runner:
        problems.append(
            f"port {settings.port} is already in use by a process podkit did not start; stop it or set vllm_port"
        )
    if listening.get("edge") and not state.edge_pid and not state.legacy_runner:  # an older podkit's server: stopped
        problems.append(
            f"port {settings.edge_port} is already in use by a process podkit did not start; stop it or set "
            "podkit_edge_port"
        )
    return problems


def _sudo_fix(state: HostState) -> str:
    return (
        f"give {state.user} passwordless sudo (e.g. '{state.user} ALL=(ALL) NOPASSWD:ALL' in "
        f"/etc/sudoers.d/{state.user}, mode 0440)"
    )


def _volume_problems(settings: Settings, state: HostState) -> list[str]:
    volume = settings.volume
    if not state.volume_writable:
        if state.root:
            return [
                f"{volume} is not writable even by root (a read-only filesystem?); set podkit_volume to a "
                "writable persistent folder"
            ]
        if not state.sudo.get("ok"):
            what = "is not writable by" if state.volume_exists else "does not exist and cannot be created by"
            return [
                f"{volume} {what} {state.user}, and sudo -n true failed ({state.sudo.get('error') or 'no answer'}); "
                f"{_sudo_fix(state)}, or make the folder yourself: "
                f"sudo install -d -o {state.user} -g {state.group} -m 0755 {shlex.quote(volume)}"
            ]
    if state.tree_writable is False:
        return [
            f"{settings.paths.root} is not writable by {state.user} (an earlier deploy as another user made it); "
            f"sudo chown -R {state.user}:{state.group} {shlex.quote(settings.paths.root)}, or deploy as that user"
        ]
    return []


def _supervisor_problems(settings: Settings, state: HostState) -> list[str]:
    wants_systemd = settings.supervisor == "systemd"
    if wants_systemd and not state.systemd:
        return [
            "podkit_supervisor is 'systemd' but this host does not run systemd (no /run/systemd/system); "
            "set podkit_supervisor = 'supervisord'"
        ]
    if state.root or state.sudo.get("ok"):
        return []
    failed = f"sudo -n true failed ({state.sudo.get('error') or 'no answer'})"
    if wants_systemd:
        return [
            f"{state.user} needs sudo to install and drive {UNIT_NAME}, and {failed}; "
            f"{_sudo_fix(state)}, or set podkit_supervisor = 'supervisord'"
        ]
    if state.unit is not None and state.unit.present:
        return [
            f"{UNIT_NAME} is left from a deploy with podkit_supervisor = 'systemd' and {state.user} needs sudo "
            f"to stop and disable it, but {failed}; {_sudo_fix(state)}, or run once: "
            f"sudo systemctl disable --now {UNIT_NAME}"
        ]
    return []


def choose_vllm(settings: Settings, state: HostState) -> tuple[PackageSpec, VllmInstall | None]:
    """The package this host needs, and an install that already satisfies it (or None)."""
    spec = settings.package_for(state.has_gpus)
    if state.venv.matches(spec):
        return spec, state.venv
    if settings.use_system_vllm and state.system.matches(spec):
        return spec, state.system
    return spec, None
