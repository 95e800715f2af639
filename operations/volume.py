"""Operations for what podkit keeps on the persistent volume: folders, files, the key.

Each one compares the desired state with the probe's snapshot
(``operations.facts.pod_state``), so a converged host costs no extra round trip.
The snapshot holds each path's mode and owner too: one that drifted (a key made
readable by every user, a launch script no longer executable) is put back with
``chmod``/``chown`` alone, never by rewriting content that did not change.
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationValueError, operation
from pyinfra.api.output import format_text
from pyinfra.facts.files import FileContents
from pyinfra.operations.util.files import generate_color_diff

from podkit.text import clean

_EOF = "PODKIT_FILE_EOF"


def _restore(paths: dict[str, str], found: dict[str, dict | None], owner: str | None) -> list[str]:
    """``chmod``/``chown`` commands putting back the mode (``paths``: path -> octal mode) and owner
    (``user:group``) of each existing path whose probe record (``found``) differs. The SSH user owns
    everything podkit makes and may give its own files its group; taking back another user's file
    needs sudo (unless the SSH user is root)."""
    commands = []
    drifted = {p: m for p, m in paths.items() if found.get(p) and int(found[p]["mode"], 8) != int(m, 8)}
    for mode in sorted(set(drifted.values())):
        commands.append(f"chmod {mode} {' '.join(shlex.quote(p) for p in sorted(drifted) if drifted[p] == mode)}")
    if owner:
        user = owner.split(":")[0]
        strangers = sorted(p for p in paths if found.get(p) and f"{found[p]['user']}:{found[p]['group']}" != owner)
        for sudo in (False, True):
            chosen = [p for p in strangers if (found[p]["user"] != user and user != "root") == sudo]
            if chosen:
                prefix = "sudo -n " if sudo else ""
                commands.append(f"{prefix}chown {shlex.quote(owner)} {' '.join(shlex.quote(p) for p in chosen)}")
    return commands


def _drift(path: str, mode: str, found: dict | None, owner: str | None) -> str:
    """What drifted on ``path``, for messages: ``mode 644 (want 600), owner nobody:nogroup``."""
    what = [f"mode {found['mode']} (want {mode})"] if found and int(found["mode"], 8) != int(mode, 8) else []
    if found and owner and f"{found['user']}:{found['group']}" != owner:
        what.append(f"owner {found['user']}:{found['group']} (want {owner})")
    return ", ".join(what)


@operation()
def root(path: str, user: str, group: str, writable: bool):
    """
    Ensure the volume root exists and the SSH user can write it, with sudo for this one command.

    A bare-metal box's volume (e.g. ``/srv/vllm``) is usually missing or
    root's while the SSH user (e.g. ``ubuntu``) has sudo: the root is made
    (or taken over) for that user, and everything under it is then written as
    the user, never as root. The preflight has checked that ``sudo -n``
    works; a writable root (or one the user can make) needs nothing.

    + path: the volume root (``podkit_volume``)
    + user: the SSH user, who will own it
    + group: the SSH user's group
    + writable: the probe found the root (or, when missing, its nearest parent) writable by the user

    **Example:**

    .. code:: python

        volume.root(
            name="Ensure /srv/vllm exists and belongs to ubuntu",
            path="/srv/vllm", user="ubuntu", group="ubuntu", writable=pod.volume_writable,
        )
    """
    if writable:
        host.noop(f"{path} is writable by {user}")
        return
    yield f"sudo -n install -d -o {shlex.quote(user)} -g {shlex.quote(group)} -m 0755 {shlex.quote(path)}"


@operation()
def directories(
    paths: dict[str, str],
    present: dict[str, bool],
    modes: dict[str, dict | None] | None = None,
    owner: str | None = None,
):
    """
    Ensure folders exist with their modes (and owner), in one command.

    + paths: folder -> octal mode (``{"/workspace/podkit/secrets": "700"}``)
    + present: folder -> whether the probe found it
    + modes: folder -> the probe's ``{"mode", "user", "group"}`` (None: missing); a drifted one is put back
    + owner: ``user:group`` that should own them (the SSH user's); None: not checked

    **Example:**

    .. code:: python

        volume.directories(
            name="Ensure the podkit folders exist on /workspace, each with its mode",
            paths=settings.paths.directories(),
            present=pod.dirs, modes=pod.modes, owner=pod.owner,
        )
    """
    missing = [path for path in sorted(paths) if not present.get(path)]
    restore = _restore({p: m for p, m in paths.items() if p not in missing}, modes or {}, owner)
    if not missing and not restore:
        host.noop(f"all {len(paths)} podkit folders exist with their modes")
        return
    commands = [f"mkdir -p {' '.join(shlex.quote(p) for p in missing)}"] if missing else []
    for mode in sorted({paths[p] for p in missing}):
        group = [shlex.quote(p) for p in missing if paths[p] == mode]
        commands.append(f"chmod {mode} {' '.join(group)}")
    yield " && ".join(commands + restore)


@operation()
def file(
    path: str,
    content: str,
    mode: str,
    current_sha256: str | None,
    sha256: str,
    current: dict | None = None,
    owner: str | None = None,
):
    """
    Ensure a (non-secret) file on the host has exactly ``content``, ``mode`` and ``owner``.

    Written through a temporary file and renamed, so a reader never sees half
    a script. The content travels in a quoted heredoc: it must hold no secret.
    Under ``--diff`` a change is shown as a diff of the host's text against
    ``content``, as ``files.put`` shows one; only then is the old text read
    (one more remote command), and only when the file exists.

    + path: file on the host
    + content: the whole file, ending in a newline
    + mode: octal mode, e.g. ``"755"``
    + current_sha256: the probe's checksum of the file now (None: absent)
    + sha256: checksum of ``content``
    + current: the probe's ``{"mode", "user", "group"}`` of the file (None: absent or not read)
    + owner: ``user:group`` that should own it (the SSH user's); None: not checked

    **Example:**

    .. code:: python

        volume.file(
            name="Ensure the launch script serves tiny-coder",
            path=launch.path, content=launch.content, mode=launch.mode,
            current_sha256=pod.files.get(launch.path), sha256=launch.sha256,
            current=pod.modes.get(launch.path), owner=pod.owner,
        )
    """
    if not content.endswith("\n") or _EOF in content:
        raise OperationValueError(f"content for {path} must end in a newline and not contain {_EOF}")
    if current_sha256 == sha256:
        restore = _restore({path: mode}, {path: current}, owner)
        if not restore:
            host.noop(f"{path} is up to date")
            return
        if _first_pass():
            host.log(f"{path}: {_drift(path, mode, current, owner)}; content unchanged")
        yield from restore
        return
    if _show_diff():
        _log_diff(path, content, exists=current_sha256 is not None)
    tmp = shlex.quote(f"{path}.podkit-tmp")
    yield (f"cat > {tmp} <<'{_EOF}'\n{content}{_EOF}\nchmod {mode} {tmp} && mv -f {tmp} {shlex.quote(path)}")


def _show_diff() -> bool:
    """True when ``--diff`` is on and this pass is the one that shows it (:func:`_first_pass`)."""
    return state.config.DIFF and _first_pass()


def _first_pass() -> bool:
    """True in the one pass that shows what an operation will do: change detection, or execution
    when detection was skipped (``-y``), so a diff or a drift line is shown (and read) once."""
    return not (state.is_executing and state.should_check_for_changes())


def _log_diff(path: str, content: str, *, exists: bool) -> None:
    """Log a diff of the host's ``path`` against ``content`` as pyinfra's ``files.put`` does."""
    current = host.get_fact(FileContents, path=path) if exists else None
    host.log(f"Will {'modify' if current is not None else 'create'} {format_text(path, bold=True)}", logger.info)
    current_lines = [f"{clean(line)}\n" for line in current or []]  # the host's text is data
    for line in generate_color_diff(current_lines, content.splitlines(keepends=True)):
        host.log(f"  {line}", logger.info)


@operation()
def secret(
    path: str,
    what: str,
    content: str,
    current_sha256: str | None,
    sha256: str,
    current: dict | None = None,
    owner: str | None = None,
):
    """
    Ensure a secret file on the host has ``content``, mode 0600 and ``owner``.

    Uploaded over SFTP, so the secret is never part of a command line, a log
    or pyinfra's output, and never shown under ``--diff``. Its folder must
    already be 0700.

    + path: file on the host (in a 0700 folder)
    + what: what the file holds, for messages (``"API key"``, ``"Hugging Face token"``)
    + content: the secret, as the file should hold it
    + current_sha256: the probe's checksum of the file now (None: absent)
    + sha256: checksum of ``content``
    + current: the probe's ``{"mode", "user", "group"}`` of the file (None: absent or not read)
    + owner: ``user:group`` that should own it (the SSH user's); None: not checked

    **Example:**

    .. code:: python

        volume.secret(
            name="Ensure the host's API key matches the controller's, mode 0600",
            path=paths.api_key, what="API key", content=key_file_content,
            current_sha256=pod.files.get(paths.api_key), sha256=key_digest(key),
            current=pod.modes.get(paths.api_key), owner=pod.owner,
        )
    """
    if current_sha256 == sha256:
        restore = _restore({path: "600"}, {path: current}, owner)
        if not restore:
            host.noop(f"{path} holds the current {what}")
            return
        if _first_pass():
            host.log(f"{path}: {_drift(path, '600', current, owner)}; the {what} is unchanged")
        yield from restore
        return
    # Never through sudo: pyinfra would stage the file in /tmp with default permissions.
    yield FileUploadCommand(StringIO(content), path, _sudo=False, _doas=False, _su_user=None)
    yield f"chmod 600 {shlex.quote(path)}"
