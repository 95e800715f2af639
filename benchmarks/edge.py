"""Print what the edge costs: `podkit bench` through Caddy and straight to vLLM, side by side.

    python benchmarks/edge.py --state-dir D      # a converged sandbox (podkit sandbox up + apply)

Both runs hit the same server in the same sandbox, alternating (edge, direct, edge, direct ...)
so drift in the machine's load lands on both. "Direct" is vLLM's own loopback port, reached
through ``podkit_endpoint_url`` in a throwaway inventory (the sandbox runs on this machine, so
its loopback is ours); "edge" is the client's way in, through Caddy. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit.sandbox.box import Sandbox  # noqa: E402


def bench(box: Sandbox, inventory: str, out: Path, args) -> dict:
    proc = box.cli(
        "bench",
        inventory,
        "--json",
        "--lengths",
        "256",
        "--ttft-requests",
        str(args.ttft_requests),
        "--concurrency",
        "1,4",
        "--rounds",
        str(args.rounds),
        "--prompt-tokens",
        "128",
        "--output-tokens",
        "64",
        "--output-dir",
        str(out),
    )
    if proc.returncode != 0:
        sys.exit(f"bench {inventory} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)["sandbox"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True, help="a converged sandbox folder")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs of runs")
    parser.add_argument("--ttft-requests", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    box = Sandbox(args.state_dir)
    saved = json.loads(box.state_file.read_text())
    work = Path(tempfile.mkdtemp(prefix="podkit-edge-bench-"))
    direct = work / "sandbox.py"  # named sandbox.py: group_data/sandbox.py applies
    direct.write_text(
        "from podkit.sandbox.box import Sandbox\n\n"
        f'sandbox = [("sandbox", {{**Sandbox().host_data(), "podkit_endpoint_url": '
        f'"http://127.0.0.1:{saved["vllm_port"]}"}})]\n'
    )
    runs: dict[str, list[dict]] = {"edge": [], "direct": []}
    for _ in range(args.repeats):
        for way, inventory in (("edge", "inventories/sandbox.py"), ("direct", str(direct))):
            runs[way].append(bench(box, inventory, work / way, args))

    def ttft(record):
        return record["ttft"][0]["ttft_s"]["p50"] * 1000

    def tokens(record, concurrency):
        level = next(level for level in record["concurrency"] if level["concurrency"] == concurrency)
        return level["output_tokens_per_s"]

    print(f"{'':<34}{'edge':>12}{'direct':>12}{'edge - direct':>16}")
    figures = {
        "TTFT p50, 256-token prompt (ms)": ttft,
        "output tokens/s, concurrency 1": lambda r: tokens(r, 1),
        "output tokens/s, concurrency 4": lambda r: tokens(r, 4),
    }
    for label, figure in figures.items():
        edge = statistics.median(figure(r) for r in runs["edge"])
        straight = statistics.median(figure(r) for r in runs["direct"])
        delta = edge - straight
        share = f" ({delta / straight * 100:+.1f}%)" if "tokens" in label else ""
        print(f"{label:<34}{edge:>12.1f}{straight:>12.1f}{delta:>+10.1f}{share}")
    print(f"(medians of {args.repeats} alternating runs each; records in {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
