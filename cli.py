"""podkit's command line.

    python cli.py sandbox up            start the local sandbox pod (idempotent)
    python cli.py verify INVENTORY      prove an endpoint works for a coding agent
    python cli.py key rotate            make a new API key (then re-apply the deploy)

Every command takes --json where it reports something; messages go to stderr.
"""

from __future__ import annotations

import json
import sys

import click

from podkit import __version__


def emit(data, as_json: bool, human) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human(data)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podkit")
def cli():
    """podkit: turn an SSH-reachable GPU box into a verified vLLM endpoint."""


@cli.group()
def sandbox():
    """The local sandbox pod: a private sshd, a volume folder and a tiny model.

    \b
    python cli.py sandbox up
    pyinfra -y inventories/sandbox.py deploy.py
    python cli.py verify inventories/sandbox.py
    """


@sandbox.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the host data as JSON.")
def sandbox_up(as_json):
    """Start the sandbox (idempotent) and print the inventory to use."""
    from podkit.sandbox.box import Sandbox

    box = Sandbox()
    data = box.up()
    if as_json:
        emit(data, True, None)
        return
    click.echo(f"sandbox is up: ssh {data['ssh_user']}@{data['ssh_hostname']} -p {data['ssh_port']}", err=True)
    click.echo(f"volume: {data['podkit_volume']}   model: {data['vllm_model']}", err=True)
    click.echo("inventory: inventories/sandbox.py")
    click.echo("next: pyinfra -y inventories/sandbox.py deploy.py", err=True)


@sandbox.command("down")
def sandbox_down():
    """Stop the sandbox's vLLM and sshd. The volume (venv, model, caches) stays."""
    from podkit.sandbox.box import Sandbox

    result = Sandbox().down()
    click.echo(f"sandbox is down (runner: {result['runner']})", err=True)


@sandbox.command("status")
@click.option("--json", "as_json", is_flag=True)
def sandbox_status(as_json):
    """Say whether the sandbox's sshd and vLLM run."""
    from podkit.sandbox.box import Sandbox

    status = Sandbox().status()

    def human(s):
        sshd = s["sshd"]
        click.echo(f"sshd: {'running on port %s' % sshd.get('port') if sshd.get('running') else 'stopped'}")
        click.echo(f"vllm port: {s['vllm_port']}")
        click.echo(s["runner"])

    emit(status, as_json, human)
    sys.exit(0 if status["sshd"].get("running") else 3)


def load_hosts(inventory: str, host_names: tuple[str, ...] = ()):
    """(name, Settings, data) for each host of a pyinfra inventory, with group_data applied
    exactly as the deploy sees it."""
    from podkit import PROJECT_ROOT
    from podkit.settings import Settings, SettingsError
    from podkit.inventory_tmp import InventoryError, load_inventory

    try:
        loaded = load_inventory(inventory, PROJECT_ROOT)
    except InventoryError as exc:
        raise click.ClickException(f"cannot load {exc}")
    hosts = []
    for host in loaded:
        if host_names and host.name not in host_names:
            continue
        try:
            settings = Settings.from_mapping(host.data)
        except SettingsError as exc:
            raise click.ClickException(f"{host.name}: {exc}")
        hosts.append((host.name, settings, host.data))
    if not hosts:
        wanted = f" named {', '.join(host_names)}" if host_names else ""
        raise click.BadParameter(f"no hosts{wanted} in {inventory}")
    return hosts


class Target:
    """One host as a client sees it: its name, settings, data, endpoint URL and API key."""

    def __init__(self, name, settings, data, key):
        from podkit.client.targets import endpoint_url

        self.name, self.settings, self.data, self.key = name, settings, data, key
        self.url = endpoint_url(name, data, settings.host, settings.port)
        self.model = settings.served_model_name


def load_targets(inventory: str, host_names: tuple[str, ...] = ()) -> list[Target]:
    """Every selected host with its endpoint and the key the deploy gave it (read-only commands)."""
    from podkit import project_path
    from podkit.keys import ApiKeyError, read_key

    targets = []
    for name, settings, data in load_hosts(inventory, host_names):
        try:
            key = read_key(project_path(settings.api_key_file))
        except ApiKeyError as exc:
            raise click.ClickException(str(exc))
        if key is None:
            raise click.ClickException(
                f"{name}: no API key at {settings.api_key_file}; apply the deploy first (it creates the key)"
            )
        targets.append(Target(name, settings, data, key))
    return targets


@cli.command()
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds per request.")
def verify(inventory, host_names, as_json, timeout):
    """Prove each host's endpoint works for a coding agent. Changes nothing.

    Checks /health, that /v1/models refuses a request without the key and
    lists the served model with it, a chat completion, a streamed one (first
    chunk, clean end), /metrics with vllm:kv_cache_usage_perc, a tool call
    with tool_choice "auto" (a call left as text names the wrong parser and
    the right one), and a named tool call whose arguments must match a strict
    schema. Meanwhile one command over SSH checks that the API key is in no
    process's argv, the server log (and its rotated copies) or the scripts on
    the host. The key is read from the same file the deploy used.

    \b
    Exit codes: 0 all pass, 1 other failure, 2 bad input,
    3 unreachable (the endpoint, or the host over SSH), 4 auth,
    5 tool calling, 6 secret exposed (the key leaked on the host).

    \b
    python cli.py verify inventories/sandbox.py
    python cli.py verify inventories/runpod.py --host coder-1 --json
    """
    from podkit.client.targets import each_host
    from podkit.client.serverinfo import describe
    from podkit.client.verify import Verifier, worst

    def check(t):
        return Verifier(t.url, t.key, t.model, timeout, server=lambda: describe(t.name, t.settings, t.data, leaks=True)).run()

    targets = load_targets(inventory, host_names)
    reports = list(zip([t.name for t in targets], each_host(check, targets)))

    if as_json:
        click.echo(json.dumps({name: r.as_dict() for name, r in reports}, indent=2, sort_keys=True))
    else:
        for name, report in reports:
            click.echo(f"{name}  {report.endpoint}  model {report.model}")
            for check in report.checks:
                mark = click.style("PASS", fg="green") if check.ok else click.style("FAIL", fg="red")
                click.echo(f"  {mark}  {check.name:<26} {check.seconds:6.2f}s  {check.detail}")
    sys.exit(int(worst(report.outcome for _, report in reports)))


def _max_model_len(ctx, param, value):
    if value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter("a token count or 'auto'")
    if number < 16:
        raise click.BadParameter("at least 16 tokens")
    return number


@cli.command()
@click.argument("model")
@click.option("--gpu", "gpu_name", help="Card by name: H100, H200, A100 80GB, L40S, L4, A6000, RTX 4090 ...")
@click.option("--gpu-memory-gib", type=click.FloatRange(min=1), help="Total memory per GPU as torch reports it (H100 80GB: 79.19).")
@click.option("--gpus", "gpu_count", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--tensor-parallel-size", type=click.IntRange(min=1), help="Default: every GPU.")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.05, 1.0), default=0.9, show_default=True)
@click.option("--max-model-len", default="auto", callback=_max_model_len, show_default=True, help="Tokens, or auto.")
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "fp8"]), default="auto", show_default=True)
@click.option("--quantization", type=click.Choice(["fp8"]), help="Runtime FP8 quantization of a BF16 checkpoint.")
@click.option("--disk-free-gib", type=click.FloatRange(min=0), help="Free space on the volume, to check the download.")
@click.option("--no-fp8-search", is_flag=True, help="Do not look for an FP8 sibling checkpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
def plan(model, gpu_name, gpu_memory_gib, gpu_count, tensor_parallel_size, gpu_memory_utilization,
         max_model_len, kv_cache_dtype, quantization, disk_free_gib, no_fp8_search, as_json):
    """Will MODEL and its context fit, before anything is downloaded?

    MODEL is a hub repo id (optionally @revision) or a local checkpoint folder.
    Reads only metadata (config, file sizes, safetensors headers). Exit 0 when
    it fits, 1 when it does not (the plan is still printed), 2 for bad input.

    \b
    python cli.py plan Qwen/Qwen3-Coder-30B-A3B-Instruct --gpu H100 --max-model-len 65536
    python cli.py plan meta-llama/Llama-3.1-8B-Instruct --gpu L4 --disk-free-gib 20 --json
    """
    from podkit.plan.families import UnknownFamily, family_for
    from podkit.plan.checkpoints import ModelError, find_fp8_alternative, from_directory, from_hub, is_local
    from podkit.plan.memory import GIB, Hardware, PlanError, gpu_by_name, make_plan

    if bool(gpu_name) == bool(gpu_memory_gib):
        raise click.BadParameter("give exactly one of --gpu NAME or --gpu-memory-gib GIB")
    try:
        if gpu_name:
            card, memory, capability = gpu_by_name(gpu_name)
        else:
            card, memory, capability = None, gpu_memory_gib, None
        checkpoint = from_directory(model) if is_local(model) else from_hub(model)
    except PlanError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpu")
    except ModelError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL")
    fp8 = None if no_fp8_search else find_fp8_alternative(checkpoint)
    try:
        family = family_for(checkpoint.repo, checkpoint.config)
        family_error = None
    except UnknownFamily as exc:
        family, family_error = None, str(exc)
    try:
        result = make_plan(
            checkpoint, Hardware(card, memory, gpu_count, capability), fp8_alternative=fp8,
            tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, runtime_fp8=quantization == "fp8",
            disk_free_bytes=int(disk_free_gib * GIB) if disk_free_gib is not None else None, family=family,
        )
    except PlanError as exc:
        raise click.BadParameter(str(exc))
    result["family_error"] = family_error
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_plan(result)
    sys.exit(0 if result["fits"] else 1)


def _print_plan(p) -> None:
    ck = p["checkpoint"]
    rows = [
        ("checkpoint", f"{ck['repo']}{'@' + ck['revision'][:12] if ck['revision'] else ''}"
                       f"{' (FP8)' if ck['is_fp8'] else ''}"),
        ("FP8 alternative", p["fp8_alternative"] or "none found"),
        ("download", f"{p['download_bytes'] / 1e9:.1f} GB in {len(p['download_files'])} files"),
        ("weights per GPU", f"{p['weights_gib_per_gpu']} GiB" if p["weights_gib_per_gpu"] is not None else "-"),
        ("KV bytes per token", p["kv_bytes_per_token"]),
        ("KV cache", f"{p['available_kv_cache_gib']} GiB = {p['kv_cache_tokens']} tokens"),
        ("max model len", f"{p['max_model_len']} (longest that fits: {p['max_model_len_fit']})"),
        ("max concurrency", p["max_concurrency"]),
        ("tensor parallel", p["tensor_parallel_size"]),
        ("tool-call parser", p["tool_call_parser"] or p.get("family_error") or "-"),
        ("reasoning parser", p["reasoning_parser"] or "-"),
        ("vLLM", p["vllm_version"]),
    ]
    for label, value in rows:
        click.echo(f"{label:<20} {value}")
    verdict = click.style("FITS", fg="green") if p["fits"] else click.style("DOES NOT FIT", fg="red")
    click.echo(f"\n{verdict}: {p['reason']}")
    for suggestion in p["suggestions"]:
        click.echo(f"  - {suggestion}")


@cli.group()
def cache():
    """The hub cache on each host's volume: what it holds, and what broke.

    \b
    python cli.py cache ls inventories/sandbox.py
    python cli.py cache clean inventories/sandbox.py --json
    """


def _cache(inventory, host_names, clean: bool):
    from podkit.host.probe import podctl_command
    from podkit.host.shell import RemoteError, run

    reports = {}
    for name, settings, data in load_hosts(inventory, host_names):
        paths = settings.paths
        command = podctl_command("cache", {"hub_cache": paths.hub_cache, "run_dir": paths.run, "clean": clean})
        try:
            result = run(name, data, command)
        except RemoteError as exc:
            reports[name] = {"error": str(exc)}
            continue
        if result.status != 0:
            reports[name] = {"error": result.stderr.strip()[-300:] or f"exit status {result.status}"}
            continue
        reports[name] = json.loads(result.stdout.strip().splitlines()[-1])
    return reports


def _print_cache(reports, clean: bool) -> None:
    for name, report in reports.items():
        if "error" in report:
            click.echo(f"{name}: {click.style(report['error'], fg='red')}")
            continue
        free = report["free_bytes"]
        click.echo(f"{name}: {len(report['repos'])} model(s) cached"
                   + (f", {free / 1e9:.1f} GB free" if free is not None else ""))
        for repo, size in sorted(report["repos"].items()):
            click.echo(f"  {size / 1e9:8.2f} GB  {repo}")
        for item in report["problems"]:
            state = "removed" if item["removed"] else ("in use, kept" if item["in_use"] else "broken")
            click.echo(f"  {item['kind']:<12} {item['bytes'] / 1e6:8.1f} MB  {state:<12} {item['path']}")
        if clean:
            click.echo(f"  freed {report['freed_bytes'] / 1e9:.2f} GB")
        elif report["problems"]:
            click.echo("  run: python cli.py cache clean INVENTORY")


@cache.command("ls")
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def cache_ls(inventory, host_names, as_json):
    """What each host's hub cache holds, and its partial downloads, stale locks and broken links."""
    reports = _cache(inventory, host_names, clean=False)
    emit(reports, as_json, lambda r: _print_cache(r, clean=False))
    sys.exit(1 if any("error" in r for r in reports.values()) else 0)


@cache.command("clean")
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def cache_clean(inventory, host_names, as_json):
    """Remove partial downloads, stale locks and broken snapshot links that no process holds.

    Never a complete blob, and nothing while a fetch runs.
    """
    reports = _cache(inventory, host_names, clean=True)
    emit(reports, as_json, lambda r: _print_cache(r, clean=True))
    sys.exit(1 if any("error" in r for r in reports.values()) else 0)


def _int_list(ctx, param, value):
    try:
        numbers = tuple(int(part) for part in str(value).replace(" ", "").split(",") if part)
    except ValueError:
        raise click.BadParameter("a comma-separated list of whole numbers, e.g. 1,4,16")
    if not numbers or min(numbers) < 1:
        raise click.BadParameter("at least one number, each 1 or more")
    return numbers


@cli.command()
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--lengths", default="1024,4096,16384,32768", show_default=True, callback=_int_list,
              help="Prompt lengths (tokens) for TTFT; capped at max_model_len minus the output.")
@click.option("--ttft-requests", type=click.IntRange(min=1), default=3, show_default=True,
              help="Measured requests per prompt length (after one discarded).")
@click.option("--concurrency", default="1,4,16,64", show_default=True, callback=_int_list,
              help="Concurrency levels of the sweep.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Each level sends level x rounds requests.")
@click.option("--prompt-tokens", type=click.IntRange(min=16), default=512, show_default=True,
              help="Prompt length of the sweep's requests.")
@click.option("--output-tokens", type=click.IntRange(min=2), default=256, show_default=True,
              help="Tokens every sweep request generates (ignore_eos).")
@click.option("--usd-per-hour", type=click.FloatRange(min=0), help="Price of the box; default: the RunPod pod's costPerHr.")
@click.option("--chart", "chart_file", type=click.Path(dir_okay=False), help="One PNG for all hosts (default: one next to each record).")
@click.option("--output-dir", type=click.Path(file_okay=False), default="runs/bench", show_default=True,
              help="Where each host's record (and chart) is saved.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def bench(inventory, host_names, lengths, ttft_requests, concurrency, rounds, prompt_tokens, output_tokens,
          usd_per_hour, chart_file, output_dir, timeout, as_json):
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
    python cli.py bench inventories/sandbox.py --lengths 256,1024 --concurrency 1,4
    python cli.py bench inventories/runpod.py --host coder-1 --usd-per-hour 2.39 --json
    """
    import threading
    from datetime import datetime, timezone
    from pathlib import Path

    from podkit import project_path
    from podkit.client.bench.run import Bench, BenchAborted, Options, failed_record, overall, record_path, table, write_chart
    from podkit.client.targets import cost_per_hour, each_host
    from podkit.client.serverinfo import describe

    options = Options(lengths, ttft_requests, concurrency, rounds, prompt_tokens, output_tokens, timeout)
    targets = load_targets(inventory, host_names)
    started = datetime.now(timezone.utc)

    def prepare(target):
        info = describe(target.name, target.settings, target.data)
        usd = cost_per_hour(target.data, usd_per_hour)
        source = "--usd-per-hour" if usd_per_hour is not None else ("RunPod costPerHr" if usd is not None else None)
        runner = Bench(target.name, target.url, target.key, target.model, options, info, usd, source)
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


class DefaultGroup(click.Group):
    """A group whose unknown first argument falls through to its default command:
    ``eval INVENTORY`` means ``eval run INVENTORY``; ``eval compare A B`` stays a subcommand."""

    def __init__(self, *args, default_command: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.default_command = default_command

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@cli.group("eval", cls=DefaultGroup, default_command="run")
def eval_group():
    """Score the served model on five coding tasks, and compare two records.

    A first argument that is not a subcommand goes to `run`, so both
    spellings below work.

    \b
    python cli.py eval INVENTORY [--profile NAME ...] [--runs N]   (same as: eval run INVENTORY ...)
    python cli.py eval compare RECORD_A RECORD_B
    """


def _profile_names(ctx, param, value):
    from podkit.client.eval.harness import PROFILES

    for name in value:
        if name not in PROFILES:
            raise click.BadParameter(f"{name!r} is not a profile; the profiles are {', '.join(PROFILES)}")
    return value or tuple(PROFILES)


def _task_names(ctx, param, value):
    from podkit.client.eval.harness import TASK_ORDER

    for name in value:
        if name not in TASK_ORDER:
            raise click.BadParameter(f"{name!r} is not a task; the tasks are {', '.join(TASK_ORDER)}")
    return tuple(name for name in TASK_ORDER if name in value) or TASK_ORDER


@eval_group.command("run")
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--profile", "profile_names", multiple=True, callback=_profile_names,
              help="Sampling profile: coding or chat (repeatable; default: both).")
@click.option("--task", "task_names", multiple=True, callback=_task_names,
              help="Only this task: explain, bugfix, feature, refactor, tools (repeatable; default: all).")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Runs of each task per profile.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Output tokens per answer (trimmed to what the server's context leaves).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds per request.")
@click.option("--output-dir", type=click.Path(file_okay=False), default="runs/eval", show_default=True,
              help="Where records go (relative: from the project root).")
@click.option("--json", "as_json", is_flag=True, help="Print each host's scores as JSON.")
def eval_run(inventory, host_names, profile_names, task_names, runs, max_tokens, timeout, output_dir, as_json):
    """Run the battery against each host and record it. Hosts run in parallel.

    Five tasks (explain a module, fix a described bug, implement a narrow
    feature, refactor for readability, change two files with read_file /
    write_file tools), each --runs times per profile. Correctness 0-2 per
    task (keyword rubric, or the task's own unit tests run on the model's
    code with this Python), stability 0-2 across runs; totals per profile,
    differences under 10% of the possible score reported as noise. The
    record (model, revision, vLLM version, launch flags, every raw output)
    is saved as runs/eval/<UTC time>-<host>.json. Model-written code runs
    here in a temporary folder with a time limit.

    \b
    Exit codes: 0 every host evaluated, 1 a host failed, 2 bad input,
    3 unreachable, 4 auth. Scores do not change the exit code.

    \b
    python cli.py eval inventories/sandbox.py --runs 1
    python cli.py eval inventories/runpod.py --host coder-1 --profile coding --json
    """
    import threading

    from podkit import project_path
    from podkit.client.targets import each_host
    from podkit.client.eval.harness import load_tasks, run_host, table
    from podkit.client.verify import Outcome, worst

    targets = load_targets(inventory, host_names)
    tasks = load_tasks(task_names)
    lock = threading.Lock()

    def progress_for(name):
        def progress(message):
            with lock:
                click.echo(f"{name}  {message}", err=True)
        return progress

    results = each_host(
        lambda t: run_host(t, profile_names, runs, max_tokens, timeout, project_path(output_dir), tasks,
                           progress_for(t.name)),
        targets,
    )
    if as_json:
        click.echo(json.dumps({r["host"]: r for r in results}, indent=2, sort_keys=True, default=str))
    else:
        for result in results:
            for line in table(result):
                click.echo(line)
    outcomes = {"unreachable": Outcome.UNREACHABLE, "auth": Outcome.AUTH}
    sys.exit(int(worst(outcomes.get(r.get("outcome"), Outcome.ERROR) if r.get("error") else Outcome.OK
                       for r in results)))


@eval_group.command("compare")
@click.argument("record_a", type=click.Path(exists=True, dir_okay=False))
@click.argument("record_b", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def eval_compare(record_a, record_b, as_json):
    """Compare two eval records: per profile and task, both scores and the difference.

    A difference under 10% of the possible score is marked noise; a larger
    one REAL. Launch flags that differ between the two servers are listed.
    Exit codes: 0 compared, 1 a file is not an eval record, 2 bad input.

    \b
    python cli.py eval compare runs/eval/20250101T120000Z-coder-1.json runs/eval/20250102T090000Z-coder-1.json
    """
    from podkit.client.eval.harness import compare, compare_table, load_record

    try:
        comparison = compare(load_record(record_a), load_record(record_b))
    except ValueError as exc:
        raise click.ClickException(str(exc))
    comparison["a"]["path"], comparison["b"]["path"] = record_a, record_b
    emit(comparison, as_json, lambda c: [click.echo(line) for line in compare_table(c)])


@cli.group()
def key():
    """The project's API key (one file, shared by the server and every client)."""


@key.command("rotate")
@click.option("--file", "key_file", default=".secrets/api_key", show_default=True,
              help="The controller's key file (podkit_api_key_file).")
def key_rotate(key_file):
    """Make a new key. Re-apply the deploy to give it to the servers."""
    from podkit import project_path
    from podkit.keys import rotate_key

    rotate_key(project_path(key_file))
    click.echo(f"new key written to {key_file}; now run: pyinfra -y INVENTORY deploy.py", err=True)


if __name__ == "__main__":
    cli()
