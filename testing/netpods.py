"""Stand-ins for RunPod pods on this machine: one network namespace per pod.

A :class:`NetnsPod` has what a pod has for podkit's purposes: its own IP
address (a veth pair into a namespace of its own, with no route anywhere
else, so nothing inside can download), an sshd with its own host key on a
port of its own, a volume that survives a stop, and a "container disk" that
does not: its sessions see fresh tmpfs mounts over the folders listed in
``wiped`` every time the pod starts.

    pod = NetnsPod("pka", subnet=210, state_dir=tmp / "pod-a", volume=tmp / "vol-a",
                   volume_path=sandbox_volume, client_key=key)
    ssh = pod.start(host=2, port=2201)      # pod at 10.210.0.2:2201
    pod.stop()                              # every process in the pod dies (a RunPod "stop")
    ssh = pod.start(host=3, port=2202)      # back at a new address and port with a new host key
    pod.destroy()

``volume`` is bind-mounted at ``volume_path`` inside the pod, so pods with
different volumes can share the path the deploy and the venv expect. Needs
root (ip netns, unshare, mount). Standard library only.

With ``container_env``, the pod also has a container's process tree: its
processes run in a PID namespace of their own, with a fresh ``/proc``, whose
PID 1 (a small init that starts sshd and reaps orphans) carries exactly that
environment, as a RunPod container's PID 1 carries ``RUNPOD_POD_ID`` and the
pod-scoped ``RUNPOD_API_KEY``. SSH sessions and what they start (supervisord)
read it from ``/proc/1/environ``. When PID 1 ends, the kernel ends everything
else in the pod, as a container stop does. The key is handed over in a 0600
file in the pod's state directory that the init deletes once read, never on
a command line.

    env = {"RUNPOD_POD_ID": "pod1", "RUNPOD_API_KEY": pod_key, "PATH": f"{NEW_RUNPODCTL}:{DEFAULT_PATH}",
           "RUNPOD_API_BASE_URL": f"http://10.210.0.1:{api.port}"}
    pod = NetnsPod("pka", subnet=210, ..., container_env=env)
    ssh = pod.start(host=2, port=2201)
    ssh = pod.start(host=3, port=2202, container_env={**env, "RUNPOD_POD_ID": "pod2"})  # migrated
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from podkit.sandbox.sshd import PrivateSshd, SshHost

WIPED = ("/root/.cache", "/var/tmp")

#: The stand-in runpodctl, as a v2 build (``new``) and an old one (``old``) of it: a pod's PATH leads with one.
STANDINS = Path(__file__).resolve().parent / "standins"
NEW_RUNPODCTL, OLD_RUNPODCTL = STANDINS / "new", STANDINS / "old"

#: The PATH of a Debian/Ubuntu image, as RunPod's images set it.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: PID 1 of a pod with a container environment. Started as ``init.py ENV_FILE ARGV...`` in the
#: new PID namespace, it reads the environment from ENV_FILE, deletes the file and re-executes
#: itself with exactly that environment (PID 1's environ is what the exec was given), then runs
#: ARGV (sshd) as its child, forwards stop signals to it, reaps every orphan the pod leaves
#: (daemons re-parent to it) and exits when ARGV does.
_INIT = """\
import json, os, signal, sys

if sys.argv[1] != "--":
    with open(sys.argv[1]) as handle:
        env = json.load(handle)
    os.unlink(sys.argv[1])
    os.execve(sys.executable, [sys.executable, "-I", "-S", sys.argv[0], "--", *sys.argv[2:]], env)
child = os.fork()
if child == 0:
    os.execv(sys.argv[2], sys.argv[2:])


def forward(signum, frame):
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(signum, forward)
while True:
    pid, status = os.wait()
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        sys.exit(code if code >= 0 else 128 - code)
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class NetnsPod:
    def __init__(
        self,
        name: str,
        subnet: int,
        state_dir: Path,
        volume: Path,
        volume_path: Path,
        client_key: Path,
        wiped: tuple[str, ...] = WIPED,
        container_env: dict[str, str] | None = None,
    ) -> None:
        self.name = name  # the namespace's name; short (veth names are at most 15 characters)
        self.subnet = subnet
        self.state_dir = Path(state_dir)
        self.volume = Path(volume)
        self.volume_path = Path(volume_path)
        self.client_key = Path(client_key)
        self.wiped = wiped
        #: PID 1's environment in a PID namespace of the pod's own; None: no PID namespace (as before)
        self.container_env = _checked_env(container_env)
        self.starts = 0
        self.sshd: PrivateSshd | None = None
        self.address: str | None = None

    @property
    def gateway(self) -> str:
        """The controller's address as the pod sees it."""
        return f"10.{self.subnet}.0.1"

    def ensure_namespace(self) -> None:
        """Make the namespace and its link to this side (idempotent): :meth:`start` does it, and a
        server the pod must reach (the replay of RunPod's API) may listen on :attr:`gateway` before."""
        if self.name in _ip("netns", "list").stdout.split():
            return
        outside, inside = f"{self.name}-h", f"{self.name}-p"
        _ip("netns", "add", self.name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", self.name)
        _ip("addr", "add", f"{self.gateway}/24", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("-n", self.name, "link", "set", inside, "up")

    def start(self, host: int, port: int, container_env: dict[str, str] | None = None) -> SshHost:
        """Start the pod at ``10.<subnet>.0.<host>:<port>`` with a new host key and a fresh container disk.

        + container_env: replaces the pod's container environment from this start on (a migrated
          pod gets a new RUNPOD_POD_ID); None keeps the one it has
        """
        if container_env is not None:
            self.container_env = _checked_env(container_env)
        self.ensure_namespace()
        inside = f"{self.name}-p"
        _ip("-n", self.name, "addr", "flush", "dev", inside)
        self.address = f"10.{self.subnet}.0.{host}"
        _ip("-n", self.name, "addr", "add", f"{self.address}/24", "dev", inside)
        self.starts += 1
        state = self.state_dir / f"sshd-{self.starts}"  # a new state dir: a new host key
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        for suffix in ("", ".pub"):
            shutil.copy2(f"{self.client_key}{suffix}", state / f"id_ed25519{suffix}")
        self.volume.mkdir(parents=True, exist_ok=True)
        mounts = [f"mount --bind {_q(self.volume)} {_q(self.volume_path)}"]
        for folder in self.wiped:
            mounts.append(f"mkdir -p {_q(folder)} && mount -t tmpfs -o size=64m podkit-wiped {_q(folder)}")
        self.sshd = PrivateSshd(state, listen=self.address, port=port, netns=self.name, setup="\n".join(mounts))
        if self.container_env is not None:
            self.sshd.setup += "\n" + self._pid_namespace(self.sshd)
        return self.sshd.start()

    def _pid_namespace(self, sshd: PrivateSshd) -> str:
        """Shell lines that end the sshd's setup script by exec'ing sshd (``"$@"``, the command line the
        script was given) in a new PID namespace under :data:`_INIT`, with :attr:`container_env`.

        PrivateSshd finds its server through the pid file, by a host pid whose command line names sshd
        and its config: sshd there would write its pid inside the namespace, so it writes none
        (``-o PidFile=none``) and the pid file names this shell, which becomes ``unshare``: the root
        of the pod's process tree, which :meth:`PrivateSshd.stop` ends deepest first."""
        init = sshd.state_dir / "init.py"
        init.write_text(_INIT)
        env_file = sshd.state_dir / "container-env.json"
        env_file.unlink(missing_ok=True)
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.container_env, handle)
        python = shlex.quote(sys.executable)
        return (
            f"echo $$ > {_q(sshd.pid_file)}\n"
            f"exec unshare --pid --fork --kill-child --mount-proc {python} -I -S {_q(init)} {_q(env_file)}"
            ' "$@" -o PidFile=none'
        )

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.name, check=False).stdout
        return [int(pid) for pid in out.split() if pid.isdigit() and int(pid) != os.getpid()]

    def stop(self) -> None:
        """What a RunPod stop does to a pod: every process in it ends at once."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if self.sshd is not None:
            self.sshd.stop()
            (self.sshd.state_dir / "container-env.json").unlink(missing_ok=True)  # if PID 1 never read it

    def destroy(self) -> None:
        self.stop()
        _ip("link", "del", f"{self.name}-h", check=False)
        _ip("netns", "del", self.name, check=False)

    def rx_bytes(self) -> int:
        """Bytes the pod has received through its only link (SSH sessions and HTTP answers included)."""
        out = _ip("-n", self.name, "-s", "-j", "link", "show", f"{self.name}-p", check=False).stdout
        try:
            return int(json.loads(out)[0]["stats64"]["rx"]["bytes"])
        except (ValueError, LookupError, TypeError):
            return -1


def client_key(path: Path) -> Path:
    """A new SSH client key pair at ``path`` (and ``path``.pub), for logging in to stand-in pods."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(path)


def private_link(pods: list[NetnsPod], subnet: int) -> list[str]:
    """A private network between pods (a cluster's nodes), apart from their links to this side:
    pod ``i`` gets ``10.<subnet>.0.<i+1>`` on its interface ``<name>-x``. Two pods: one veth pair
    between their namespaces. Returns the addresses, in the order of ``pods``. Idempotent; it goes
    with the namespaces (:meth:`NetnsPod.destroy`)."""
    if len(pods) != 2:
        raise ValueError("private_link joins two pods (a veth pair)")
    a, b = pods
    for pod in pods:
        pod.ensure_namespace()
    names = [f"{pod.name}-x" for pod in pods]
    addresses = [f"10.{subnet}.0.{index + 1}" for index in range(len(pods))]
    if names[0] not in _ip("-n", a.name, "-o", "link", "show").stdout:
        _ip("link", "add", names[0], "netns", a.name, "type", "veth", "peer", "name", names[1], "netns", b.name)
        for pod, name, address in zip(pods, names, addresses):
            _ip("-n", pod.name, "addr", "add", f"{address}/24", "dev", name)
            _ip("-n", pod.name, "link", "set", name, "up")
    return addresses


def stand_in_inventory(folder: Path, box, client_key: Path, port: int = 8000) -> Path:
    """The real ``inventories/runpod.py``, copied into ``folder`` beside a ``group_data/runpod.py``
    that serves the sandbox ``box``'s tiny model with the sandbox's CPU settings, its edge on every
    interface at ``port`` (the controller reaches it through the pod's address), logging in
    with ``client_key``. Returns the inventory's path (pyinfra reads group_data beside it)."""
    from podkit import PROJECT_ROOT

    inventory = Path(folder) / "runpod.py"
    (inventory.parent / "group_data").mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "inventories" / "runpod.py", inventory)
    (inventory.parent / "group_data" / "runpod.py").write_text(
        (PROJECT_ROOT / "group_data" / "sandbox.py").read_text()
        + f"""
# a stand-in pod: the edge on the pod's own address, the sandbox's model and key, the volume where the
# stand-ins mount it (a pod podkit create makes mounts its network volume here)
podkit_volume = {str(box.volume)!r}
podkit_public = True
podkit_edge_port = {port}
vllm_model = {str(box.model_dir)!r}
vllm_served_model_name = "tiny-coder"
podkit_api_key_file = {str(box.api_key_file)!r}
ssh_key = {str(client_key)!r}
"""
    )
    return inventory


def copy_volume(source: Path, target: Path) -> None:
    """A pod volume made from another: the venv, models and caches as hard links (instant,
    and nothing reinstalled), podkit's small files as copies, without the source's pid files
    and logs (a pod's processes and logs are its own)."""
    source, target = Path(source), Path(target)
    target.mkdir(parents=True)
    for item in source.iterdir():
        if item.name != "podkit":
            subprocess.run(["cp", "-al", str(item), str(target / item.name)], check=True)
    (target / "podkit").mkdir()
    for item in (source / "podkit").iterdir():
        flag = "-al" if item.name in ("venv", "cache") else "-a"
        subprocess.run(["cp", flag, str(item), str(target / "podkit" / item.name)], check=True)
    for folder in ("run", "logs"):
        for stale in (target / "podkit" / folder).glob("*"):
            stale.unlink()


def _q(path) -> str:
    return shlex.quote(str(path))


def _checked_env(env: dict[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in str(value):
            raise ValueError(f"container_env: {name!r} cannot be set (a name needs no '=' or NUL, a value no NUL)")
    return {name: str(value) for name, value in env.items()}
