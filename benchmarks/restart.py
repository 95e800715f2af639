"""Print what a start of the sandbox's vLLM costs: cold, with caches, with the profile reused, after a stop.

    flock /tmp/podkit-e2e.lock .venv/bin/python benchmarks/restart.py                 # a fresh sandbox
    flock /tmp/podkit-e2e.lock .venv/bin/python benchmarks/restart.py --state-dir D   # reuse one

The sandbox serves its tiny model on the CPU build with the KV cache measured by vLLM (the
sandbox's own `--kv-cache-memory-bytes 64M` dropped, a share of memory given instead), so that a
start has a profile to measure or reuse. Each row is one start, timed by podkit itself (the
phases `podkit status --json` reads from the start's record; podkit/host/start/phases.py):

- cold: the caches on the volume emptied and no profile recorded (the venv and model stay);
- with caches: the caches kept, the profile dropped: vLLM measures its KV cache again;
- profile reused: caches and the recorded profile kept;
- after a stop: `podkit down` (the marker, then supervisorctl stop, as the idle stop does), then
  the deploy as `podkit up` runs it on bare metal;
- woken by a request: with an idle time set, the idle watcher stops the server (the CPU build has no
  sleep mode; a GPU build with one sleeps), and the next chat with the key through the edge starts
  it again while Caddy holds the request (no deploy): `wall` is what that chat waited.

Each start is the deploy's (pyinfra over the sandbox's sshd), told when it began, as `podkit up`
tells it: the `up` column is from there to ready behind the edge.

Figures, not assertions: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit.host.start.phases import PHASES  # noqa: E402
from podkit.host.start.readiness import UP_STARTED  # noqa: E402
from podkit.sandbox.box import Sandbox  # noqa: E402

#: the sandbox with vLLM measuring its own KV cache (a fifth of the node's memory; the tiny model needs little)
MEASURED = ["--data", 'vllm_extra_args=["--enforce-eager"]', "--data", "vllm_gpu_memory_utilization=0.2"]
INVENTORY = "inventories/sandbox.py"
#: the idle time of the wake row: the watcher stops the server a quarter of a minute after the last request
IDLE = ["--data", "podkit_idle_stop_minutes=0.25"]


def last_start(box: Sandbox) -> dict:
    status = box.cli("status", INVENTORY, "--json")
    row = json.loads(status.stdout)["sandbox"]
    return (row.get("starts") or [{}])[-1]


def printed(label: str, start: dict, wall: float) -> dict:
    phases = start.get("phases") or {}
    cells = "  ".join(f"{phases[key]:6.2f}" if key in phases else "     -" for key, _ in PHASES)
    print(f"{label:<16} {cells}  {wall:6.1f}   {start.get('profile') or '-'}", flush=True)
    return {"start": label, "phases": phases, "wall_seconds": round(wall, 2), "profile": start.get("profile")}


def woken(box: Sandbox) -> tuple[dict, float]:
    """The wake row: the idle stop, then one chat with the key through the edge, timed, and the wake
    as status records it (the wake starts vLLM through the supervisor, so no start phases)."""
    applied = box.apply(*MEASURED, *IDLE)
    if applied.rc != 0:
        raise RuntimeError(applied.stderr[-3000:])
    marker = box.volume / "podkit" / "run" / "stopped.json"
    deadline = time.monotonic() + 120
    while not (marker.exists() and "STOPPED" in box.supervisorctl("status", "vllm").stdout):
        if time.monotonic() > deadline:
            raise RuntimeError("the idle watcher did not stop the server within 2 minutes")
        time.sleep(0.5)
    body = {"model": "tiny-coder", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(
        f"http://127.0.0.1:{box.host_data()['podkit_edge_port']}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {box.api_key_file.read_text().strip()}", "Content-Type": "application/json"},
    )
    began = time.monotonic()
    with urllib.request.urlopen(request, timeout=900) as answer:
        answer.read()
    waited = time.monotonic() - began
    # the wake starts vLLM through the supervisor, not the deploy: status keeps it as the last wake
    wake = json.loads(box.cli("status", INVENTORY, "--json").stdout)["sandbox"].get("wake") or {}
    said = f"the wake: {wake.get('how')} in {wake.get('seconds')} s, {wake.get('said')}"
    return {"phases": {}, "profile": said}, waited


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, help="sandbox folder to use (kept afterwards)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="podkit-restart-"))
    box = Sandbox(state_dir)
    rows = []
    try:
        box.up()
        first = box.apply(*MEASURED)
        if first.rc != 0:
            print(first.stderr[-3000:], file=sys.stderr)
            return 1
        run = box.volume / "podkit" / "run"
        cache = box.volume / "podkit" / "cache"
        print(f"{'start':<16} " + "  ".join(f"{key[:6]:>6}" for key, _ in PHASES) + "    wall   KV cache", flush=True)

        def emptied():
            for name in ("vllm", "xdg", "triton", "torchinductor", "torch_extensions"):
                shutil.rmtree(cache / name, ignore_errors=True)
            (run / "profile").unlink(missing_ok=True)

        steps = (
            ("cold", lambda: (box.supervisorctl("stop", "vllm"), emptied())),
            ("with caches", lambda: (box.supervisorctl("stop", "vllm"), (run / "profile").unlink(missing_ok=True))),
            ("profile reused", lambda: box.supervisorctl("stop", "vllm")),
            ("after a stop", lambda: box.cli("down", INVENTORY)),  # on purpose, as the idle stop does
        )
        for label, stop in steps:
            stop()
            began = time.monotonic()
            # what `podkit up` does on bare metal: the deploy, told when up began
            applied = box.apply(*MEASURED, env={UP_STARTED: f"{time.time():.3f}"})
            if applied.rc != 0:
                print(applied.stderr[-3000:], file=sys.stderr)
                return 1
            rows.append(printed(label, last_start(box), time.monotonic() - began))
        start, waited = woken(box)
        rows.append(printed("woken by a chat", start, waited))
        box.apply(*MEASURED)  # the idle time back to the group's
    finally:
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        if not args.state_dir:
            box.down()
            shutil.rmtree(state_dir, ignore_errors=True)
    print("\nphases: " + "; ".join(f"{key} = {words}" for key, words in PHASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
