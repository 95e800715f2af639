"""Bad input stops a host before anything is installed, with a message that names the fix."""

import json
import shutil
import socket
from pathlib import Path

import pytest

from podkit.sandbox.box import Sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.aside]


@pytest.fixture
def box(tmp_path):
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.skip("openssh-server is not installed (.ci/run installs it)")
    box = Sandbox(tmp_path / "sandbox")
    box.up()
    yield box
    box.down()


def test_port_held_by_a_stranger_stops_the_host_before_install(box):
    port = json.loads(box.state_file.read_text())["edge_port"]
    with socket.socket() as stranger:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        stranger.bind(("127.0.0.1", port))
        stranger.listen()
        applied = box.apply()
    assert applied.rc != 0
    assert f"preflight: port {port} is already in use by a process podkit did not start" in applied.stderr
    assert "stop it or set podkit_edge_port" in applied.stderr
    assert not (box.volume / "podkit").exists(), "nothing may be created on a host that fails preflight"
    assert len(applied.sessions) == 1, "one probe, nothing else"


MALFORMED = {
    "a share above 1": ("vllm_gpu_memory_utilization=2", "vllm_gpu_memory_utilization must be in (0, 1]"),
    # 1e300 minutes is an idle_seconds of inf in the watcher's config: the watcher would never stop
    "an idle time past a year": (
        "podkit_idle_stop_minutes=1e300",
        "podkit_idle_stop_minutes must be minutes, 0 (off) or from 0.1 to 525600 (a year), e.g. 30 or 0.5, got 1e+300",
    ),
    "a price that is not a number": ("podkit_usd_per_hour=NaN", "podkit_usd_per_hour must be a price"),
    # pyinfra reads --data x=false as False; quoted, it is the string, which Python takes as true
    "the string false": (
        'podkit_public="false"',
        "podkit_public must be True or False (a Python bool), got 'false': write podkit_public = False",
    ),
}


@pytest.mark.parametrize("datum, says", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_datum_stops_the_run_before_any_remote_command(box, datum, says):
    applied = box.apply("--data", datum)
    assert applied.rc != 0
    assert says in applied.stderr and "Traceback" not in applied.stderr
    assert applied.sessions == []
    assert not (box.volume / "podkit").exists()


def test_gated_hub_model_stops_the_host_before_any_download(box, tmp_path):
    from testing.hub import LocalHub
    from testing.hub_repos import repo_files, write_repo

    write_repo(tmp_path / "hub", "acme/Gated-7B", repo_files(), {"gated": True})
    with LocalHub(tmp_path / "hub", token="hf_" + "t" * 12) as hub:
        applied = box.apply(
            "--data",
            "vllm_model=acme/Gated-7B",
            env={
                "HF_ENDPOINT": hub.url,
                "HF_HOME": str(tmp_path / "hf"),
                "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_TOKEN": "",
            },
        )
        downloads = [path for method, path in hub.requests if method == "GET" and path.endswith(".safetensors")]
    assert applied.rc != 0
    assert "preflight: acme/Gated-7B is gated: accept its licence on the hub, then set HF_TOKEN" in applied.stderr
    assert downloads == [] and len(applied.sessions) == 1
    assert not (box.volume / "podkit").exists()


def test_a_volume_too_small_for_the_download_is_refused_before_any_byte(tmp_path):
    import subprocess
    import time

    from podkit.sandbox.tinymodel import write_tiny_model
    from testing.hub import LocalHub

    box = Sandbox(tmp_path / "small")
    box.volume.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(box.volume)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        box.up()
        write_tiny_model(tmp_path / "hub" / "acme" / "tiny-coder")
        with LocalHub(tmp_path / "hub") as hub:
            applied = box.apply(
                "--data",
                "vllm_model=acme/tiny-coder",
                env={"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"},
            )
            # metadata only: config.json, and safetensors headers through Range requests
            downloads = [
                r["path"]
                for r in hub.request_log
                if r["method"] == "GET"
                and "/resolve/" in r["path"]
                and not r["range"]
                and not r["path"].endswith("config.json")
            ]
        assert applied.rc != 0
        assert (
            "acme/tiny-coder needs 0.0 GB to download (+2.1 GB headroom) but the volume has 0.0 GB free"
            in applied.stderr
        )
        assert "grow the volume" in applied.stderr
        assert downloads == [] and not (box.volume / "podkit").exists()
    finally:
        box.down()
        # the deploy lock's holder lets go of the volume within a moment of the run's connection's end
        deadline = time.monotonic() + 10
        while (
            subprocess.run(["umount", str(box.volume)], capture_output=True).returncode and time.monotonic() < deadline
        ):
            time.sleep(0.2)
