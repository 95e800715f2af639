"""``podkit eval``: score the served model on coding tasks, and compare two records."""

from __future__ import annotations

import sys

import click

from podkit.text import clean

from .hosts import load_targets
from .output import dumps, emit, host_option


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


@click.group("eval", cls=DefaultGroup, default_command="run")
def eval_group():
    """Score the served model on five coding tasks, and compare two records.

    A first argument that is not a subcommand goes to `run`, so both
    spellings below work.

    \b
    podkit eval INVENTORY [--profile NAME ...] [--runs N]   (same as: eval run INVENTORY ...)
    podkit eval compare RECORD_A RECORD_B
    """


def _profile_names(ctx, param, value):
    from podkit.client.eval import PROFILES

    for name in value:
        if name not in PROFILES:
            raise click.BadParameter(f"{name!r} is not a profile; the profiles are {', '.join(PROFILES)}")
    return value or tuple(PROFILES)


def _task_names(ctx, param, value):
    from podkit.client.eval import TASK_ORDER

    for name in value:
        if name not in TASK_ORDER:
            raise click.BadParameter(f"{name!r} is not a task; the tasks are {', '.join(TASK_ORDER)}")
    return tuple(name for name in TASK_ORDER if name in value) or TASK_ORDER


@eval_group.command("run")
@click.argument("inventory")
@host_option
@click.option(
    "--profile",
    "profile_names",
    multiple=True,
    callback=_profile_names,
    help="Sampling profile: coding or chat (repeatable; default: both).",
)
@click.option(
    "--task",
    "task_names",
    multiple=True,
    callback=_task_names,
    help="Only this task: explain, bugfix, feature, refactor, tools (repeatable; default: all).",
)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Runs of each task per profile.")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=4096,
    show_default=True,
    help="Output tokens per answer (trimmed to what the server's context leaves).",
)
@click.option("--timeout", default=300.0, show_default=True, help="Seconds per request.")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    default="runs/eval",
    show_default=True,
    help="Where records go (relative: from the project root).",
)
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
    here in a bubblewrap cage (its own workspace, no network, no environment,
    home or project files) with a time limit; without bwrap it is not run.

    \b
    Exit codes: 0 every host evaluated, 1 a host failed, 2 bad input,
    3 unreachable, 4 auth. Scores do not change the exit code.

    \b
    podkit eval inventories/sandbox.py --runs 1
    podkit eval inventories/runpod.py --host coder-1 --profile coding --json
    """
    import threading

    from podkit import project_path
    from podkit.client.eval import load_tasks, run_host, table
    from podkit.client.outcome import Outcome, worst
    from podkit.client.targets import each_host

    targets = load_targets(inventory, host_names)
    tasks = load_tasks(task_names)
    lock = threading.Lock()

    def progress_for(name):
        def progress(message):
            with lock:
                click.echo(clean(f"{name}  {message}"), err=True)

        return progress

    results = each_host(
        lambda t: run_host(
            t, profile_names, runs, max_tokens, timeout, project_path(output_dir), tasks, progress_for(t.name)
        ),
        targets,
    )
    if as_json:
        click.echo(dumps({r["host"]: r for r in results}))
    else:
        for result in results:
            for line in table(result):
                click.echo(clean(line))
    outcomes = {"unreachable": Outcome.UNREACHABLE, "auth": Outcome.AUTH}
    sys.exit(
        int(
            worst(
                outcomes.get(r.get("outcome") or "", Outcome.ERROR) if r.get("error") else Outcome.OK for r in results
            )
        )
    )


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
    podkit eval compare runs/eval/20250101T120000Z-coder-1.json runs/eval/20250102T090000Z-coder-1.json
    """
    from podkit.client.eval import compare, compare_table, load_record

    try:
        comparison = compare(load_record(record_a), load_record(record_b))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    comparison["a"]["path"], comparison["b"]["path"] = record_a, record_b

    def human(found: dict) -> None:
        for line in compare_table(found):
            click.echo(clean(line))

    emit(comparison, as_json, human)
