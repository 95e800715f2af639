"""Tests for podkit.sandbox.sshd: a real private OpenSSH server on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import paramiko
import pytest

from podkit.sandbox.sshd import PrivateSshd, SshdError, SshHost, free_port

REPO = Path(__file__).resolve().parents[2]
HAVE_SSHD = shutil.which("sshd") is not None or Path("/usr/sbin/sshd").exists()
needs_sshd = pytest.mark.skipif(not HAVE_SSHD, reason="openssh-server (sshd) is not installed")


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, state, cmdline) for every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return table


def _listeners(config: Path) -> list[int]:
    """Live sshd listeners started with this config."""
    return sorted(
        pid for pid, (_, state, cmdline) in _proc_table().items()
        if state != "Z" and str(config) in cmdline and "[listener]" in cmdline
    )  # fmt: skip


def _sshd_pids(config: Path) -> list[int]:
    """Live listeners started with this config, and every live process under them."""
    table = _proc_table()
    live = {pid for pid, (_, state, _) in table.items() if state != "Z"}
    found = [pid for pid in live if str(config) in table[pid][2] and "sshd" in table[pid][2]]
    todo = list(found)
    while todo:
        parent = todo.pop()
        kids = [pid for pid in live if table[pid][0] == parent]
        found += kids
        todo += kids
    return sorted(found)


def _paramiko(host: SshHost, known_hosts: Path | None = None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.get_host_keys().load(str(known_hosts or host.known_hosts_file))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.hostname,
        port=host.port,
        username=host.user,
        key_filename=str(host.key_file),
        allow_agent=False,
        look_for_keys=False,
        timeout=5,
    )
    # Without this, each exec waits ~40 ms on Nagle + delayed ACK.
    client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client


def _exec(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, _ = client.exec_command(command)
    out = stdout.read().decode()
    return stdout.channel.recv_exit_status(), out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server shared by the read-only tests of this module."""
    sshd = PrivateSshd(tmp_path_factory.mktemp("sshd"))
    host = sshd.start()
    yield sshd, host
    sshd.stop()


@pytest.fixture
def fresh(tmp_path):
    """A not-yet-started server of its own, always stopped afterwards."""
    sshd = PrivateSshd(tmp_path / "state")
    yield sshd
    sshd.stop()


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_pyinfra_data_uses_connector_key_names(tmp_path):
    from pyinfra.connectors.ssh import connector_data_meta

    host = SshHost("127.0.0.1", 2222, "root", tmp_path / "k", tmp_path / "kh")
    data = host.pyinfra_data()
    assert set(data) <= set(connector_data_meta)
    assert data == {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": 2222,
        "ssh_user": "root",
        "ssh_key": str(tmp_path / "k"),
        "ssh_known_hosts_file": str(tmp_path / "kh"),
        "ssh_strict_host_key_checking": "yes",
    }


@pytest.mark.proc
def test_module_imports_neither_pyinfra_nor_click():
    code = "import sys, podkit.sandbox.sshd; bad = {'pyinfra', 'click', 'paramiko'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


@pytest.mark.proc
@needs_sshd
def test_keys_are_idempotent_and_private(fresh):
    fresh.ensure_keys()
    host_key, client_key = fresh.host_key.read_text(), fresh.client_key.read_text()
    fresh.ensure_keys()
    assert fresh.host_key.read_text() == host_key
    assert fresh.client_key.read_text() == client_key
    for path in (fresh.host_key, fresh.client_key, fresh.authorized_keys):
        assert path.stat().st_mode & 0o777 == 0o600
    pub = fresh.client_key.with_name("id_ed25519.pub").read_text().strip()
    assert fresh.authorized_keys.read_text().strip() == pub


@pytest.mark.proc
@needs_sshd
def test_openssh_client(server):
    _, host = server
    proc = subprocess.run(
        [
            "ssh", "-i", str(host.key_file),
            "-o", f"UserKnownHostsFile={host.known_hosts_file}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-p", str(host.port), f"{host.user}@{host.hostname}", "echo", "hi",
        ],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, "hi\n"), proc.stderr


@pytest.mark.proc
@needs_sshd
def test_paramiko_exec(server):
    _, host = server
    client = _paramiko(host)
    try:
        assert _exec(client, "echo hi; exit 3") == (3, "hi\n")
    finally:
        client.close()


@pytest.mark.proc
@needs_sshd
def test_start_twice_reuses_the_server(server):
    sshd, host = server
    pid = sshd.status()["pid"]
    again = sshd.start()
    assert again == host
    assert sshd.status()["pid"] == pid
    assert _listeners(sshd.config_file) == [pid]
    # A second object on the same state directory finds the same server.
    assert PrivateSshd(sshd.state_dir).start() == host
    assert _listeners(sshd.config_file) == [pid]


@pytest.mark.proc
@needs_sshd
def test_stop_then_start_keeps_port_and_host_key(fresh):
    assert fresh.status() == {"running": False, "pid": None, "port": None, "log": str(fresh.log_file)}
    fresh.stop()  # stopping a never-started server is fine
    host = fresh.start()
    first = fresh.status()
    assert first["running"] and first["port"] == host.port
    known_hosts = host.known_hosts_file.read_text()

    fresh.stop()
    assert fresh.status()["running"] is False
    assert _sshd_pids(fresh.config_file) == []
    fresh.stop()  # idempotent

    again = fresh.start()
    assert again.port == host.port
    assert again.known_hosts_file.read_text() == known_hosts
    assert fresh.status()["pid"] != first["pid"]
    client = _paramiko(again)
    try:
        assert _exec(client, "echo back") == (0, "back\n")
    finally:
        client.close()


@pytest.mark.proc
@needs_sshd
def test_saved_port_moves_only_when_taken(fresh):
    port = fresh.start().port
    fresh.stop()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        moved = fresh.start()
        assert moved.port != port
        assert fresh.status()["port"] == moved.port
        assert _exec_once(moved, "echo moved") == (0, "moved\n")
        fresh.stop()

        pinned = PrivateSshd(fresh.state_dir, port=port)
        with pytest.raises(SshdError, match="Address already in use"):
            pinned.start()
        assert pinned.status()["running"] is False


@pytest.mark.proc
@needs_sshd
def test_start_recovers_from_stale_pid_file(fresh):
    fresh.state_dir.mkdir(parents=True)
    fresh.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not an sshd
    host = fresh.start()
    assert fresh.status()["pid"] != os.getpid()
    assert _exec_once(host, "echo ok") == (0, "ok\n")


def _exec_once(host: SshHost, command: str) -> tuple[int, str]:
    client = _paramiko(host)
    try:
        return _exec(client, command)
    finally:
        client.close()


@pytest.mark.proc
@needs_sshd
def test_server_outlives_the_process_that_started_it(fresh):
    code = f"from podkit.sandbox.sshd import PrivateSshd; PrivateSshd({str(fresh.state_dir)!r}).start()"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=20)
    status = fresh.status()
    assert status["running"]
    host = fresh.start()
    assert fresh.status()["pid"] == status["pid"]
    assert _exec_once(host, "echo alive") == (0, "alive\n")


@pytest.mark.proc
@needs_sshd
def test_stop_ends_open_sessions(fresh):
    host = fresh.start()
    client = _paramiko(host)
    try:
        _, stdout, _ = client.exec_command("echo started; exec sleep 60")
        assert stdout.readline() == "started\n"
        tree = _sshd_pids(fresh.config_file)
        assert len(tree) == 3  # listener, connection, sleep
        fresh.stop()
        assert _sshd_pids(fresh.config_file) == []
        table = _proc_table()
        assert not [pid for pid in tree if pid in table and table[pid][1] != "Z"]
    finally:
        client.close()


@pytest.mark.proc
@needs_sshd
def test_sessions_count_one_line_per_remote_command(server, tmp_path):
    sshd, host = server
    before = len(sshd.sessions())
    client = _paramiko(host)
    try:
        for i in range(3):
            assert _exec(client, f"echo {i}") == (0, f"{i}\n")
        assert len(sshd.sessions()) - before == 3
        sftp = client.open_sftp()
        sftp.close()
        assert len(sshd.sessions()) - before == 4
    finally:
        client.close()
    proc = subprocess.run(host.ssh_argv("echo", "via", "ssh_argv"), capture_output=True, text=True, timeout=10)
    assert (proc.returncode, proc.stdout) == (0, "via ssh_argv\n"), proc.stderr
    new = sshd.sessions()[before:]
    assert len(new) == 5
    prefix = f"for {host.user} from 127.0.0.1 port "
    assert all(line.startswith(f"Starting session: command {prefix}") for line in new[:3])
    assert new[3].startswith(f"Starting session: subsystem 'sftp' {prefix}")
    assert new[4].startswith(f"Starting session: command {prefix}")


@pytest.mark.proc
@needs_sshd
def test_sftp_put(server, tmp_path):
    _, host = server
    local = tmp_path / "payload.txt"
    local.write_text("payload\n")
    remote = tmp_path / "uploaded.txt"
    client = _paramiko(host)
    try:
        sftp = client.open_sftp()
        sftp.put(str(local), str(remote))
        sftp.close()
    finally:
        client.close()
    assert remote.read_text() == "payload\n"


@pytest.mark.proc
@needs_sshd
def test_wrong_host_key_is_refused(server, tmp_path):
    _, host = server
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key_b64 = other.with_name("other_key.pub").read_text().split()[:2]
    bad = tmp_path / "known_hosts"
    bad.write_text(f"[{host.hostname}]:{host.port} {key_type} {key_b64}\n")

    proc = subprocess.run(
        [
            "ssh", "-i", str(host.key_file), "-o", f"UserKnownHostsFile={bad}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            "-p", str(host.port), f"{host.user}@{host.hostname}", "echo", "hi",
        ],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert proc.returncode == 255
    assert proc.stdout == ""
    assert "Host key verification failed" in proc.stderr

    with pytest.raises(paramiko.BadHostKeyException):
        _paramiko(host, known_hosts=bad)


@pytest.mark.proc
@needs_sshd
def test_pyinfra_deploy_runs_against_it(server, tmp_path):
    sshd, host = server
    pyinfra_bin = Path(sys.executable).with_name("pyinfra")
    if not pyinfra_bin.exists():
        pyinfra_bin = REPO / ".venv" / "bin" / "pyinfra"
    (tmp_path / "deploy.py").write_text(
        textwrap.dedent(
            """\
            from pyinfra.operations import server
            server.shell(name="x", commands=["echo hi"])
            """
        )
    )
    (tmp_path / "inventory.py").write_text(f'hosts = [("sandbox", {host.pyinfra_data()!r})]\n')
    before = len(sshd.sessions())
    proc = subprocess.run(
        [str(pyinfra_bin), "-y", "inventory.py", "deploy.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},  # nothing from ~/.ssh
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(sshd.sessions()) > before


FRESH_RUN = """
import subprocess, sys
from pathlib import Path
from podkit.sandbox.sshd import PrivateSshd

assert not Path("/run/sshd").exists(), "the tmpfs over /run should hide /run/sshd"
sshd = PrivateSshd(Path(sys.argv[1]))
host = sshd.start()
try:
    out = subprocess.run(host.ssh_argv("echo", "answered"), capture_output=True, text=True, timeout=20)
    print(out.returncode, out.stdout.strip(), out.stderr.strip())
finally:
    sshd.stop()
"""


@pytest.mark.proc
@needs_sshd
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare for a private mount namespace"
)
def test_starts_on_a_machine_where_run_sshd_does_not_exist(tmp_path):
    """A fresh machine has no /run/sshd (systemd's ssh.service makes it; a container never ran
    that, and /run is a new tmpfs after a reboot). Start the server in a mount namespace whose
    /run is an empty tmpfs and log in over SSH: start() must make what sshd needs itself."""
    script = tmp_path / "fresh_run.py"
    script.write_text(FRESH_RUN)
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs tmpfs /run && exec "$@"',
            "sh",
            sys.executable,
            str(script),
            str(tmp_path / "state"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" ", 2)[:2] == ["0", "answered"], proc.stdout
