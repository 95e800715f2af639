"""bench's output: where a record goes, the table a person reads, and the PNG chart."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podkit.client import replicas


def record_path(folder: Path, host: str, when: datetime) -> Path:
    """``<folder>/<UTC timestamp>-<host>.json`` (the CLI's folder: ``runs/bench``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host)
    return folder / f"{when.astimezone(UTC):%Y%m%dT%H%M%SZ}-{safe}.json"


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def table(record: dict[str, Any]) -> list[str]:
    """The human-readable lines for one host's record."""
    server = record.get("server") or {}
    head = f"{record['host']}  {record['endpoint']}  {record['model']}"
    if record.get("vllm_version"):
        head += f"  vLLM {record['vllm_version']}"
    if record.get("max_model_len"):
        head += f"  max_model_len {record['max_model_len']}"
    lines = [head]
    if server.get("model"):
        revision = f"@{server['revision'][:12]}" if server.get("revision") else ""
        lines.append(f"  serving {server['model']}{revision}")
    if record.get("error"):
        lines.append(f"  ERROR ({record['outcome']}): {record['error']}")
    if record["ttft"]:
        lines.append(
            f"  TTFT vs prompt length ({record['ttft_output_tokens']} output tokens, "
            "first request at each length discarded)"
        )
        lines.append(f"    {'prompt tok':>10} {'n':>3} {'p50 ms':>9} {'p95 ms':>9} {'first ms':>9}")
        for row in record["ttft"]:
            tokens = ",".join(map(str, row["prompt_tokens"])) or str(row["target_tokens"])
            lines.append(
                f"    {tokens:>10} {row['ttft_s']['n']:>3} {_fmt(row['ttft_s']['p50'], 1e3):>9} "
                f"{_fmt(row['ttft_s']['p95'], 1e3):>9} {_fmt(row['first_request_ttft_s'], 1e3):>9}"
                + (f"  errors: {'; '.join(row['errors'])}" if row["errors"] else "")
            )
    if record["concurrency"]:
        lines.append(
            f"  concurrency sweep ({record['sweep_prompt_tokens']} prompt + "
            f"{record['options']['output_tokens']} output tokens per request)"
        )
        lines.append(
            f"    {'conc':>4} {'reqs':>5} {'req/s':>7} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p95':>9} "
            f"{'ITL p50':>8} {'ITL p95':>8} {'TPOT p50':>8} {'$/M out':>8}"
        )
        for row in record["concurrency"]:
            lines.append(
                f"    {row['concurrency']:>4} {row['completed']:>5} {_fmt(row['requests_per_s'], 1, 2):>7} "
                f"{_fmt(row['output_tokens_per_s']):>9} {_fmt(row['ttft_s']['p50'], 1e3):>7}ms "
                f"{_fmt(row['ttft_s']['p95'], 1e3):>7}ms {_fmt(row['itl_s']['p50'], 1e3):>6}ms "
                f"{_fmt(row['itl_s']['p95'], 1e3):>6}ms {_fmt(row['tpot_s']['p50'], 1e3):>6}ms "
                f"{_fmt(row['usd_per_million_output_tokens'], 1, 2):>8}"
                + (f"  errors: {'; '.join(row['errors'])}" if row["errors"] else "")
            )
    lines += session_lines(record)
    if record.get("replicas"):
        lines += replicas.lines(record["replicas"])
    cost = record.get("cost") or {}
    if cost.get("usd_per_hour") is not None:
        lines.append(f"  cost: ${cost['usd_per_hour']}/h ({cost['source']})")
    lines += [f"  note: {note}" for note in record.get("notes", [])]
    return lines


def session_lines(record: dict[str, Any]) -> list[str]:
    """The session workload's lines: TTFT per turn, then the total time."""
    sessions = record.get("sessions")
    if not sessions:
        return []
    options = record["options"]
    header = sessions.get("session_header")
    lines = [
        f"  {sessions['sessions']} sessions x {sessions['turns']} turns at once (system prompt ~"
        f"{options['session_tokens']} tokens, ~{options['turn_tokens']} more per turn, "
        f"{options['output_tokens']} output tokens; " + (f"{header} sent" if header else "no session header") + ")",
        f"    {'turn':>4} {'reqs':>5} {'prompt tok':>11} {'TTFT p50':>9} {'TTFT p95':>9} {'mean':>9}",
    ]
    for row in sessions["per_turn"]:
        counted = row["prompt_tokens"]
        tokens = (
            "-"
            if not counted
            else f"{counted['min']}" + (f"-{counted['max']}" if counted["max"] != counted["min"] else "")
        )
        lines.append(
            f"    {row['turn']:>4} {row['completed']:>5} {tokens:>11} {_fmt(row['ttft_s']['p50'], 1e3):>7}ms "
            f"{_fmt(row['ttft_s']['p95'], 1e3):>7}ms {_fmt(row['ttft_s']['mean'], 1e3):>7}ms"
            + (f"  errors: {'; '.join(row['errors'])}" if row["errors"] else "")
        )
    lines.append(
        f"    total {sessions['wall_s']:.1f} s for {sessions['completed']} of {sessions['requests']} requests"
        + (f" ({sessions['not_sent']} turns not sent after a failed one)" if sessions["not_sent"] else "")
        + f", TTFT p50 {_fmt(sessions['ttft_s']['p50'], 1e3)} ms over all turns"
    )
    return lines


def write_chart(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """A PNG with two panels: TTFT (p50, p95 dashed) against prompt length, and output
    tokens/s against concurrency; one line per host."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), dpi=100)
    ttft_axes, tput_axes = figure.subplots(1, 2)
    for record in records:
        label = record["host"]
        rows = [r for r in record.get("ttft", []) if r["ttft_s"]["p50"] is not None]
        if rows:
            x = [r["target_tokens"] for r in rows]
            (line,) = ttft_axes.plot(x, [r["ttft_s"]["p50"] * 1e3 for r in rows], marker="o", label=f"{label} p50")
            ttft_axes.plot(
                x,
                [r["ttft_s"]["p95"] * 1e3 for r in rows],
                linestyle="--",
                color=line.get_color(),
                label=f"{label} p95",
            )
        levels = [r for r in record.get("concurrency", []) if r["output_tokens_per_s"]]
        if levels:
            tput_axes.plot(
                [r["concurrency"] for r in levels], [r["output_tokens_per_s"] for r in levels], marker="o", label=label
            )
    ttft_axes.set(title="TTFT vs prompt length", xlabel="prompt tokens", ylabel="TTFT (ms)")
    tput_axes.set(title="Throughput vs concurrency", xlabel="concurrent requests", ylabel="output tokens/s")
    for axes, key in ((ttft_axes, "target_tokens"), (tput_axes, "concurrency")):
        ticks = sorted({row[key] for r in records for row in r.get("ttft" if key == "target_tokens" else key, [])})
        axes.set_xscale("log", base=2)
        if ticks:
            axes.set_xticks(ticks, [str(t) for t in ticks])
            axes.minorticks_off()
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    models = sorted({f"{r['model']} (vLLM {r.get('vllm_version') or '?'})" for r in records})
    figure.suptitle(", ".join(models))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
