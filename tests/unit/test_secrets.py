"""The controller's API key file: made once, 0600, overridable, rotatable, checked."""

import hashlib

import pytest

from podkit.keys import ENV_VAR, ApiKeyError, ensure_key, key_digest, read_key, rotate_key


def test_made_once_with_private_modes(tmp_path):
    path = tmp_path / ".secrets" / "api_key"
    key = ensure_key(path, environ={})
    assert len(key) == 64 and int(key, 16)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert ensure_key(path, environ={}) == key


def test_supplied_key_is_written_so_clients_read_the_same(tmp_path):
    path = tmp_path / "api_key"
    ensure_key(path, environ={})
    supplied = "sk-supplied-0123456789"
    assert ensure_key(path, environ={ENV_VAR: supplied}) == supplied
    assert read_key(path) == supplied


def test_rotation_changes_the_key_and_its_digest(tmp_path):
    path = tmp_path / "api_key"
    old = ensure_key(path, environ={})
    new = rotate_key(path)
    assert new != old and read_key(path) == new
    assert key_digest(new) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_world_readable_key_file_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "api_key"
    ensure_key(path, environ={})
    path.chmod(0o644)
    with pytest.raises(ApiKeyError, match=f"run: chmod 600 {path}"):
        read_key(path)


@pytest.mark.parametrize("bad", ["short", "has space in it 0123456789", "x" * 300])
def test_malformed_supplied_key_is_refused(tmp_path, bad):
    with pytest.raises(ApiKeyError, match="16-256 characters"):
        ensure_key(tmp_path / "api_key", environ={ENV_VAR: bad})
