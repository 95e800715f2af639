"""supervisord for real: the rendered supervisord.conf, launch.sh and edge.sh keeping a stand-in
vLLM and a stand-in Caddy running, driven by podctl as the deploy drives it (``supervise``,
``probe``, ``wait``) and read back through supervisord's own socket.

The stand-in vLLM is a shell script in place of the ``vllm`` binary: it says it is up and
sleeps; a file in its control folder makes it exit with a status, start an engine child named
``VLLM::EngineCore`` (as vLLM does), or print enough to rotate the log. The stand-in Caddy
sleeps, or exits at once while its control file says so. supervisord is PyPI's, at the version
podkit pins (``supervisor_bin`` in conftest.py); a start of vLLM counts after 1 s instead of 10
(``START_SECONDS``) to keep the tests short.
Nothing listens on a port; each pod lives in a short folder in /tmp (supervisord's socket path
must fit in 107 bytes); every process is ended when a test ends, whatever happened.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from podkit.client.serverinfo import describe_config
from podkit.client.status import host_status, parse_status, status_config
from podkit.host import render
from podkit.host.hostplan import HostPlan
from podkit.host.podctl import podctl_command
from podkit.host.probe import parse_probe, probe_config, server_config
from podkit.host.start.diagnose import diagnose
from podkit.host.start.readiness import WaitResult, wait_config
from podkit.host.supervision import status_problems
from podkit.settings import PackageSpec
from podkit.wayin import way_in
from tests.helpers import pid_line, podctl, settings_for, stand_in_supervisord, zombie

STAND_IN_VLLM = """#!/bin/sh
# stand-in vLLM, started by launch.sh with the serve argv
control={control}
echo "stand-in vLLM $$ up"
printf '%s\\0' "$@" > "$control/argv"
if [ -f "$control/talk" ]; then
    i=0
    while [ "$i" -lt 12 ]; do head -c 500 /dev/zero | tr '\\0' x; echo; i=$((i + 1)); done
fi
[ -f "$control/exit" ] && exit "$(cat "$control/exit")"
[ -f "$control/engine" ] && bash -c 'exec -a VLLM::EngineCore sleep 300' &
if [ -f "$control/slow-stop" ]; then  # a stop that takes seconds (vLLM ending its requests)
    trap 'sleep 3; exit 0' TERM
    while :; do sleep 1; done
fi
exec sleep 300
"""
STAND_IN_CADDY = """#!/bin/sh
# stand-in Caddy, exec'd by edge.sh; exits at once while the control folder says so (a port taken)
[ -f {control}/caddy-exit ] && {{ echo "stand-in caddy: address already in use"; exit 1; }}
exec sleep 300
"""


def wait_for(predicate, timeout=20.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def stat_fields(pid):
    """A process's /proc stat fields after its name (state, ppid, pgrp, session, ...); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None


def live(pid):
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def in_session(session):
    """Live processes of ``session``: supervisord setsid()s, and every program stays in its session."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(entry.name)) and fields[0] not in ("Z", "X"):
            if fields[3] == str(session):
                found.append(int(entry.name))
    return found


def kill(pids):
    """SIGKILL to each of ``pids``; one that ended meanwhile (a program whose supervisor just died) is gone already."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def engine_of(server):
    """The live stand-in engine whose parent is ``server``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not live(entry.name):
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0 == b"VLLM::EngineCore" and stat_fields(entry.name)[1] == str(server):
            return int(entry.name)
    return None


class Pod:
    """A volume laid out as the deploy leaves it, with supervisord from ``supervisor_bin`` in its venv."""

    def __init__(self, root: Path, supervisor_bin: Path, volume: str = "vol", **data):
        self.root, self.control = root, root / "control"
        self.control.mkdir()
        self.settings = settings_for(root / volume, **data)
        paths = self.paths = self.settings.paths
        stand_in = self.stand_in = root / "stand-in" / "vllm"
        stand_in.parent.mkdir()
        stand_in.write_text(STAND_IN_VLLM.format(control=shlex.quote(str(self.control))))
        stand_in.chmod(0o755)
        self.launch = HostPlan(self.settings.model, 2048, 1, None, None)
        self.files = render.host_files(
            self.settings,
            package=PackageSpec("vllm", "0.33.0"),
            vllm_bin=str(stand_in),
            launch=self.launch,
            way=way_in("box", {"ssh_hostname": "127.0.0.1"}),
        )
        for folder, mode in paths.directories().items():
            Path(folder).mkdir(parents=True, exist_ok=True)
            os.chmod(folder, int(mode, 8))
        for file in self.files.values():
            Path(file.path).write_text(file.content)
            os.chmod(file.path, int(file.mode, 8))
        Path(paths.api_key).write_text("sk-" + "k" * 32 + "\n")
        os.chmod(paths.api_key, 0o600)
        venv_bin = Path(paths.venv) / "bin"
        venv_bin.mkdir(parents=True)
        for name in ("supervisord", "supervisorctl", "python"):
            (venv_bin / name).symlink_to(supervisor_bin / name)
        (venv_bin / "caddy").write_text(STAND_IN_CADDY.format(control=shlex.quote(str(self.control))))
        (venv_bin / "caddy").chmod(0o755)
        # what the deploy hands supervisor.programs, and so podctl supervise
        self.cfg = {**server_config(self.settings), "supervisord_log": paths.supervisord_log}
        self.sessions = set()

    def podctl(self, action, cfg):
        out = subprocess.run(
            ["sh", "-c", podctl_command(action, cfg)], capture_output=True, text=True, timeout=150, check=True
        )
        return out.stdout.strip().splitlines()[-1]

    def supervise(self, **asked):
        result = json.loads(self.podctl("supervise", {**self.cfg, **asked}))
        self.note_session()
        return result

    def probe(self):
        return parse_probe(self.podctl("probe", probe_config(self.settings)))

    def wait(self, window=1):
        return WaitResult.parse(self.podctl("wait", wait_config(self.settings, window=window)))

    def supervisord(self):
        return podctl.supervisord_pid(self.cfg["supervisord"])

    def note_session(self):
        """Remember supervisord's session (it setsid()s as it daemonizes), to end all of it at the end."""
        if (pid := self.supervisord()) and (session := int(stat_fields(pid)[3])) != os.getsid(0):
            self.sessions.add(session)

    def programs(self):
        return podctl.supervisord_programs(self.paths.supervisor_socket)

    def rpc(self):
        return podctl.supervisord_rpc(self.paths.supervisor_socket, 30).supervisor

    def pid(self, name):
        return podctl.pid_alive(podctl.read_text(os.path.join(self.paths.run, name)))

    def running(self, timeout=20.0):
        """Wait until supervisord says every program is RUNNING; vLLM's and the edge's pids, from the pid files."""
        want = {"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"}
        wait_for(lambda: self.programs() == want, timeout, f"every program RUNNING (now {self.programs()})")
        return wait_for(lambda: self.pid("vllm.pid")), wait_for(lambda: self.pid("edge.pid"))

    def log(self):
        return Path(self.paths.log_file).read_text()

    def crashes(self):
        return Path(self.paths.run, "crashes").read_text().strip()

    def end(self):
        """SIGKILL to every process of supervisord's sessions (how a stop ends them is tested above)."""
        self.note_session()
        for session in self.sessions:
            kill(in_session(session))
        wait_for(lambda: not any(in_session(s) for s in self.sessions), 10, "every process of the pod gone")


@pytest.fixture
def pod(supervisor_bin, monkeypatch):
    """``pod(**data)``: a fresh volume; supervisord is started by the test (podctl supervise)."""
    monkeypatch.setattr(render, "START_SECONDS", 1)
    made = []

    def make(volume="vol", **data):
        made.append(Pod(Path(tempfile.mkdtemp(prefix="pk-", dir="/tmp")), supervisor_bin, volume, **data))
        return made[-1]

    yield make
    for one in made:
        one.end()
        shutil.rmtree(one.root, ignore_errors=True)


READ_CONF = """
import json, shlex, sys
from supervisor.options import ServerOptions
options = ServerOptions()
options.realize(["-c", sys.argv[1]])
print(json.dumps({
    "pidfile": options.pidfile, "logfile": options.logfile, "minfds": options.minfds,
    "socket": [(c["file"], c["chmod"]) for c in options.server_configs],
    "programs": {p.name: [shlex.split(p.command), p.stdout_logfile, p.stdout_logfile_maxbytes, p.stdout_logfile_backups,
                 p.startretries, p.startsecs, p.stopasgroup, p.killasgroup, p.redirect_stderr, p.autorestart.__name__]
                 for g in options.process_group_configs for p in g.process_configs},
}))
"""


@pytest.mark.proc
def test_the_rendered_conf_is_read_by_supervisord_as_podkit_means_it(pod, supervisor_bin):
    """supervisord's own parser on the rendered file: both programs, their scripts, group signals,
    log sizes and copies, the retry count, and a control socket that only its user can use."""
    box = pod(podkit_log_max_bytes=4096, podkit_log_keep=2, podkit_start_retries=4)
    out = subprocess.run(
        [str(supervisor_bin / "python"), "-c", READ_CONF, box.paths.supervisord_conf],
        capture_output=True,
        text=True,
        check=True,
    )
    conf = json.loads(out.stdout)
    paths = box.paths
    assert conf["pidfile"] == paths.supervisord_pid and conf["logfile"] == paths.supervisord_log
    assert conf["socket"] == [[paths.supervisor_socket, 0o700]] and conf["minfds"] == 1024
    assert conf["programs"] == {
        "vllm": [[paths.launch_script], paths.log_file, 4096, 2, 4, 1, True, True, True, "RestartUnconditionally"],
        "edge": [[paths.edge_script], paths.edge_log, 4096, 2, 4, 2, True, True, True, "RestartUnconditionally"],
        "idle": [
            [f"{paths.venv}/bin/python", paths.idle_script, paths.idle_config],
            paths.idle_log,
            4096,
            2,
            4,
            2,
            True,
            True,
            True,
            "RestartUnconditionally",
        ],
    }


@pytest.mark.proc
def test_supervise_starts_supervisord_which_runs_both_programs_from_the_current_files(pod):
    box = pod()
    assert box.probe().supervisor_pid is None
    assert box.supervise() == {"ok": True, "done": ["started supervisord"]}
    vllm, edge = box.running()
    state = box.probe()
    assert state.supervisor_pid == box.supervisord() and state.programs == {
        "vllm": "RUNNING",
        "edge": "RUNNING",
        "idle": "RUNNING",
    }
    assert (state.vllm_pid, state.edge_pid) == (vllm, edge) and state.supervised("supervisord")
    # launch.sh and edge.sh recorded what they started from: a re-apply with the same files restarts nothing
    assert state.serving_current_files() and state.edge_current_files()
    assert set(state.serving) == {box.paths.launch_script, box.paths.env_file, box.paths.api_key}
    assert state.crashes == 0 and state.orphans == [] and state.legacy_runner is None
    assert box.supervise() == {"ok": True, "done": []}, "nothing stopped, nothing asked: nothing done"
    assert (box.pid("vllm.pid"), box.pid("edge.pid")) == (vllm, edge)
    # vLLM got the serve argv as rendered, one argument each (on 127.0.0.1 only), its output in vllm.log
    argv = (box.control / "argv").read_bytes().decode().split("\0")[:-1]
    assert argv == render.serve_argv(box.settings, str(box.stand_in), box.launch)[1:]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "podkit: starting vLLM" in box.log() and f"stand-in vLLM {vllm} up" in box.log()


@pytest.mark.proc
def test_quick_exits_back_off_then_leave_the_program_fatal_until_supervise_starts_it(pod, monkeypatch):
    """A server that exits within its start (a bad flag, no memory) is retried after 1, 2 ... s,
    podkit_start_retries times, then left FATAL: readiness stops waiting and names it, and the next
    apply (supervise) starts it again with a fresh exit count."""
    # the product's start time (the fixture's 1 s: on a busy machine launch.sh took longer than that
    # to exit, and supervisord rightly counted it started)
    monkeypatch.setattr(render, "START_SECONDS", 10)
    box = pod(podkit_start_retries=2)
    (box.control / "exit").write_text("3\n")
    began = time.monotonic()
    box.supervise()

    def fatal():
        state = box.programs().get("vllm")
        assert state != "RUNNING", "a server that exits at once was taken for started"
        return state == "FATAL"

    wait_for(fatal, 20, "vllm FATAL")
    took = time.monotonic() - began
    assert took >= 1 + 2, f"no back-off between the quick exits ({took:.1f}s)"
    assert box.log().count("podkit: starting vLLM") == 3, "the first start and podkit_start_retries retries"
    assert box.crashes() == "3" and box.programs()["edge"] == "RUNNING"
    state = box.probe()
    assert state.programs["vllm"] == "FATAL" and not state.supervised("supervisord")
    waited = box.wait()
    assert waited.fatal == ["vllm"] and waited.hopeless and not waited.ready
    (box.control / "exit").unlink()
    assert box.supervise() == {"ok": True, "done": ["started vllm"]}
    box.running(timeout=60)
    assert box.crashes() == "0"


@pytest.mark.proc
def test_an_edge_that_cannot_start_is_left_fatal_and_the_next_supervise_starts_it(pod):
    """Caddy exits at once (its port taken): retried podkit_start_retries times with back-off, then
    FATAL; vLLM runs on; readiness gives up at once and names the edge; supervise starts it again."""
    box = pod(podkit_start_retries=1)
    (box.control / "caddy-exit").write_text("")
    box.supervise()
    wait_for(lambda: box.programs() == {"vllm": "RUNNING", "edge": "FATAL", "idle": "RUNNING"}, 20, "the edge FATAL")
    assert Path(box.paths.edge_log).read_text().count("address already in use") == 2, "one start, one retry"
    state = box.probe()
    assert state.programs["edge"] == "FATAL" and not state.supervised("supervisord") and state.vllm_pid
    waited = box.wait()
    assert waited.fatal == ["edge"] and waited.hopeless
    assert f"the edge (Caddy) on port {box.settings.edge_port} does not" in waited.failure(box.settings, 3)
    vllm = box.pid("vllm.pid")
    (box.control / "caddy-exit").unlink()
    assert box.supervise() == {"ok": True, "done": ["started edge"]}
    assert box.running()[0] == vllm, "vLLM was left alone"


@pytest.mark.proc
def test_supervise_restarts_only_the_program_named(pod):
    box = pod()
    box.supervise()
    vllm, edge = box.running()
    supervisord = box.supervisord()
    assert box.supervise(restart=["vllm"]) == {"ok": True, "done": ["restarted vllm"]}
    new_vllm = wait_for(lambda: (p := box.pid("vllm.pid")) and p != vllm and p, what="a new server")
    assert box.pid("edge.pid") == edge and box.supervisord() == supervisord and not live(vllm)
    assert box.supervise(restart=["edge"]) == {"ok": True, "done": ["restarted edge"]}
    # verify right after the deploy: the edge just started is read once it has run its 2 s, not
    # failed for STARTING (supervisord's startsecs)
    assert box.programs()["edge"] == "STARTING"
    described = json.loads(box.podctl("describe", describe_config(box.settings)))
    assert described["programs"] == {"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"}
    new_edge = wait_for(lambda: (p := box.pid("edge.pid")) and p != edge and p, what="a new edge")
    assert box.pid("vllm.pid") == new_vllm and not live(edge) and new_edge
    assert box.crashes() == "0", "a restart asked for is no crash"


@pytest.mark.proc
def test_a_deploy_meeting_a_stop_under_way_starts_the_server_once_it_stopped(pod):
    """The idle watcher stops vLLM as a re-apply reaches supervise: supervisord drops a start asked
    while the program is STOPPING ("already running"), and the server ended stopped after a deploy
    that reported success (seen in the e2e layer on a busy machine)."""
    box = pod()
    (box.control / "slow-stop").write_text("")
    box.supervise()
    vllm, _ = box.running()
    box.rpc().stopProcess("vllm", False)  # the watcher's stop, under way
    assert box.programs()["vllm"] == "STOPPING"
    assert box.supervise() == {"ok": True, "done": ["started vllm"]}
    assert box.programs()["vllm"] in ("STARTING", "RUNNING")
    assert wait_for(lambda: (p := box.pid("vllm.pid")) and p != vllm and p, what="a new server")
    assert not live(vllm)


@pytest.mark.proc
def test_supervise_with_a_changed_config_restarts_supervisord_and_both_programs(pod):
    box = pod()
    box.supervise()
    vllm, edge = box.running()
    first = box.supervisord()
    done = box.supervise(reload=True)
    assert done == {"ok": True, "done": ["stopped supervisord (its config changed)", "started supervisord"]}
    assert box.supervisord() != first and not live(first) and not live(vllm) and not live(edge)
    new_vllm, new_edge = box.running()
    assert {new_vllm, new_edge}.isdisjoint({vllm, edge})


@pytest.mark.proc
def test_supervisord_rotates_the_server_log_keeping_log_keep_copies(pod):
    box = pod(podkit_log_max_bytes=1024, podkit_log_keep=2)
    (box.control / "talk").write_text("")  # 12 lines of 500 bytes at each start
    box.supervise()
    box.running()
    log = Path(box.paths.log_file)
    wait_for(lambda: Path(f"{log}.2").exists(), what="two rotated copies")
    assert not Path(f"{log}.3").exists(), "more copies kept than podkit_log_keep"
    # supervisord rotates once a write took the file past the limit: a busy machine may hand it a start's
    # 12 lines in one read, so a copy holds at most the limit and one start's output (seen: 2005 bytes)
    most = 1024 + 12 * 501
    assert log.stat().st_size <= most and Path(f"{log}.1").stat().st_size <= most
    # key_leaks and the diagnosis read the copies podctl finds beside the log
    assert podctl.rotated(str(log)) == [str(log), f"{log}.1", f"{log}.2"]


@pytest.mark.proc
def test_stale_pid_files_after_a_pod_restart_name_nothing_and_supervise_starts_afresh(pod):
    """A pod restart kills every process and keeps the volume: supervisord.pid, vllm.pid and
    edge.pid stay, and their pids are soon another process's. None is taken for podkit's."""
    box = pod()
    box.supervise()
    box.running()
    for session in box.sessions:  # the pod restart: everything podkit ran, at once
        kill(in_session(session))
    wait_for(lambda: not any(in_session(s) for s in box.sessions), what="every process gone")
    run = Path(box.paths.run)
    other = subprocess.Popen(["sleep", "60"])  # a pid reused by another program
    stranger = stand_in_supervisord(str(box.root / "another-volume.conf"))  # another volume's supervisord
    dead, dead_line = zombie()
    try:
        mine, start = pid_line(os.getpid()).split()
        for supervisord_pid in (other.pid, stranger.pid, dead.pid):
            (run / "supervisord.pid").write_text(f"{supervisord_pid}\n")
            (run / "vllm.pid").write_text(f"{mine} {int(start) + 1}\n")  # this pid, another start time
            (run / "edge.pid").write_text(dead_line)
            state = box.probe()
            assert (state.supervisor_pid, state.vllm_pid, state.edge_pid) == (None, None, None), supervisord_pid
            assert state.programs == {} and not state.supervised("supervisord") and state.endpoint is None
        assert Path(box.paths.supervisor_socket).exists(), "the socket file stays too"
        assert box.supervise() == {"ok": True, "done": ["started supervisord"]}
        box.running()
        assert box.probe().supervisor_pid == box.supervisord() not in (other.pid, stranger.pid)
    finally:
        for proc in (other, stranger, dead):
            proc.kill()
            proc.wait()


@pytest.mark.proc
def test_a_server_killed_with_sigkill_is_restarted_and_launch_sh_ends_its_engine(pod):
    """The OOM killer's SIGKILL leaves the engine re-parented: launch.sh, leader of the group, ends
    what is left of it, counts the exit, and supervisord starts the next server (the edge is left
    alone); a stop ends the server and its engine, and is no crash."""
    box = pod()
    (box.control / "engine").write_text("")
    box.supervise()
    first, edge = box.running()
    engine = wait_for(lambda: engine_of(first), what="the stand-in engine")
    launch_sh = int(stat_fields(first)[2])
    assert int(stat_fields(engine)[2]) == launch_sh == int(stat_fields(launch_sh)[2]), "one group, led by launch.sh"
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not live(engine), 15, "the old engine to end")
    second = wait_for(lambda: (p := box.pid("vllm.pid")) and p != first and p, 20, "a new server")
    new_engine = wait_for(lambda: engine_of(second), what="the new engine")
    assert box.pid("edge.pid") == edge, "the edge is left alone"
    state = box.probe()
    assert state.orphans == [] and state.crashes == 1 and box.crashes() == "1"
    log = box.log()
    assert "podkit: vLLM exited with status 137" in log and log.count("podkit: starting vLLM") == 2
    box.rpc().stopProcess("vllm", False)  # what a restart, a reload or a shutdown does first: SIGTERM to the group
    wait_for(lambda: not live(new_engine) and not live(second), 5, "the server and its engine to stop")
    assert box.crashes() == "1", "a stop is no crash"


@pytest.mark.proc
def test_a_volume_path_with_a_space_a_quote_or_a_dollar_is_run_and_summed_as_it_is(pod):
    """supervisord splits command= itself (shlex): the script's path is one quoted word. launch.sh
    records the sums of what it started from whatever the path holds, and nothing in it runs."""
    box = pod(volume="my vol $(touch PWNED) 'q' \"d\" `touch PWNED` ${HOME}")
    assert box.supervise() == {"ok": True, "done": ["started supervisord"]}
    box.running()
    state = box.probe()
    assert state.serving_current_files() and state.edge_current_files() and state.supervised("supervisord")
    assert not list(box.root.rglob("PWNED")) and not Path("PWNED").exists()


@pytest.mark.proc
def test_a_volume_path_with_a_percent_sign_is_served(pod):
    box = pod(volume="100% full")
    assert box.supervise()["ok"]
    box.running()


def test_a_volume_path_with_a_semicolon_after_a_space_is_refused_as_a_setting():
    """supervisord's parser reads " ;" (and " #") as the start of a comment: such a volume is
    refused by its setting's check, with the reason, before anything is written."""
    from podkit.checks import SettingsError
    from podkit.settings import Settings
    from tests.helpers import sample_data

    for volume in ("/data/a ;b", "/data/a #b"):
        with pytest.raises(SettingsError, match="podkit_volume=.*cannot carry"):
            Settings.from_mapping({**sample_data(), "podkit_volume": volume})


# --- launch.sh on its own: started as a group leader, as supervisord and systemd start it ---------


def launch_alone(box, vllm_script):
    """launch.sh in a session of its own with ``vllm_script`` as the vLLM stand-in."""
    box.stand_in.write_text("#!/bin/sh\n" + vllm_script)
    with open(box.paths.log_file, "ab") as log:
        return subprocess.Popen([box.paths.launch_script], stdout=log, stderr=log, start_new_session=True)


def end_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.proc
def test_launch_sh_ends_as_soon_as_vllm_ended_and_nothing_is_left_of_its_group(pod):
    box = pod()
    launch = launch_alone(box, "sleep 0.5\nexit 3\n")
    try:
        assert launch.wait(timeout=4) == 3
    finally:
        end_group(launch)


@pytest.mark.proc
def test_launch_sh_passes_on_the_status_of_a_vllm_that_exits_at_once(pod):
    box = pod()
    launch = launch_alone(box, "exit 3\n")
    try:
        line = wait_for(lambda: [x for x in box.log().splitlines() if "podkit: vLLM exited" in x], 5, "the exit line")
        assert line[0].endswith("podkit: vLLM exited with status 3")
    finally:
        end_group(launch)


# --- issue 27: one supervisor per volume, never an empty key, no promise without its process -----


@pytest.mark.proc
def test_an_empty_key_file_stops_the_launch_script_before_vllm_with_one_line(pod):
    """vLLM takes an empty VLLM_API_KEY for no key at all: the launch script refuses to start it."""
    box = pod()
    Path(box.paths.api_key).write_text("")
    launch = launch_alone(box, f"touch {shlex.quote(str(box.control / 'vllm-ran'))}\nsleep 30\n")
    try:
        assert launch.wait(timeout=10) == 1
    finally:
        end_group(launch)
    assert not (box.control / "vllm-ran").exists() and "podkit: starting vLLM" not in box.log()
    assert f"podkit: the API key file {box.paths.api_key} is empty; re-apply" in box.log()
    found = diagnose(box.log().splitlines())
    assert found and found.line().startswith("the API key file on the host is empty")
    edge = subprocess.run([box.paths.edge_script], capture_output=True, text=True, timeout=10)
    assert edge.returncode == 1 and f"the API key file {box.paths.api_key} is empty" in edge.stderr
    assert not (box.control / "caddy-ran").exists()


@pytest.mark.proc
def test_after_supervisord_is_killed_its_programs_are_strays_that_supervise_will_not_start_beside(pod):
    """kill -9 supervisord: its programs run on, re-parented. The probe names each as a stray,
    supervise refuses to start a second supervisord beside them, and once they are reaped it
    starts one, whose programs are then the only ones."""
    box = pod()
    box.supervise()
    vllm, edge = box.running()
    old = box.supervisord()
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not box.supervisord(), 10, "supervisord gone")
    state = box.probe()
    strays = {o["program"]: o for o in state.orphans if o.get("stray")}
    assert set(strays) == {"vllm", "edge", "idle"}, state.orphans
    assert vllm in strays["vllm"]["pids"] and strays["edge"]["pid"] == edge
    assert state.stray_programs() == {"vllm", "edge", "idle"}
    refused = box.supervise()
    assert not refused["ok"] and "still run(s) outside the supervisor" in refused["error"]
    assert f"the edge (Caddy) pid {edge}" in refused["error"] and not box.supervisord()
    cfg = {"orphans": [{"pid": o["pid"], "start": o["start"]} for o in state.orphans], "timeout": 5}
    assert json.loads(box.podctl("reap", cfg))["left"] == []
    assert box.supervise() == {"ok": True, "done": ["started supervisord"]}
    new_vllm, new_edge = box.running()
    assert (new_vllm, new_edge) != (vllm, edge) and not live(vllm) and not live(edge)
    assert not [o for o in box.probe().orphans if o.get("stray")]


@pytest.mark.proc
def test_an_idle_config_the_watcher_cannot_read_leaves_it_fatal_and_status_says_so(pod):
    """A malformed bin/idle.json: the watcher says one line and exits; supervisord leaves it FATAL;
    status shows no deadline but the problem, with that line and the fix."""
    box = pod(podkit_start_retries=1)
    config = json.loads(Path(box.paths.idle_config).read_text())
    Path(box.paths.idle_config).write_text(json.dumps({**config, "idle_seconds": float("nan")}))
    box.supervise()
    wait_for(lambda: box.programs().get("idle") == "FATAL", 20, "the watcher FATAL")
    said = Path(box.paths.idle_log).read_text().splitlines()
    assert said[-1].endswith(
        f"podkit-idle: {box.paths.idle_config}: idle_seconds must be a finite number from 0 to 31622400 (got nan); "
        "re-apply (podkit up), which writes a valid one"
    )
    remote = parse_status(box.podctl("status", status_config(box.settings, "box")))
    problems = status_problems(remote)
    assert problems == [
        "the idle watcher is FATAL under supervisord: nothing stops the server (or the pod) when it is idle: it bills "
        f"until stopped by hand; its log says: {said[-1]}; fix that and re-apply (podkit up)"
    ]
    assert host_status("box", box.settings, remote).idle_stop_in_minutes is None


def waited(crashes=0, crashes_before=0, vllm_pid=None, programs=None, stopped=None):
    """``podctl wait``'s answer for a server that does not answer yet."""
    return WaitResult.parse(
        json.dumps(
            {
                "ready": False,
                "health": None,
                "models": None,
                "runner": {
                    "pid": 4101,
                    "vllm_pid": vllm_pid,
                    "crashes": crashes,
                    "programs": programs or {"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"},
                },
                "crashes_before": crashes_before,
                "stopped": stopped,
                "log_tail": [],
            }
        )
    )


@pytest.mark.parametrize(
    "result, hopeless, says",
    [
        # three exits counted before the re-apply, the server between two starts: not this start's crashes
        (waited(crashes=3, crashes_before=3), False, "vLLM did not answer within"),
        (waited(crashes=4, crashes_before=3), False, "vLLM did not answer within"),
        (waited(crashes=5, crashes_before=3), True, "vLLM exited 2 times after"),
        (waited(crashes=2), True, "vLLM exited 2 times after"),
        (waited(crashes=5, crashes_before=0, vllm_pid=4230), False, "vLLM did not answer within"),
        (
            waited(
                programs={"vllm": "STOPPED", "edge": "RUNNING", "idle": "RUNNING"},
                stopped={"by": "podkit down", "why": "stopped with podkit down", "at": 1},
            ),
            True,
            "vLLM was stopped on purpose while the deploy waited for it (podkit down: stopped with podkit down); "
            "re-apply (podkit up) to start it",
        ),
    ],
)
def test_readiness_gives_up_on_this_starts_crashes_and_on_a_stop_on_purpose_only(result, hopeless, says):
    settings = settings_for(Path("/v"))
    assert result.hopeless is hopeless
    assert result.failure(settings, 30).startswith(says)


@pytest.mark.proc
def test_a_server_stopped_with_podkit_down_during_the_wait_ends_the_wait_saying_so(pod):
    box = pod()
    box.supervise()
    box.running()
    down = json.loads(box.podctl("down", status_config(box.settings, "box")))
    assert down["ok"], down
    result = box.wait(window=30)
    assert result.hopeless and result.stopped["by"] == "podkit down"
    assert result.failure(box.settings, 3).startswith("vLLM was stopped on purpose while the deploy waited")


@pytest.mark.proc
def test_podkit_down_waits_for_a_deploys_lock_and_stops_without_the_venvs_python_or_says_what_is_missing(pod):
    import fcntl

    box = pod()
    box.supervise()
    box.running()
    cfg = status_config(box.settings, "box")
    held = os.open(box.settings.volume, os.O_RDONLY)  # a deploy's lock on the volume folder
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        refused = json.loads(box.podctl("down", {**cfg, "lock_wait": 1}))
    finally:
        os.close(held)
    assert not refused["ok"] and refused["error"].startswith("a deploy holds this host (")
    assert refused["error"].endswith("did not end within 1 s; wait for it to end, then run podkit down again")
    assert box.programs()["vllm"] == "RUNNING"
    os.rename(box.paths.idle_script, box.paths.idle_script + ".away")
    missing = json.loads(box.podctl("down", cfg))
    assert missing == {
        "ok": False,
        "error": f"the idle watcher's program {box.paths.idle_script} is missing, and the stop goes through it; "
        "re-apply (podkit up) to restore podkit's files, then run podkit down again",
    }
    os.rename(box.paths.idle_script + ".away", box.paths.idle_script)
    # the venv gone (deleted by hand, or being reinstalled) while supervisord runs: idle.py runs on
    # podctl's Python and stops vLLM through supervisord's socket, as supervisorctl would
    ctl = Path(box.paths.venv) / "bin" / "supervisorctl"
    os.rename(ctl, f"{ctl}.away")
    os.unlink(Path(box.paths.venv) / "bin" / "python")
    try:
        done = json.loads(box.podctl("down", cfg))
        assert done["ok"] and done["done"].startswith("stopped vLLM (through supervisord's socket: "), done
        assert box.programs()["vllm"] == "STOPPED"
        again = json.loads(box.podctl("down", cfg))
        assert again == {"ok": True, "done": "vLLM was not running"}, again
    finally:
        os.rename(f"{ctl}.away", ctl)


def test_podkit_down_says_in_one_line_what_came_back_instead_of_an_answer():
    from podkit_cli.lifecycle import parse_status_line

    assert parse_status_line("", "Traceback ...\nFileNotFoundError: [Errno 2] python\n", 1) == {
        "ok": False,
        "error": "podctl down exited 1 without an answer: FileNotFoundError: [Errno 2] python",
    }
    assert parse_status_line("", "", 255) == {"ok": False, "error": "podctl down exited 255 without an answer"}
    assert parse_status_line('{"ok": true, "done": "stopped vLLM"}\n') == {"ok": True, "done": "stopped vLLM"}
    assert parse_status_line("[1]\n")["error"] == "podctl down answered something else: [1]"
