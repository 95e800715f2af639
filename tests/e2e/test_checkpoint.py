"""The checkpoint on the volume, for real: a local hub (the hub's HTTP protocol on loopback), the
sandbox host fetching from it with huggingface_hub in its vLLM venv, and vLLM serving the snapshot.

One snapshot is fetched (each new one costs a vLLM check and a start): ``acme/tiny-gated``, a
gated repo, with the token. Its first fetch is killed mid-download and the re-apply that completes
it is the fetch-then-serve (the fetched line, checkpoint.json, ``serve <snapshot>`` offline, verify),
so the token's checks cover the killed apply's output too; the converged no-op, the way back to
the local checkpoint and ``cache ls``/``clean`` use the same snapshot. No e2e test fetches without
a token: the fetch is the same operation with or without one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podkit.sandbox.box import PROJECT_ROOT
from podkit.sandbox.tinymodel import write_tiny_model
from testing.hub import LocalHub

pytestmark = [pytest.mark.e2e, pytest.mark.aside]
TOKEN = "hf_" + "s3cr3t" * 6
REPO = "acme/tiny-gated"
MODEL = f"vllm_model={REPO}"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    gated = write_tiny_model(root / REPO)  # seed 0: its answers to verify are known
    (gated / ".hub.json").write_text(json.dumps({"gated": True}))
    (gated / "README.md").write_text("a repo file vLLM does not need: the fetch leaves it\n")
    with LocalHub(root, token=TOKEN) as server:
        yield server


def hub_env(hub, tmp_path):
    return {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf-controller"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_TOKEN": TOKEN,
    }


def cached(pod) -> Path:
    return pod.podkit / "cache" / "huggingface" / "hub" / f"models--{REPO.replace('/', '--')}"


def processes() -> str:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


def test_a_killed_download_is_cleaned_and_completed_on_reapply_and_served(pod, hub, tmp_path):
    shutil.rmtree(cached(pod), ignore_errors=True)  # whatever ran before, this apply downloads it
    hub.bytes_per_second = 20_000  # the tiny checkpoint then takes ~35 s
    run = pod.podkit / "run"
    apply = subprocess.Popen(
        [str(Path(sys.executable).parent / "pyinfra"), "-y", "inventories/sandbox.py", "deploy.py", "--data", MODEL],
        cwd=PROJECT_ROOT,
        env=pod.box.env(**hub_env(hub, tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = (run / "fetch.pid").read_text().split()[0] if (run / "fetch.pid").exists() else None
        if pid and Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.5)
    time.sleep(8)  # past the first progress poll (every 5 s), well before the ~35 s download ends
    assert TOKEN not in processes()  # not in the fetch's argv while it downloads
    os.kill(int(pid), signal.SIGKILL)
    output, _ = apply.communicate(timeout=120)
    pod.outputs.append(output)  # the token test below searches it too
    assert apply.returncode != 0 and "the fetch stopped without a result" in output
    assert f"fetching {REPO}@" in output and "%)" in output  # progress while it ran
    orphans = [p for p in cached(pod).rglob("*") if p.name.endswith(".incomplete")]
    assert orphans, "SIGKILL mid-download leaves a partial file behind"

    hub.bytes_per_second = None
    applied = pod.apply("--data", MODEL, env=hub_env(hub, tmp_path))
    assert applied.rc == 0, applied.stderr[-3000:]
    assert "hub cache: removed" in applied.stderr
    assert not any(p.name.endswith(".incomplete") for p in cached(pod).rglob("*"))
    assert f"fetched {REPO}@" in applied.stderr
    record = json.loads((run / "checkpoint.json").read_text())
    assert record["repo"] == REPO and len(record["revision"]) == 40
    assert "model.safetensors" in record["files"] and "README.md" not in record["files"]
    launch = (pod.podkit / "bin" / "launch.sh").read_text()
    assert f"serve {record['snapshot']}" in launch
    assert "HF_HUB_OFFLINE=1" in (pod.podkit / "bin" / "env.sh").read_text()
    assert pod.cli("verify", "inventories/sandbox.py").returncode == 0


def test_a_complete_snapshot_is_a_noop_without_any_hub_request(pod, hub, tmp_path):
    assert pod.apply("--data", MODEL, env=hub_env(hub, tmp_path)).rc == 0  # fetched, served
    hub.clear_log()
    applied = pod.apply("--data", MODEL, env=hub_env(hub, tmp_path))
    assert applied.rc == 0, applied.stderr[-3000:]
    assert applied.changed() == []
    assert hub.requests == []
    assert len(applied.sessions) == 1


def test_gated_model_with_a_token_never_shows_the_token(pod, hub, tmp_path):
    """Over every output of this session: the killed fetch's and the one that completed it above."""
    applied = pod.apply("--data", MODEL, env=hub_env(hub, tmp_path))  # fetched and served (above: converged)
    assert applied.rc == 0, applied.stderr[-3000:]
    token_file = pod.podkit / "secrets" / "hf_token"
    assert token_file.read_text().strip() == TOKEN and token_file.stat().st_mode & 0o777 == 0o600
    assert TOKEN not in processes()
    assert all(TOKEN not in output for output in pod.outputs + [applied.stdout, applied.stderr])
    for log in (pod.podkit / "logs").iterdir():
        assert TOKEN not in log.read_text(errors="replace"), log


def test_back_to_the_local_checkpoint(pod):
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    assert pod.cli("verify", "inventories/sandbox.py").returncode == 0


def test_cache_ls_and_clean_from_the_cli(pod, hub, tmp_path):
    if not cached(pod).exists():
        assert pod.apply("--data", MODEL, env=hub_env(hub, tmp_path)).rc == 0
        assert pod.apply().rc == 0  # the local checkpoint serves again; the snapshot stays cached
    blobs = cached(pod) / "blobs"
    orphan = blobs / "0123abcd.deadbeef.incomplete"
    orphan.write_bytes(b"\0" * 4096)
    listed = json.loads(pod.cli("cache", "ls", "inventories/sandbox.py", "--json").stdout)["sandbox"]
    assert [p["path"] for p in listed["problems"]] == [str(orphan)]
    assert listed["repos"][REPO] > 600_000
    cleaned = pod.cli("cache", "clean", "inventories/sandbox.py")
    assert cleaned.returncode == 0 and "freed 0.00 GB" in cleaned.stdout and "removed" in cleaned.stdout
    assert not orphan.exists() and any(blobs.iterdir())
