"""Trust on first use by pod id, against real private sshds on loopback."""

import shutil

import pytest

from podkit.runpod.hostkeys import PodKeys, scan
from podkit.runpod.pods import PodHost
from podkit.sandbox.sshd import PrivateSshd
from podkit_cli.hosts import run_on as run

pytestmark = [
    pytest.mark.proc,
    pytest.mark.skipif(
        shutil.which("sshd") is None and not shutil.os.path.exists("/usr/sbin/sshd"),
        reason="openssh-server is not installed (.ci/run installs it)",
    ),
]


@pytest.fixture
def sshds(tmp_path):
    started = []

    def start(name, port=None):
        sshd = PrivateSshd(tmp_path / name, port=port)
        started.append(sshd)
        return sshd, sshd.start()

    yield start
    for sshd in started:
        sshd.stop()


def pod(pod_id, ssh, name="coder-1", started_at=None, status_change=None):
    return PodHost(
        name,
        pod_id,
        {"ssh_hostname": ssh.hostname, "ssh_port": ssh.port, "ssh_user": ssh.user, "ssh_key": str(ssh.key_file)},
        started_at,
        status_change,
    )


def test_first_use_then_silence_then_a_changed_key_is_refused_until_accepted(tmp_path, sshds):
    keys = PodKeys(tmp_path / "state")
    first, ssh = sshds("first")

    kept, skipped, notes = keys.check([pod("pod-a", ssh)], accept=set())
    assert [h.name for h in kept] == ["coder-1"] and not skipped
    assert len(notes) == 1 and "new pod, trusting its host key SHA256:" in notes[0]
    # pyinfra (paramiko) connects with strict checking against the file written for this run
    assert kept[0].data["ssh_strict_host_key_checking"] == "yes"
    assert run("coder-1", kept[0].data, "echo hello").stdout.strip() == "hello"

    kept, skipped, notes = keys.check([pod("pod-a", ssh)], accept=set())
    assert len(kept) == 1 and not skipped and not notes

    # the same pod id answers at the same address with another key (its container disk was wiped)
    first.stop()
    _, again = sshds("second", port=ssh.port)
    kept, skipped, notes = keys.check([pod("pod-a", again)], accept=set())
    assert not kept and len(skipped) == 1
    line = skipped[0].line()
    assert "its SSH host key changed" in line and "PODKIT_ACCEPT_NEW_HOST_KEY=pod-a" in line and "\n" not in line

    kept, skipped, notes = keys.check([pod("pod-a", again)], accept={"pod-a"})
    assert len(kept) == 1 and "accepting its new host key" in notes[0]
    assert run("coder-1", kept[0].data, "echo again").stdout.strip() == "again"


RENTED = "Rented by User: Mon Nov 23 2026 05:40:00 GMT+0000 (Coordinated Universal Time)"
RESUMED = "Rented by User: Mon Nov 23 2026 05:41:10 GMT+0000 (Coordinated Universal Time)"


@pytest.mark.parametrize(
    "started_then, started_now, trusted, changes",
    [
        (1_000_000.0, 1_000_000.0 + 8 * 3600, True, (None, None)),  # stopped at night, started in the morning
        (1_000_000.0, 1_000_000.0 + 3.0, False, (None, None)),  # the same container (uptime jitter): no restart
        (None, 1_000_000.0, False, (None, None)),  # recorded without a date: nothing vouches for the change
        # stopped and started again 70 s after the key was seen (an idle stop of under a minute, then
        # podkit up): within the uptime's slack, but the API's startedAt moved
        (1_000_000.0, 1_000_000.0 + 70, True, (RENTED, RESUMED)),
        (1_000_000.0, 1_000_000.0 + 3.0, False, (RENTED, RENTED)),  # no stop, no start: the change is unexplained
        (1_000_000.0, 1_000_000.0 + 70, False, (None, RESUMED)),  # recorded without it: nothing to compare
    ],
)
def test_a_restart_the_api_reports_explains_a_new_key(tmp_path, sshds, started_then, started_now, trusted, changes):
    keys = PodKeys(tmp_path / "state")
    first, ssh = sshds("before")
    keys.check([pod("pod-a", ssh, started_at=started_then, status_change=changes[0])], accept=set())
    first.stop()
    _, again = sshds("after", port=ssh.port)  # the container's start script made new host keys
    kept, skipped, notes = keys.check(
        [pod("pod-a", again, started_at=started_now, status_change=changes[1])], accept=set()
    )
    assert (len(kept), len(skipped)) == ((1, 0) if trusted else (0, 1))
    if trusted:
        assert "restarted since its host key was recorded" in notes[0]
        assert run("coder-1", kept[0].data, "echo up").stdout.strip() == "up"
    else:
        assert "shows no restart" in skipped[0].line()


def test_a_migrated_pod_is_a_new_pod_at_a_new_address(tmp_path, sshds):
    keys = PodKeys(tmp_path / "state")
    _, old = sshds("old")
    keys.check([pod("pod-a", old)], accept=set())
    _, new = sshds("new")  # new pod id, new port, new host key
    kept, skipped, notes = keys.check([pod("pod-b", new)], accept=set())
    assert len(kept) == 1 and not skipped and "new pod" in notes[0]
    assert set(keys.load()) == {"pod-a", "pod-b"}
    assert f"[{new.hostname}]:{new.port} ssh-ed25519 " in keys.known_hosts.read_text()


def test_an_unreachable_pod_is_kept_for_pyinfra_to_report(tmp_path, sshds):
    keys = PodKeys(tmp_path / "state")
    _, ssh = sshds("up")
    gone = PodHost("coder-2", "pod-gone", {"ssh_hostname": "127.0.0.1", "ssh_port": 9, "ssh_user": "root"})
    kept, skipped, notes = keys.check([pod("pod-a", ssh), gone], accept=set())
    assert [h.name for h in kept] == ["coder-1", "coder-2"] and not skipped
    assert any("pod coder-2 (pod-gone): cannot connect to 127.0.0.1:9" in note for note in notes)


def test_scan_reads_the_offered_key_without_logging_in(sshds):
    sshd, ssh = sshds("scan")
    key = scan(ssh.hostname, ssh.port)
    assert key.type == "ssh-ed25519"
    assert key.key == (sshd.host_key.with_name("ssh_host_ed25519_key.pub")).read_text().split()[1]
    assert sshd.sessions() == []  # a handshake only: no session was opened
