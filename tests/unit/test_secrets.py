"""The controller's API key file: made once, 0600, overridable, rotatable, checked; a bad key file,
HF token file or ``$PODKIT_API_KEY`` stops the deploy with one line naming the host, the cause and the fix."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podkit.keys import ENV_VAR, ApiKeyError, ensure_key, key_digest, read_key, rotate_key
from tests.helpers import ROOT


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


def test_a_malformed_PODKIT_API_KEY_names_the_variable_not_the_file(tmp_path):
    """The variable is what is wrong: deleting the file would not help, so the fix says unset it."""
    path = tmp_path / "api_key"
    ensure_key(path, environ={})
    with pytest.raises(ApiKeyError) as refused:
        ensure_key(path, environ={ENV_VAR: "not a key: 0123456789"})
    message = str(refused.value)
    assert message.startswith(f"${ENV_VAR} must be 16-256 characters")
    assert "fix the variable, or unset it" in message and "delete the file" not in message
    assert "not a key" not in message  # never the value itself


def test_a_key_file_that_cannot_be_read_is_one_line(tmp_path):
    folder = tmp_path / "api_key"
    folder.mkdir(mode=0o700)
    with pytest.raises(ApiKeyError, match=f"cannot read {folder}: Is a directory"):
        read_key(folder)


# --------------------------------------------- the deploy: one line per bad secret, before any change


def deploy_refusal(tmp_path, env=None, key_mode=0o600, token_mode=None):
    """Run the real ``pyinfra -y INVENTORY deploy.py`` against this machine (``@local``), with the
    controller's key file (and HF token file) in ``tmp_path``; return its exit code and output."""
    key, token, volume = tmp_path / "api_key", tmp_path / "hf_token", tmp_path / "volume"
    key.write_text("k" * 32 + "\n")
    key.chmod(key_mode)
    if token_mode is not None:
        token.write_text("hf_" + "t" * 30 + "\n")
        token.chmod(token_mode)
    data = {
        "podkit_api_key_file": str(key),
        "podkit_hf_token_file": str(token),
        "podkit_volume": str(volume),
        "vllm_port": 1,
    }
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [('@local', {data!r})]\n")
    clean = {name: value for name, value in os.environ.items() if name not in (ENV_VAR, "HF_TOKEN")}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "pyinfra"), "-y", str(inventory), "deploy.py"],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not volume.exists(), "the deploy changed the host before refusing"
    output = proc.stdout + proc.stderr
    return proc.returncode, output, [line for line in output.splitlines() if line.strip()][-1]


@pytest.mark.proc
@pytest.mark.parametrize(
    "env, key_mode, token_mode, cause, fix",
    [
        ({}, 0o644, None, "api_key is readable by other users (mode 644)", "; run: chmod 600 "),
        ({}, 0o600, 0o644, "hf_token is readable by other users (mode 644)", "; run: chmod 600 "),
        ({ENV_VAR: "short"}, 0o600, None, f"${ENV_VAR} must be 16-256 characters", "fix the variable, or unset it"),
    ],
    ids=["key-file-0644", "hf-token-0644", "malformed-PODKIT_API_KEY"],
)
def test_a_bad_secret_stops_the_deploy_with_one_line_naming_the_host(tmp_path, env, key_mode, token_mode, cause, fix):
    rc, output, last = deploy_refusal(tmp_path, env, key_mode, token_mode)
    assert rc != 0 and "Traceback" not in output, output
    assert "@local: " in last and cause in last and fix in last, last
