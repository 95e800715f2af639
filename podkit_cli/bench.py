"""``podkit bench``: TTFT against prompt length and a concurrency sweep, or multi-turn sessions, per host;
through a router host, what each of its replicas served."""

from __future__ import annotations

import sys
from datetime import UTC

import click

from podkit.text import clean

from .hosts import Host, Target, load_targets
from .output import Finite, dumps, host_option


def _int_list(ctx, param, value):
    try:
        numbers = tuple(int(part) for part in str(value).replace(" ", "").split(",") if part)
    except ValueError:
        raise click.BadParameter("a comma-separated list of whole numbers, e.g. 1,4,16") from None
    if not numbers or min(numbers) < 1:
        raise click.BadParameter("at least one number, each 1 or more")
    return numbers


def router_replicas(target: Target[Host]) -> tuple[str, list] | None:
    """``(group, replicas)`` when ``target`` is a router host (``podkit_role = "router"``): the hosts of
    the inventory group its ``podkit_router_group`` names, each as a
    :class:`podkit.client.replicas.Replica` reached the way bench reaches a host (its edge, its
    key, TLS against its pinned CA), or a :class:`podkit.client.replicas.Reading` naming why it
    cannot be; None for any other host. Call it in the thread that loaded the inventory."""
    from podkit import project_path
    from podkit.client.replicas import Reading, Replica, router_group
    from podkit.keys import ApiKeyError, read_key
    from podkit.settings import Settings, SettingsError

    group = router_group(target.data)
    if group is None:
        return None
    replicas: list = []
    for name, data, member in target.host.group(group):
        try:
            settings = Settings.from_mapping(data)
            key = read_key(project_path(settings.api_key_file))
        except (SettingsError, ApiKeyError) as exc:
            replicas.append(Reading(name, error=str(exc)))
            continue
        if key is None:
            replicas.append(Reading(name, error=f"no API key at {settings.api_key_file}; apply the deploy"))
            continue
        replica = Target(Host(name, data, member, settings=settings), key)
        replicas.append(Replica(replica.name, replica.url, replica.key, replica.ca_file))
    return group, replicas


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
    help="Tokens every sweep request, or every session turn, generates (ignore_eos).",
)
@click.option(
    "--sessions",
    type=click.IntRange(min=1),
    help="Run N multi-turn sessions at once instead of the sweeps (each session's turns in order).",
)
@click.option(
    "--turns", type=click.IntRange(min=1), default=4, show_default=True, help="Turns per session (with --sessions)."
)
@click.option(
    "--session-tokens",
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="Each session's own system prompt, about this many tokens (with --sessions).",
)
@click.option(
    "--turn-tokens",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Each turn's new user message, about this many tokens (with --sessions).",
)
@click.option(
    "--session-header/--no-session-header",
    default=True,
    show_default=True,
    help="Send X-Session-ID: <session id> with each turn (what a router's consistent_hash reads).",
)
@click.option(
    "--usd-per-hour", type=Finite(min=0, max=1000), help="Price of the box; default: the RunPod pod's cost an hour."
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
    sessions,
    turns,
    session_tokens,
    turn_tokens,
    session_header,
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

    With --sessions N: N conversations at once instead of the sweeps, each
    turn resending the whole conversation so far plus a new user message
    (--output-tokens per answer), as an agent does; TTFT per turn and the
    total time. Through a router host (podkit_role = "router"), each replica
    of its podkit_router_group is read before and after the run (its own
    /metrics, through its edge): requests served and prefix-cache hit rate
    per replica, and overall.

    \b
    Exit codes: 0 all measured, 1 a request or host failed, 2 bad input,
    3 unreachable, 4 auth.

    \b
    podkit bench inventories/sandbox.py --lengths 256,1024 --concurrency 1,4
    podkit bench inventories/runpod.py --host coder-1 --usd-per-hour 2.39 --json
    podkit bench inventories/fleet.py --host router --sessions 8 --turns 6
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
    from podkit.client.replicas import around, unread
    from podkit.client.serverinfo import describe
    from podkit.client.targets import cost_per_hour, each_host

    options = Options(
        lengths,
        ttft_requests,
        concurrency,
        rounds,
        prompt_tokens,
        output_tokens,
        timeout,
        sessions or 0,
        turns,
        session_tokens,
        turn_tokens,
        session_header,
    )
    targets = load_targets(inventory, host_names)
    fleets = {target.name: router_replicas(target) for target in targets}
    started = datetime.now(UTC)

    def prepare(target):
        info = describe(target.name, target.settings, target.run)
        usd = cost_per_hour(target.data, usd_per_hour)
        source = "--usd-per-hour" if usd_per_hour is not None else ("RunPod cost" if usd is not None else None)
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

        def measure(p):
            runner, planned = p
            if not isinstance(planned, int):
                return planned
            fleet = fleets.get(runner.host)
            if fleet is None:
                return runner.run(progress)
            group, replicas = fleet
            if not replicas:
                record = runner.run(progress)
                record["replicas"] = unread(
                    group, f"no hosts in inventory group {group} ({runner.host}'s podkit_router_group)"
                )
                return record
            record, served = around(group, replicas, lambda: runner.run(progress))
            record["replicas"] = served
            return record

        records = each_host(measure, prepared)

    measured = [r for r in records if r["ttft"] or r["concurrency"] or r.get("sessions")]
    charted = [r for r in measured if r["ttft"] or r["concurrency"]]
    for record in measured:
        path = record_path(project_path(output_dir), record["host"], started)
        record["record"] = str(path)
        if not chart_file and record in charted:
            record["chart"] = str(write_chart([record], path.with_suffix(".png")))
    if chart_file and charted:
        chart = str(write_chart(charted, Path(chart_file).absolute()))
        for record in charted:
            record["chart"] = chart
    for record in measured:
        path = Path(record["record"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(record) + "\n")

    if as_json:
        click.echo(dumps({r["host"]: r for r in records}))
    else:
        for record in records:
            for line in table(record):
                click.echo(clean(line))
            if record.get("record"):
                click.echo(f"  record: {record['record']}")
            if record.get("chart"):
                click.echo(f"  chart:  {record['chart']}")
    sys.exit(int(overall(records)))
