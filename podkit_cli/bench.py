"""``podkit bench``: TTFT against prompt length and a concurrency sweep, per host."""

from __future__ import annotations

import json
import sys
from datetime import UTC

import click

from .hosts import load_targets
from .output import host_option


def _int_list(ctx, param, value):
    try:
        numbers = tuple(int(part) for part in str(value).replace(" ", "").split(",") if part)
    except ValueError:
        raise click.BadParameter("a comma-separated list of whole numbers, e.g. 1,4,16") from None
    if not numbers or min(numbers) < 1:
        raise click.BadParameter("at least one number, each 1 or more")
    return numbers


@click.command()
@click.argument("inventory")
@host_option
@click.option(
    "--lengths",
    default="1024,4096,16384,32768",
    show_default=True,
    callback=_int_list,
    help="Prompt lengths (tokens) for TTFT; capped at max_model_len minus the output.",
)
@click.option(
    "--ttft-requests",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Measured requests per prompt length (after one discarded).",
)
@click.option(
    "--concurrency", default="1,4,16,64", show_default=True, callback=_int_list, help="Concurrency levels of the sweep."
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Each level sends level x rounds requests.",
)
@click.option(
    "--prompt-tokens",
    type=click.IntRange(min=16),
    default=512,
    show_default=True,
    help="Prompt length of the sweep's requests.",
)
@click.option(
    "--output-tokens",
    type=click.IntRange(min=2),
    default=256,
    show_default=True,
    help="Tokens every sweep request generates (ignore_eos).",
)
@click.option(
    "--usd-per-hour", type=click.FloatRange(min=0), help="Price of the box; default: the RunPod pod's costPerHr."
)
@click.option(
    "--chart",
    "chart_file",
    type=click.Path(dir_okay=False),
    help="One PNG for all hosts (default: one next to each record).",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    default="runs/bench",
    show_default=True,
    help="Where each host's record (and chart) is saved.",
)
@click.option("--timeout", default=600.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def bench(
    inventory,
    host_names,
    lengths,
    ttft_requests,
    concurrency,
    rounds,
    prompt_tokens,
    output_tokens,
    usd_per_hour,
    chart_file,
    output_dir,
    timeout,
    as_json,
):
    """Measure each host's endpoint: TTFT against prompt length, and a concurrency sweep.

    Speaks only the OpenAI-compatible API (plus vLLM's /tokenize to size the
    prompts exactly). Per prompt length: one discarded request, then
    --ttft-requests measured ones. Per concurrency level: request throughput,
    output tokens/s, TTFT and inter-token latency p50/p95, and the cost per
    million output tokens. Each host's record (model, revision, vLLM version,
    launch flags, figures) is saved as <output-dir>/<UTC time>-<host>.json
    with a PNG chart beside it. Hosts run in parallel.

    \b
    Exit codes: 0 all measured, 1 a request or host failed, 2 bad input,
    3 unreachable, 4 auth.

    \b
    podkit bench inventories/sandbox.py --lengths 256,1024 --concurrency 1,4
    podkit bench inventories/runpod.py --host coder-1 --usd-per-hour 2.39 --json
    """
    import threading
    from datetime import datetime
    from pathlib import Path

    from podkit import project_path
    from podkit.client.bench import (
        Bench,
        BenchAborted,
        Options,
        failed_record,
        overall,
        record_path,
        table,
        write_chart,
    )
    from podkit.client.serverinfo import describe
    from podkit.client.targets import cost_per_hour, each_host

    options = Options(lengths, ttft_requests, concurrency, rounds, prompt_tokens, output_tokens, timeout)
    targets = load_targets(inventory, host_names)
    started = datetime.now(UTC)

    def prepare(target):
        info = describe(target.name, target.settings, target.run)
        usd = cost_per_hour(target.data, usd_per_hour)
        source = "--usd-per-hour" if usd_per_hour is not None else ("RunPod costPerHr" if usd is not None else None)
        runner = Bench(target.name, target.url, target.key, target.model, options, info, usd, source, target.ca_file)
        try:
            return runner, runner.prepare()
        except BenchAborted as exc:
            return runner, failed_record(target.name, target.url, target.model, info.as_dict(), str(exc), exc.outcome)

    prepared = each_host(prepare, targets)
    lock = threading.Lock()
    total = sum(planned for _, planned in prepared if isinstance(planned, int))
    with click.progressbar(length=total, label="bench", file=sys.stderr, show_pos=True) as bar:

        def progress(label):
            with lock:
                bar.label = label
                bar.update(1)

        records = each_host(lambda p: p[0].run(progress) if isinstance(p[1], int) else p[1], prepared)

    measured = [r for r in records if r["ttft"] or r["concurrency"]]
    for record in measured:
        path = record_path(project_path(output_dir), record["host"], started)
        record["record"] = str(path)
        if not chart_file:
            record["chart"] = str(write_chart([record], path.with_suffix(".png")))
    if chart_file and measured:
        chart = str(write_chart(measured, Path(chart_file).absolute()))
        for record in measured:
            record["chart"] = chart
    for record in measured:
        path = Path(record["record"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")

    if as_json:
        click.echo(json.dumps({r["host"]: r for r in records}, indent=2, sort_keys=True))
    else:
        for record in records:
            for line in table(record):
                click.echo(line)
            if record.get("record"):
                click.echo(f"  record: {record['record']}\n  chart:  {record['chart']}")
    sys.exit(int(overall(records)))
