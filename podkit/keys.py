"""The one API key shared by the server and every client command of this project.

It lives on the controller in a git-ignored file of mode 0600 (default
``.secrets/api_key``) and on the host in a 0600 file on the volume. It is made
once (32 random bytes, hex) unless the user supplies one through the
``PODKIT_API_KEY`` environment variable, which is then written to the file so
that later client commands read the same key. Rotating it is ``cli.py key rotate``
(or a new ``PODKIT_API_KEY``) followed by a re-apply.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

ENV_VAR = "PODKIT_API_KEY"
_VALID = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")


class ApiKeyError(ValueError):
    """The supplied or stored key is unusable; the message says how to fix it."""


def new_key() -> str:
    return secrets.token_hex(32)


def key_digest(key: str) -> str:
    """What the host's key file checksums to: the key and a newline."""
    return hashlib.sha256(file_content(key).encode()).hexdigest()


def file_content(key: str) -> str:
    return key + "\n"


def _flaw(key: str) -> str:
    """What is wrong with ``key``, without showing it."""
    if not 16 <= len(key) <= 256:
        return f"it has {len(key)}"
    return "it holds other characters"


def _check(key: str, what: str, fix: str) -> str:
    """``key`` if it is usable; else one line naming ``what`` held it and ``fix``, never the key itself."""
    if not _VALID.fullmatch(key):
        raise ApiKeyError(f"{what} must be 16-256 characters of letters, digits or ._~+/=- ({_flaw(key)}): {fix}")
    return key


def _read_private(path: Path) -> str | None:
    """The stripped text of a secret file, refused when other users can read it."""
    try:
        if not path.exists():
            return None
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise ApiKeyError(f"{path} is readable by other users (mode {mode:o}); run: chmod 600 {path}")
        return path.read_text().strip()
    except OSError as exc:  # a folder, another user's file, a broken disk: one line, not a traceback
        raise ApiKeyError(f"cannot read {path}: {exc.strerror or exc}; make it a file you own, mode 0600") from None
    except UnicodeDecodeError:
        raise ApiKeyError(f"{path} is not text; put the key (or token) alone on its first line") from None


def read_key(path: str | Path) -> str | None:
    text = _read_private(Path(path))
    if text is None:
        return None
    return _check(text, f"the API key in {path}", "fix it, or delete the file to have podkit generate one")


def write_key(path: str | Path, key: str) -> None:
    """Write ``key`` atomically with mode 0600 in a 0700 folder."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(file_content(key))
        os.replace(tmp, path)
    except OSError as exc:
        raise ApiKeyError(f"cannot write the API key to {path}: {exc.strerror or exc}") from None


def ensure_key(path: str | Path, environ: Mapping[str, str] | None = None) -> str:
    """The project's key: from ``PODKIT_API_KEY`` if set, else the file, else a new one."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    supplied = env.get(ENV_VAR, "").strip()
    if supplied:  # the variable first: when it is wrong, it is what to fix
        _check(
            supplied,
            f"${ENV_VAR}",
            f"fix the variable, or unset it to use the key in {Path(path)} (made for you if it is missing)",
        )
    stored = read_key(path)
    if supplied:
        if supplied != stored:
            write_key(path, supplied)
        return supplied
    if stored is None:
        stored = new_key()
        write_key(path, stored)
    return stored


def rotate_key(path: str | Path) -> str:
    key = new_key()
    write_key(path, key)
    return key


def read_hf_token(path: str | Path, environ: Mapping[str, str] | None = None) -> str | None:
    """The Hugging Face token: ``$HF_TOKEN`` if set, else the (0600) file, else None."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    token = env.get("HF_TOKEN", "").strip()
    if token:
        return token
    return _read_private(Path(path)) or None
