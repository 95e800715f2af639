"""``podkit up``, ``podkit down`` and ``podkit status``: start on demand, stop, and what it has cost.

A RunPod inventory (one that defines ``select``, as ``inventories/runpod.py`` does) is read
twice: for the pods themselves, stopped ones included, through RunPod's REST API v2 and the
user's RUNPOD_API_KEY (on the controller; the pods' own watchers use their pod-scoped keys),
and through pyinfra for the pods that run. Any other inventory is bare metal: ``down`` stops
the server (the edge stays and says so), ``up`` applies the deploy, which starts it.
"""

from __future__ import annotations

import os
import sys
import time

import click

from podkit.client.status import HostStatus, describe, host_status, parse_status, status_config
from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.host.shell import RemoteError
from podkit.runpod import control
from podkit.runpod.api import RunPodApi
from podkit.runpod.control import NoGpu, PodsError
from podkit.runpod.pods import Pod, status_of
from podkit.text import clean

from .hosts import Host, load_hosts
from .output import emit, host_option
from .pods import EXIT_INTERRUPTED, account, apply_deploy, pod_selection, pods_of, quietly, running


def remote_status(host: Host) -> dict:
    try:
        result = host.run(podctl_command("status", status_config(host.settings, host.name)), 60)
    except RemoteError as exc:
        return {"error": str(exc)}
    finally:
        host.disconnect()
    if result.status != 0:
        return {"error": f"{host.name}: podctl status exited {result.status}: {result.stderr.strip()[-200:]}"}
    return parse_status(result.stdout)


def statuses(inventory: str, host_names: tuple[str, ...]) -> list[HostStatus]:
    from podkit.client.targets import each_host

    select = pod_selection(inventory)
    if select is None:
        hosts = load_hosts(inventory, host_names)
        remotes = each_host(remote_status, hosts)
        return [host_status(h.name, h.settings, remote) for h, remote in zip(hosts, remotes)]
    api = account()
    pods = pods_of(select, host_names, api)
    names = tuple(name for name, pod in pods if running(pod))
    try:  # the inventory leaves out running pods it cannot deploy to (no GPU, no SSH port, a new host key)
        by_name = {h.name: h for h in quietly(lambda: load_hosts(inventory, names))} if names else {}
    except click.ClickException:
        by_name = {}
    remote_of = dict(zip(by_name, each_host(remote_status, list(by_name.values()))))
    now = time.time()
    found = [
        host_status(name, by_name[name].settings if name in by_name else None, remote_of.get(name), status_of(pod), now)
        for name, pod in pods
    ]
    for row, (_, pod) in zip(found, pods):  # what RunPod billed: one read a pod, skipped where refused
        row.billed_usd = billed(api, pod)
    return found


def billed(api: RunPodApi, pod: Pod) -> float | None:
    """What RunPod billed for the pod over the last 30 days (``GET /v2/billing/pods``), None where unread."""
    from podkit.runpod.api import RunPodError

    try:
        return api.pod_billing(pod.id, days=30)
    except RunPodError:
        return None


@click.command("status")
@click.argument("inventory")
@host_option
@click.option("--json", "as_json", is_flag=True, help="Print every host's status as JSON.")
def status(inventory, host_names, as_json):
    """Say, per host: up or stopped, since when, what it serves, requests in flight, minutes since
    the last request, the idle-stop deadline and what it has cost. Changes nothing.

    RunPod pods are listed through its REST API v2 (RUNPOD_API_KEY), stopped ones included; spend
    is the pod's cost an hour times its uptime, beside what RunPod billed for it over 30 days, and
    the account's balance where GraphQL still answers. A bare-metal host's spend is
    podkit_usd_per_hour times the time since it booted.

    \b
    Exit codes: 0 every host read and every program it promises runs, 1 a host could not be
    read or has a problem (a program its supervisor does not run, vLLM given up on or retried,
    named with the cause from its log, a process outside the supervisor, a pod that cannot stop
    itself when its idle stop is on).

    \b
    podkit status inventories/runpod.py
    podkit status inventories/baremetal.py --host gpu-box-1 --json
    """
    found = statuses(inventory, host_names)
    if as_json:  # each start read becomes a reference case for the plan's calibration
        from podkit import state_dir
        from podkit.host.measure import keep_case
        from podkit_cli.measure import CALIBRATION

        for row in found:
            start = row.last_start or {}
            case = start.get("record")
            if case and case.get("logged", {}).get("kv_cache_tokens") is not None:
                start["record_file"] = str(keep_case(case, state_dir() / CALIBRATION))

    def human(rows):
        for row in rows:
            click.echo("\n".join(describe(row, inventory)))

    emit({row.host: row.as_dict() for row in found} if as_json else found, as_json, human)
    if any(row.pod_id for row in found):  # optional: GraphQL, which RunPod switches off in early 2027
        from podkit.runpod.balance import balance

        money = balance(os.environ.get("RUNPOD_API_KEY"))
        if money is not None:
            click.echo(f"RunPod account balance: ${money:.2f}", err=True)
    if any(row.error or row.problems for row in found):
        sys.exit(1)


@click.command("down")
@click.argument("inventory")
@host_option
def down(inventory, host_names):
    """Stop what costs money: RunPod pods through the API (the volume stays; `podkit up` resumes
    them), or on bare metal the vLLM server (freeing the GPUs; the edge stays and answers 503
    saying how to start it again).

    \b
    Exit codes: 0 all stopped, 1 a host could not be stopped.

    \b
    podkit down inventories/runpod.py --host coder-1
    podkit down inventories/baremetal.py
    """
    failed = False
    select = pod_selection(inventory)
    if select is not None:
        api = account()
        for name, pod in pods_of(select, host_names, api):
            if pod.state not in ("running", "starting"):
                click.echo(f"{name}: already {pod.state} (RunPod says {pod.status})", err=True)
                continue
            try:
                now = control.stop(api, pod, name)
            except PodsError as exc:
                click.echo(clean(exc), err=True)
                failed = True
                continue
            click.echo(
                clean(
                    f"{name}: stopped (RunPod says {now.status}); start it again: podkit up {inventory} --host {name}"
                )
            )
        sys.exit(1 if failed else 0)
    for host in load_hosts(inventory, host_names):
        try:
            result = host.run(podctl_command("down", status_config(host.settings, host.name)), 180)
        except RemoteError as exc:
            click.echo(clean(exc), err=True)
            failed = True
            continue
        finally:
            host.disconnect()
        answer = parse_status_line(result.stdout, result.stderr, result.status)
        if not answer.get("ok"):
            click.echo(clean(f"{host.name}: cannot stop the server: {answer.get('error')}"), err=True)
            failed = True
            continue
        click.echo(
            clean(f"{host.name}: {answer.get('done')}; start it again: podkit up {inventory} --host {host.name}")
        )
    sys.exit(1 if failed else 0)


def parse_status_line(output: str, errors: str = "", status: int = 0) -> dict:
    """podctl down's answer, or {"ok": False, "error"} saying what came back instead."""
    try:
        return read_answer("down", output, errors, status)
    except PodctlError as exc:
        return {"ok": False, "error": str(exc)}


def resume(
    select, host_names: tuple[str, ...], wait: float, inventory: str = "INVENTORY"
) -> tuple[list[str], list[str], dict[str, Pod]]:
    """Start the selected pods that are stopped and wait until each runs with an SSH address.
    Returns the pods that run now (host names), one line per pod that cannot come back, and the
    pods that cannot get their GPU back (by host name): RunPod refused the start for want of a free
    GPU on the pod's machine, or the pod came back without it. Those can only move."""
    api = account()
    pods = pods_of(select, host_names, api)
    problems: list[str] = []
    lost: dict[str, Pod] = {}
    waiting: dict[str, Pod] = {}
    up = []
    for name, pod in pods:
        if running(pod) and pod.lost_gpu:
            problems.append(control.no_gpu_line(pod, name, inventory))
            lost[name] = pod
            continue
        if running(pod):
            up.append(name)
            continue
        if pod.state == "starting" or pod.running:  # asked to start already, no address yet
            waiting[name] = pod
            continue
        try:
            control.start(api, pod, name, inventory)
        except NoGpu as exc:
            problems.append(str(exc))
            lost[name] = pod
            continue
        except PodsError as exc:
            problems.append(str(exc))
            continue
        click.echo(f"{name}: starting pod {pod.id}", err=True)
        waiting[name] = pod
    deadline = time.monotonic() + wait
    for name, pod in waiting.items():
        try:
            now = control.wait_for_ssh(
                api, pod.id, name, max(0.0, deadline - time.monotonic()), say=lambda line: click.echo(line, err=True)
            )
        except PodsError as exc:
            problems.append(str(exc))
            continue
        if now.lost_gpu:
            problems.append(control.no_gpu_line(now, name, inventory))
            lost[name] = now
            continue
        if pod.state != "running":
            host, port, _ = now.ssh_address() or ("?", 0, "")
            click.echo(f"{name}: running, SSH at {host}:{port}", err=True)
        up.append(name)
    return up, problems, lost


@click.command("up")
@click.argument("inventory")
@host_option
@click.option("--wait", default=600, show_default=True, help="Seconds to wait for started pods to get an SSH address.")
@click.option(
    "--move",
    is_flag=True,
    help="A pod whose GPU is gone: create a new pod on the same network volume (same data center, image, "
    "ports, env and GPU type), deploy and verify it, then terminate the old one.",
)
@click.option(
    "--any-gpu",
    is_flag=True,
    help="With --move: when the same GPU type is not in stock, any type the plan says fits (cheapest first).",
)
def up(inventory, host_names, wait, move, any_gpu):
    """Start on demand: start stopped RunPod pods (they come back at new addresses, with new host
    keys, which the inventory handles), apply the deploy to them (or, on bare metal, to the hosts:
    it starts a server that was stopped), then print each endpoint's client settings.

    A stopped pod is not a paused one: its GPU goes back to RunPod, and when another user took it,
    RunPod refuses the start. podkit up says so in one line; with --move it moves the pod: a new
    pod on the same network volume, deployed (nothing is installed or downloaded again: it is all
    on the volume) and verified before the old pod is terminated.

    \b
    Exit codes: 0 every host serves, 1 a host could not be brought up, 130 interrupted (Ctrl-C).

    \b
    podkit up inventories/runpod.py --host coder-1
    podkit up inventories/runpod.py --host coder-1 --move
    podkit up inventories/baremetal.py
    """
    from .client import client_settings, emit_settings
    from .hosts import load_targets

    started = time.time()
    step = "before the deploy: no host was changed (a stopped pod asked to start may be starting)"
    try:
        select = pod_selection(inventory)
        problems: list[str] = []
        names = host_names
        if (move or any_gpu) and select is None:
            raise click.BadParameter(
                "--move and --any-gpu move RunPod pods: this inventory lists none", param_hint="--move"
            )
        if select is not None:
            up_now, problems, lost = resume(select, host_names, wait, inventory)
            if move and lost:
                from .move import move_pods

                step = "during the move: the old pod is kept until the new one verifies; podkit status says what runs"
                moved, settled, failed = move_pods(inventory, lost, wait, any_gpu, started)
                problems = [p for p in problems if not p.startswith(tuple(f"pod {n} (" for n in settled))] + failed
                up_now += moved
            names = tuple(up_now)
            for line in problems:
                click.echo(line, err=True)
            if not names:
                raise click.ClickException("no pod is running to deploy to")
        applied = apply_deploy(inventory, names, started)
        if applied == EXIT_INTERRUPTED:
            sys.exit(EXIT_INTERRUPTED)
        if applied != 0:
            raise click.ClickException(f"the deploy failed (see above); fix it and run podkit up {inventory} again")
        step = f"after the deploy: the hosts serve; podkit client {inventory} prints their settings"
        targets = load_targets(inventory, names) if select is None else quietly(lambda: load_targets(inventory, names))
        emit_settings(client_settings(targets), {t.name: t.key for t in targets}, None, False, False)
    except KeyboardInterrupt:
        click.echo(f"podkit up: interrupted (Ctrl-C) {step}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(1 if problems else 0)
