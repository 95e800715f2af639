"""Print what the router's policy does for agent sessions: each policy side by side, one fleet.

    python benchmarks/router.py --state-dir .sandbox     # a converged sandbox (scripts/sandbox.sh)
    python benchmarks/router.py --state-dir .sandbox --sessions 8 --turns 4 --json router.json

The fleet: the sandbox is replica 1; replica 2 is a second sandbox on this machine (its own
sshd on loopback, its volume hard-linked from the first: nothing installed); a third host, a
private sshd with a volume of its own, is the router (``podkit_role = "router"``; the deploy
installs vllm-router into it). For each policy the router is re-applied with
``--data podkit_router_policy=POLICY`` (only its launch script changes: the router restarts,
the replicas do not), then ``podkit bench --sessions`` runs agent-like sessions through the
router's one URL: each session a growing prefix (a long system prompt, then turn after turn),
sessions at once, an ``X-Session-ID`` header on each request. The table gives, per policy, the
wall time, TTFT, how many requests each replica served and its prefix-cache hit rate (from each
replica's own /metrics). Figures, not assertions: both replicas are CPU builds sharing this
machine's cores, which a real fleet does not. The second replica and the router are stopped at
the end (their volumes stay, so a second run installs nothing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit import PROJECT_ROOT  # noqa: E402
from podkit.sandbox.box import Sandbox  # noqa: E402
from podkit.sandbox.sshd import PrivateSshd, free_port  # noqa: E402
from testing.netpods import copy_volume  # noqa: E402

POLICIES = ("cache_aware", "consistent_hash", "power_of_two", "round_robin")


def fleet_inventory(box: Sandbox, second: Sandbox, router: dict, folder: Path) -> Path:
    """Two replicas (the group "sandbox", so group_data/sandbox.py's CPU settings apply) and a router."""
    # one key for the fleet: the router passes the client's key through to each replica
    replica_2 = {**second.host_data(), "vllm_model": str(box.model_dir), "podkit_api_key_file": str(box.api_key_file)}
    routers = [
        (
            "router",
            {
                **router["ssh"],
                "podkit_role": "router",
                "podkit_router_group": "sandbox",
                "podkit_volume": router["volume"],
                "podkit_public": False,
                "podkit_edge_port": router["edge_port"],
                "vllm_port": router["router_port"],
                "vllm_served_model_name": "tiny-coder",
                "podkit_api_key_file": str(box.api_key_file),
            },
        )
    ]
    inventory = folder / "fleet.py"
    inventory.write_text(
        f"sandbox = [('replica-1', {box.host_data()!r}), ('replica-2', {replica_2!r})]\nrouters = {routers!r}\n"
    )
    return inventory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True, help="a converged sandbox folder")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--session-tokens", type=int, default=1024)
    parser.add_argument("--turn-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--no-session-header", action="store_true")
    parser.add_argument("--json", type=Path, help="write every policy's bench record here")
    args = parser.parse_args()

    box = Sandbox(args.state_dir)
    work = args.state_dir.absolute() / "router-bench"
    work.mkdir(exist_ok=True)
    second = Sandbox(work / "replica-2")
    if not (second.volume / "podkit").exists():
        copy_volume(box.volume, second.volume)
    second.up()
    router_state = work / "router.json"
    if not router_state.exists():
        router_state.write_text(
            json.dumps(
                {
                    "volume": str(work / "router-volume"),
                    "edge_port": free_port(),
                    "router_port": free_port(),
                }
            )
        )
    router = json.loads(router_state.read_text())
    router["ssh"] = PrivateSshd(work / "router-sshd").start().pyinfra_data()
    inventory = fleet_inventory(box, second, router, Path(tempfile.mkdtemp(prefix="podkit-router-bench-")))
    env = box.env()

    records = {}
    for policy in args.policies.split(","):
        applied = box.apply(f"--data=podkit_router_policy={policy}", inventory=str(inventory))
        if applied.rc != 0:
            sys.exit(f"applying the fleet with {policy} failed: {applied.stderr[-3000:]}")
        bench = subprocess.run(
            [
                sys.executable,
                "cli.py",
                "bench",
                str(inventory),
                "--host",
                "router",
                "--json",
                "--sessions",
                str(args.sessions),
                "--turns",
                str(args.turns),
                "--session-tokens",
                str(args.session_tokens),
                "--turn-tokens",
                str(args.turn_tokens),
                "--output-tokens",
                str(args.output_tokens),
                *(["--no-session-header"] if args.no_session_header else []),
                "--output-dir",
                str(work / policy),
            ],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if bench.returncode != 0:
            sys.exit(f"bench through the router with {policy} failed: {bench.stderr[-3000:]}{bench.stdout[-2000:]}")
        records[policy] = json.loads(bench.stdout)["router"]

    header = "X-Session-ID sent" if not args.no_session_header else "no session header"
    print(
        f"{args.sessions} sessions x {args.turns} turns at once (~{args.session_tokens}-token system prompt, "
        f"~{args.turn_tokens} more per turn, {args.output_tokens} output tokens; {header})"
    )
    names = [row["replica"] for row in next(iter(records.values()))["replicas"]["replicas"]]
    print(
        f"{'policy':<17}{'wall s':>8}{'TTFT p50 ms':>13}"
        + "".join(f"{name + ' reqs':>16}{'hit':>7}" for name in names)
        + f"{'hit rate, all':>15}"
    )
    for policy, record in records.items():
        sessions, replicas = record["sessions"], record["replicas"]
        rows = {row["replica"]: row for row in replicas["replicas"]}
        cells = "".join(
            f"{rows[name]['requests']:>16.0f}{(rows[name]['hit_rate'] or 0) * 100:>6.1f}%" for name in names
        )
        print(
            f"{policy:<17}{sessions['wall_s']:>8.1f}{sessions['ttft_s']['p50'] * 1000:>13.1f}{cells}"
            f"{(replicas['hit_rate'] or 0) * 100:>14.1f}%"
        )
    if args.json:
        args.json.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    print(f"(records in {work})")
    # the second replica and the router go; their volumes stay for the next run (nothing reinstalled)
    second.down()
    supervisorctl = Path(router["volume"]) / "podkit" / "venv" / "bin" / "supervisorctl"
    conf = Path(router["volume"]) / "podkit" / "bin" / "supervisord.conf"
    subprocess.run([str(supervisorctl), "-c", str(conf), "shutdown"], capture_output=True)
    PrivateSshd(work / "router-sshd").stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
