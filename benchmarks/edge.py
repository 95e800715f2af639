"""Print what the edge costs: `podkit bench` through Caddy and straight to vLLM, side by side.

    python benchmarks/edge.py --state-dir D      # a converged sandbox (podkit sandbox up + apply)

Both runs hit the same server in the same sandbox, alternating (edge, direct, edge, direct ...)
so drift in the machine's load lands on both. "Direct" is vLLM's own loopback port, reached
through ``podkit_endpoint_url`` in a throwaway inventory (the sandbox runs on this machine, so
its loopback is ours); "edge" is the client's way in, through Caddy. Figures, not assertions.

    python benchmarks/edge.py --state-dir D --split-cores

On a GPU host the decoding runs on the GPU and Caddy has cores of its own; in the CPU sandbox
vLLM decodes on the same cores Caddy and the client use, so every CPU-second the edge spends
comes out of decoding. ``--split-cores`` gives each its own: the sandbox is re-applied with one
OpenMP thread bound to core 0 (``VLLM_CPU_OMP_THREADS_BIND``), vLLM's API server is pinned
there with the bench client (which does the same work edge or direct), and Caddy runs alone on
the other cores. (The engine process renames itself ``VLLM::EngineCore`` and is left where it is:
pinned to core 0 with the API server, decoding falls to about 11 tokens/s.) The sandbox is re-applied as it was afterwards.

Each edge run is paired with the direct run after it; beside the medians, the median of the
pairs' ratios (and their spread) says how far apart the two ways are with the drift cancelled.

    python benchmarks/edge.py --state-dir D --interleaved 40

pairs the two ways far more finely: one process, podkit's own bench code (``Bench.stream``, the
request ``podkit bench`` times), and per pair one TTFT request and one round at each concurrency
through the edge and the same straight to vLLM, in alternating order, so a pair's two halves are
seconds apart instead of a whole ``bench`` run. It prints each figure's medians, the median of the
pairs' ratios with its interquartile range, and the pooled figure (each way's tokens over its
seconds, all pairs together) with a 95% interval from resampling the pairs.

    python benchmarks/edge.py --state-dir D --interleaved 150 --client-nice 19

runs the client at the lowest priority: on a real host the client is another machine, while here
its threads parse every streamed chunk on the two cores vLLM and the edge decode and forward on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from podkit.client.api import VllmApi  # noqa: E402
from podkit.client.bench.run import TTFT_OUTPUT_TOKENS, Bench, Options  # noqa: E402
from podkit.sandbox.box import Sandbox  # noqa: E402

# one pair's records, edge then direct: (ms,) for a TTFT, (tokens, seconds) for a round
Pair = tuple[tuple, tuple]


def pin(volume: Path, program: str, cores: str) -> list[int]:
    """Pin every thread of the sandbox's processes whose command line names PROGRAM to CORES."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [part.decode(errors="replace") for part in argv if part]
        if entry.name.isdigit() and any(str(volume) in w for w in words) and any(program in w for w in words[:3]):
            subprocess.run(["taskset", "-a", "-p", "-c", cores, entry.name], check=True, capture_output=True)
            pids.append(int(entry.name))
    return pids


def bench(box: Sandbox, inventory: str, out: Path, args) -> dict:
    prefix = ["taskset", "-c", args.client_cores] if args.split_cores else []
    proc = subprocess.run(
        [*prefix, sys.executable, "cli.py"]
        + [
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
        ],
        cwd=Path(__file__).resolve().parent.parent,
        env=box.env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        sys.exit(f"bench {inventory} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)["sandbox"]


def bootstrap(pairs: list[Pair], figure: Callable[[list[Pair]], float], draws: int = 2000) -> tuple[float, float]:
    """The 95% interval of FIGURE(pairs) over pairs drawn again with replacement (seeded: the same
    records give the same interval)."""
    rng = random.Random(0)
    values = sorted(figure(rng.choices(pairs, k=len(pairs))) for _ in range(draws))
    return values[int(0.025 * draws)], values[int(0.975 * draws) - 1]


def median_gap(pairs: list[Pair]) -> float:
    """Edge minus direct, the medians of each way's TTFTs in ms."""
    return statistics.median(e[0] for e, _ in pairs) - statistics.median(d[0] for _, d in pairs)


def pooled_gap(pairs: list[Pair]) -> float:
    """Edge over direct in percent, each way's tokens summed over its summed seconds."""
    edge = sum(e[0] for e, _ in pairs) / sum(e[1] for e, _ in pairs)
    direct = sum(d[0] for _, d in pairs) / sum(d[1] for _, d in pairs)
    return (edge / direct - 1) * 100


def interleaved(box: Sandbox, pairs: int, rounds: int, client_nice: int) -> int:
    """Edge and direct in one process, request rounds alternating (see the module's docstring)."""
    os.nice(client_nice)  # before any thread starts: the client's threads inherit it
    saved = json.loads(box.state_file.read_text())
    key = box.api_key_file.read_text().strip()
    options = Options(prompt_tokens=128, output_tokens=64)
    urls = {"edge": f"http://127.0.0.1:{saved['edge_port']}", "direct": f"http://127.0.0.1:{saved['vllm_port']}"}
    model = VllmApi(urls["direct"], key, "").openai.models.list().data[0].id
    benches = {way: Bench("sandbox", url, key, model, options) for way, url in urls.items()}
    # per way and figure, one record a pair (see Pair)
    figures: dict[str, dict[str, list[tuple]]] = {way: {} for way in benches}

    def ttft(bench: Bench) -> tuple[float]:
        prompt = bench.prompt(256)
        timing = bench.stream(prompt, TTFT_OUTPUT_TOKENS)
        if timing.error:
            sys.exit(f"a TTFT request failed: {timing.error}")
        return ((timing.chunks[0] - timing.start) * 1000,)

    def tokens_per_s(bench: Bench, level: int) -> tuple[int, float]:
        prompts = [bench.prompt(128) for _ in range(level * rounds)]  # /tokenize: before the clock
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=level) as pool:
            timings = list(pool.map(lambda prompt: bench.stream(prompt, 64), prompts))
        wall = time.perf_counter() - start
        if any(t.error for t in timings):
            sys.exit(f"a request failed: {next(t.error for t in timings if t.error)}")
        return sum(t.output_tokens or 0 for t in timings), wall

    for bench in benches.values():  # warm both ways up: the first requests compile and connect
        ttft(bench)
        tokens_per_s(bench, 4)
    labels = {
        "TTFT p50, 256-token prompt (ms)": ttft,
        "output tokens/s, concurrency 1": lambda bench: tokens_per_s(bench, 1),
        "output tokens/s, concurrency 4": lambda bench: tokens_per_s(bench, 4),
    }
    for index in range(pairs):
        order = ("edge", "direct") if index % 2 == 0 else ("direct", "edge")
        for label, measure in labels.items():
            for way in order:
                figures[way].setdefault(label, []).append(measure(benches[way]))
    print(
        f"{'':<34}{'edge':>10}{'direct':>10}{'edge - direct':>16}"
        f"{'pairs: median (quartiles)':>32}{'pooled [95% interval]':>30}"
    )
    for label in labels:
        paired = list(zip(figures["edge"][label], figures["direct"][label]))
        if "TTFT" in label:
            edge, direct = [e[0] for e, _ in paired], [d[0] for _, d in paired]
            e, d = statistics.median(edge), statistics.median(direct)
            gaps = [a - b for a, b in zip(edge, direct)]
            q1, mid, q3 = statistics.quantiles(gaps, n=4)
            low, high = bootstrap(paired, median_gap)
            print(
                f"{label:<34}{e:>10.1f}{d:>10.1f}{e - d:>+10.1f}{'':<6}{mid:>+12.1f} ({q1:+.1f} .. {q3:+.1f})"
                f"{'':<8}p50 {median_gap(paired):+.1f} [{low:+.1f} .. {high:+.1f}]"
            )
        else:
            edge, direct = [e[0] / e[1] for e, _ in paired], [d[0] / d[1] for _, d in paired]
            e, d = statistics.median(edge), statistics.median(direct)
            ratios = [(a / b - 1) * 100 for a, b in zip(edge, direct)]
            q1, mid, q3 = statistics.quantiles(ratios, n=4)
            share = f"({(e / d - 1) * 100:+.1f}%)"
            low, high = bootstrap(paired, pooled_gap)
            print(
                f"{label:<34}{e:>10.1f}{d:>10.1f}{e - d:>+10.1f} {share:<8}{mid:>+8.1f}% ({q1:+.1f} .. {q3:+.1f})"
                f"{'':<6}{pooled_gap(paired):+.1f}% [{low:+.1f} .. {high:+.1f}]"
            )
    print(
        f"({pairs} interleaved pairs, {rounds} round(s) of 64-token answers per concurrency level and pair, "
        f"the client at nice {os.nice(0)};"
    )
    print(" pooled: each way's tokens over its seconds, all pairs together; the interval by resampling pairs)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True, help="a converged sandbox folder")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs of runs")
    parser.add_argument("--ttft-requests", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--split-cores", action="store_true", help="vLLM and the client on core 0, Caddy on the rest")
    parser.add_argument(
        "--interleaved", type=int, metavar="PAIRS", help="PAIRS alternating request rounds in one process instead"
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=0,
        metavar="N",
        help="with --interleaved: the client at this niceness, so the server's processes get the cores first",
    )
    args = parser.parse_args()
    if args.interleaved:
        return interleaved(Sandbox(args.state_dir), args.interleaved, args.rounds, args.client_nice)
    cpus = os.cpu_count() or 1
    if args.split_cores and cpus < 2:
        sys.exit("--split-cores needs at least 2 cores")
    args.client_cores, args.edge_cores = "0", f"1-{cpus - 1}"

    box = Sandbox(args.state_dir)
    saved = json.loads(box.state_file.read_text())
    work = Path(tempfile.mkdtemp(prefix="podkit-edge-bench-"))
    direct = work / "sandbox.py"  # named sandbox.py: group_data/sandbox.py applies
    direct.write_text(
        "from podkit.sandbox.box import Sandbox\n\n"
        f'sandbox = [("sandbox", {{**Sandbox().host_data(), "podkit_endpoint_url": '
        f'"http://127.0.0.1:{saved["vllm_port"]}"}})]\n'
    )
    if args.split_cores:
        split = work / "split" / "sandbox.py"  # named sandbox.py: group_data/sandbox.py applies
        split.parent.mkdir()
        group = runpy.run_path(str(Path(__file__).resolve().parent.parent / "group_data" / "sandbox.py"))
        env = {**group["vllm_extra_env"], "VLLM_CPU_OMP_THREADS_BIND": "0"}
        split.write_text(
            "from podkit.sandbox.box import Sandbox\n\n"
            f'sandbox = [("sandbox", {{**Sandbox().host_data(), "vllm_extra_env": {env!r}}})]\n'
        )
        applied = box.apply(inventory=str(split))
        if applied.rc != 0:
            sys.exit(f"re-applying the sandbox with vLLM on core 0 failed: {applied.stderr[-2000:]}")
        vllm = pin(box.volume, "vllm", "0")
        caddy = pin(box.volume, "caddy", args.edge_cores)
        print(f"vLLM pids {vllm} and the client on core 0; Caddy pids {caddy} on cores {args.edge_cores}")
    runs: dict[str, list[dict]] = {"edge": [], "direct": []}
    for _ in range(args.repeats):
        for way, inventory in (("edge", "inventories/sandbox.py"), ("direct", str(direct))):
            runs[way].append(bench(box, inventory, work / way, args))

    def ttft(record):
        return record["ttft"][0]["ttft_s"]["p50"] * 1000

    def tokens(record, concurrency):
        level = next(level for level in record["concurrency"] if level["concurrency"] == concurrency)
        return level["output_tokens_per_s"]

    print(f"{'':<34}{'edge':>12}{'direct':>12}{'edge - direct':>16}{'pairs: median (min .. max)':>34}")
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
        if "tokens" in label:
            ratios = sorted(figure(e) / figure(d) * 100 - 100 for e, d in zip(runs["edge"], runs["direct"]))
            pairs = f"{statistics.median(ratios):+.1f}% ({ratios[0]:+.1f} .. {ratios[-1]:+.1f})"
        else:
            gaps = sorted(figure(e) - figure(d) for e, d in zip(runs["edge"], runs["direct"]))
            pairs = f"{statistics.median(gaps):+.1f} ({gaps[0]:+.1f} .. {gaps[-1]:+.1f})"
        print(f"{label:<34}{edge:>12.1f}{straight:>12.1f}{delta:>+10.1f}{share:<9}{pairs:>25}")
    print(f"(medians of {args.repeats} alternating runs each; records in {work})")
    if args.split_cores:
        restored = box.apply()
        pin(box.volume, "caddy", f"0-{cpus - 1}")
        print("sandbox re-applied as it was" if restored.rc == 0 else "re-applying the sandbox failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
