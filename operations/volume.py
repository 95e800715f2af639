"""Operations for what podkit keeps on the persistent volume: folders, files, the key.

Each one compares the desired state with the probe's snapshot
(``operations.facts.pod_state``), so a converged host costs no extra round trip.
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, OperationValueError, operation
from pyinfra.api.output import format_text
from pyinfra.facts.files import FileContents
from pyinfra.operations.util.files import generate_color_diff

_EOF = "PODKIT_FILE_EOF"


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
def directories(paths: dict[str, str], present: dict[str, bool]):
    """
    Ensure folders exist with their modes, in one command.

    + paths: folder -> octal mode (``{"/workspace/podkit/secrets": "700"}``)
    + present: folder -> whether the probe found it

    **Example:**

    .. code:: python

        volume.directories(
            name="Ensure the podkit folders exist on /workspace",
            paths=settings.paths.directories(),
            present=pod.dirs,
        )
    """
    missing = [path for path in sorted(paths) if not present.get(path)]
    if not missing:
        host.noop(f"all {len(paths)} podkit folders exist")
        return
    commands = [f"mkdir -p {' '.join(shlex.quote(p) for p in missing)}"]
    for mode in sorted({paths[p] for p in missing}):
        group = [shlex.quote(p) for p in missing if paths[p] == mode]
        commands.append(f"chmod {mode} {' '.join(group)}")
    yield " && ".join(commands)


@operation()
def file(path: str, content: str, mode: str, current_sha256: str | None, sha256: str):
    """
    Ensure a (non-secret) file on the host has exactly ``content``.

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

    **Example:**

    .. code:: python

        volume.file(
            name="Ensure the launch script serves tiny-coder",
            path=launch.path, content=launch.content, mode=launch.mode,
            current_sha256=pod.files.get(launch.path), sha256=launch.sha256,
        )
    """
    if not content.endswith("\n") or _EOF in content:
        raise OperationValueError(f"content for {path} must end in a newline and not contain {_EOF}")
    if current_sha256 == sha256:
        host.noop(f"{path} is up to date")
        return
    if _show_diff():
        _log_diff(path, content, exists=current_sha256 is not None)
    tmp = shlex.quote(f"{path}.podkit-tmp")
    yield (f"cat > {tmp} <<'{_EOF}'\n{content}{_EOF}\nchmod {mode} {tmp} && mv -f {tmp} {shlex.quote(path)}")


def _show_diff() -> bool:
    """True when ``--diff`` is on and this pass is the one that shows it: change detection,
    or execution when detection was skipped (``-y``), so a diff is shown (and read) once."""
    return state.config.DIFF and not (state.is_executing and state.should_check_for_changes())


def _log_diff(path: str, content: str, *, exists: bool) -> None:
    """Log a diff of the host's ``path`` against ``content`` as pyinfra's ``files.put`` does."""
    current = host.get_fact(FileContents, path=path) if exists else None
    host.log(f"Will {'modify' if current is not None else 'create'} {format_text(path, bold=True)}", logger.info)
    current_lines = [f"{line}\n" for line in current or []]
    for line in generate_color_diff(current_lines, content.splitlines(keepends=True)):
        host.log(f"  {line}", logger.info)


@operation()
def secret(path: str, what: str, content: str, current_sha256: str | None, sha256: str):
    """
    Ensure a secret file on the host has ``content``, mode 0600.

    Uploaded over SFTP, so the secret is never part of a command line, a log
    or pyinfra's output, and never shown under ``--diff``. Its folder must
    already be 0700.

    + path: file on the host (in a 0700 folder)
    + what: what the file holds, for messages (``"API key"``, ``"Hugging Face token"``)
    + content: the secret, as the file should hold it
    + current_sha256: the probe's checksum of the file now (None: absent)
    + sha256: checksum of ``content``

    **Example:**

    .. code:: python

        volume.secret(
            name="Ensure the host's API key matches the controller's",
            path=paths.api_key, what="API key", content=key_file_content,
            current_sha256=pod.files.get(paths.api_key), sha256=key_digest(key),
        )
    """
    if current_sha256 == sha256:
        host.noop(f"{path} holds the current {what}")
        return
    # Never through sudo: pyinfra would stage the file in /tmp with default permissions.
    yield FileUploadCommand(StringIO(content), path, _sudo=False, _doas=False, _su_user=None)
    yield f"chmod 600 {shlex.quote(path)}"
