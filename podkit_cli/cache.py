"""``podkit cache``: the hub cache on each host's volume: what it holds, and what broke."""

from __future__ import annotations

import sys

import click

from podkit.text import clean as clean_text

from .hosts import load_hosts
from .output import emit, host_option


@click.group()
def cache():
    """The hub cache on each host's volume: what it holds, and what broke.

    \b
    podkit cache ls inventories/sandbox.py
    podkit cache clean inventories/sandbox.py --json
    """


def _cache(inventory, host_names, clean: bool):
    from podkit.host.podctl import podctl_command
    from podkit.host.shell import RemoteError

    reports = {}
    for host in load_hosts(inventory, host_names):
        name, paths = host.name, host.settings.paths
        command = podctl_command("cache", {"hub_cache": paths.hub_cache, "run_dir": paths.run, "clean": clean})
        try:
            result = host.run(command)
        except RemoteError as exc:
            reports[name] = {"error": str(exc)}
            continue
        reports[name] = cache_report(result.stdout, result.stderr, result.status)
    return reports


def cache_report(output: str, errors: str = "", status: int = 0) -> dict:
    """podctl cache's answer, or {"error"} in one line when the host answered something else."""
    from podkit.host.podctl import PodctlError, last_line, read_answer

    try:
        report = read_answer("cache", output, errors, status)
    except PodctlError as exc:
        return {"error": str(exc)}
    shape = {"repos": dict, "problems": list}
    if not all(isinstance(report.get(k), t) for k, t in shape.items()):
        return {"error": f"podctl cache answered something else: {last_line(output)}"}
    return report


def _print_cache(reports, clean: bool) -> None:
    for name, report in reports.items():
        if "error" in report:
            click.echo(f"{name}: {click.style(clean_text(report['error']), fg='red')}")
            continue
        free = report["free_bytes"]
        click.echo(
            f"{name}: {len(report['repos'])} model(s) cached"
            + (f", {free / 1e9:.1f} GB free" if free is not None else "")
        )
        for repo, size in sorted(report["repos"].items()):
            click.echo(f"  {size / 1e9:8.2f} GB  {clean_text(repo)}")
        for item in report["problems"]:
            state = "removed" if item["removed"] else ("in use, kept" if item["in_use"] else "broken")
            click.echo(clean_text(f"  {item['kind']:<12} {item['bytes'] / 1e6:8.1f} MB  {state:<12} {item['path']}"))
        if clean:
            click.echo(f"  freed {report['freed_bytes'] / 1e9:.2f} GB")
        elif report["problems"]:
            click.echo("  run: podkit cache clean INVENTORY")


@cache.command("ls")
@click.argument("inventory")
@host_option
@click.option("--json", "as_json", is_flag=True)
def cache_ls(inventory, host_names, as_json):
    """What each host's hub cache holds, and its partial downloads, stale locks and broken links."""
    reports = _cache(inventory, host_names, clean=False)
    emit(reports, as_json, lambda r: _print_cache(r, clean=False))
    sys.exit(1 if any("error" in r for r in reports.values()) else 0)


@cache.command("clean")
@click.argument("inventory")
@host_option
@click.option("--json", "as_json", is_flag=True)
def cache_clean(inventory, host_names, as_json):
    """Remove partial downloads, stale locks and broken snapshot links that no process holds.

    Never a complete blob, and nothing while a fetch runs.
    """
    reports = _cache(inventory, host_names, clean=True)
    emit(reports, as_json, lambda r: _print_cache(r, clean=True))
    sys.exit(1 if any("error" in r for r in reports.values()) else 0)
