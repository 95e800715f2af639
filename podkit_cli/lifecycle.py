"""``podkit up``, ``podkit down`` and ``podkit status``: start on demand, stop, and what it has cost.

A RunPod inventory (one that defines ``select``, as ``inventories/runpod.py`` does) is read
twice: for the pods themselves, stopped ones included, through the ``runpod`` package and the
user's RUNPOD_API_KEY (on the controller; the pods' own watchers use their pod-scoped keys),
and through pyinfra for the pods that run. Any other inventory is bare metal: ``down`` stops
the server (the edge stays and says so), ``up`` applies the deploy, which starts it.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from podkit import PROJECT_ROOT, project_path
from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.host.readiness import UP_STARTED
from podkit.host.shell import RemoteError
from podkit.host.status import HostStatus, describe, host_status, parse_status, status_config
from podkit.runpod.pods import PodsError, list_pods, resume_pod, selected, stop_pod
from podkit.text import clean

from .hosts import Host, load_hosts
from .output import emit, host_option

POD_LISTING = "podkit.pods"  # the name inventories/runpod.py is run under to read `select` alone


def pod_selection(inventory: str):
    """The inventory's pod filter when it lists RunPod pods (it defines ``select``), else None."""
    path = project_path(inventory)
    if not path.exists():
        raise click.BadParameter(f"{inventory}: no such inventory file", param_hint="INVENTORY")
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            namespace = runpy.run_path(str(path), run_name=POD_LISTING)
    except (SystemExit, Exception):  # a static inventory that refuses to load says why when pyinfra loads it
        return None
    select = namespace.get("select")
    return select if callable(select) else None


def account_key() -> str | None:
    return os.environ.get("RUNPOD_API_KEY")


def pods_of(select, host_names: tuple[str, ...]) -> list[tuple[str, dict]]:
    """The inventory's pods, stopped ones too, as (host name, pod); only ``host_names`` when given."""
    try:
        pods = selected(list_pods(account_key()), select)
    except PodsError as exc:
        raise click.ClickException(str(exc)) from None
    if host_names:
        unknown = sorted(set(host_names) - {name for name, _ in pods})
        if unknown:
            raise click.BadParameter(f"no pod named {', '.join(unknown)} in the inventory", param_hint="--host")
        pods = [(name, pod) for name, pod in pods if name in host_names]
    if not pods:
        raise click.ClickException("the inventory selects no pod")
    return pods


def running(pod: dict) -> bool:
    return pod.get("desiredStatus") == "RUNNING" and bool(pod.get("runtime"))


def quietly(load):
    """``load()`` with the inventory's notes about left-out pods held back (status says it better)."""
    with contextlib.redirect_stderr(io.StringIO()):
        return load()


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
    pods = pods_of(select, host_names)
    names = tuple(name for name, pod in pods if running(pod))
    try:  # the inventory leaves out running pods it cannot deploy to (zero GPUs, no SSH port, a new host key)
        by_name = {h.name: h for h in quietly(lambda: load_hosts(inventory, names))} if names else {}
    except click.ClickException:
        by_name = {}
    remote_of = dict(zip(by_name, each_host(remote_status, list(by_name.values()))))
    now = time.time()
    return [
        host_status(
            name,
            by_name[name].settings if name in by_name else None,
            remote_of.get(name),
            pod,
            now,
        )
        for name, pod in pods
    ]


@click.command("status")
@click.argument("inventory")
@host_option
@click.option("--json", "as_json", is_flag=True, help="Print every host's status as JSON.")
def status(inventory, host_names, as_json):
    """Say, per host: up or stopped, since when, what it serves, requests in flight, minutes since
    the last request, the idle-stop deadline and what it has cost. Changes nothing.

    RunPod pods are listed through the API (RUNPOD_API_KEY), stopped ones included; spend is the
    pod's costPerHr times its uptime. A bare-metal host's spend is podkit_usd_per_hour times the
    time since it booted.

    \b
    Exit codes: 0 every host read and every program it promises runs, 1 a host could not be
    read or has a problem (a program its supervisor does not run, vLLM given up on or retried,
    named with the cause from its log, a process outside the supervisor).

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
            case = (row.last_start or {}).get("record")
            if case and case.get("logged", {}).get("kv_cache_tokens") is not None:
                row.last_start["record_file"] = str(keep_case(case, state_dir() / CALIBRATION))

    def human(rows):
        for row in rows:
            click.echo("\n".join(describe(row, inventory)))

    emit({row.host: row.as_dict() for row in found} if as_json else found, as_json, human)
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
        for name, pod in pods_of(select, host_names):
            if pod.get("desiredStatus") != "RUNNING":
                click.echo(f"{name}: already {str(pod.get('desiredStatus')).lower()}", err=True)
                continue
            try:
                said = stop_pod(account_key(), pod["id"], name)
            except PodsError as exc:
                click.echo(clean(exc), err=True)
                failed = True
                continue
            click.echo(
                clean(f"{name}: stopped (RunPod says {said}); start it again: podkit up {inventory} --host {name}")
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


def resume(select, host_names: tuple[str, ...], wait: float) -> tuple[list[str], list[str]]:
    """Resume the selected pods that are stopped and wait until each has an SSH address.
    Returns the pods that run now (host names) and one line per pod that cannot come back."""
    pods = pods_of(select, host_names)
    problems: list[str] = []
    waiting: dict[str, str] = {}
    for name, pod in pods:
        if running(pod):
            continue
        if pod.get("desiredStatus") == "RUNNING":  # asked to start, no runtime yet
            waiting[name] = pod["id"]
            continue
        try:
            resume_pod(account_key(), pod["id"], name, int(pod.get("gpuCount") or 1))
        except PodsError as exc:
            problems.append(str(exc))
            continue
        click.echo(f"{name}: resuming pod {pod['id']}", err=True)
        waiting[name] = pod["id"]
    deadline = time.monotonic() + wait
    while waiting and time.monotonic() < deadline:
        time.sleep(2)
        now = dict(pods_of(select, tuple(waiting)))
        for name in list(waiting):
            pod = now.get(name) or {}
            ports = [p for p in (pod.get("runtime") or {}).get("ports") or [] if p.get("privatePort") == 22]
            if running(pod) and any(p.get("isIpPublic") for p in ports):
                click.echo(f"{name}: running, SSH at {ports[0].get('ip')}:{ports[0].get('publicPort')}", err=True)
                del waiting[name]
    problems += [
        f"pod {name} ({pod_id}) has no SSH address after {wait:.0f} s: re-run podkit up"
        for name, pod_id in waiting.items()
    ]
    up = []
    for name, pod in pods_of(select, host_names):
        if running(pod) and not pod.get("gpuCount"):
            problems.append(
                f"pod {name} ({pod['id']}) came back with zero GPUs (its GPU was taken while it was stopped): "
                "migrate it to a new pod on the same network volume, or stop it and run podkit up later"
            )
        elif running(pod):
            up.append(name)
    return up, problems


#: After a Ctrl-C, seconds until the deploy is asked again (it ignores SIGINT until pyinfra and
#: config.py take it), then until it is terminated, then killed: the exit's bound.
FORWARD_EVERY, TERMINATE_AFTER, KILL_AFTER = 0.5, 6.0, 9.0
EXIT_INTERRUPTED = 130


def apply_deploy(inventory: str, names: tuple[str, ...], started: float | None = None) -> int:
    """``pyinfra -y INVENTORY deploy.py`` (limited to ``names``), its output on this terminal.
    ``started``: when ``podkit up`` began, so each start's record holds its total from there.

    Ctrl-C reaches pyinfra from the terminal as it reaches this process. pyinfra starts with SIGINT
    ignored, so no Ctrl-C meets its imports (a traceback); its handler, then the deploy's
    (``operations/interrupt.py``: a line per host saying what ran, exit 130), take it from there, and
    the signal is passed on to it until it exits. One that has not exited :data:`TERMINATE_AFTER`
    seconds after the Ctrl-C is terminated, then killed: the exit is bounded at every point.
    Returns the deploy's exit status, :data:`EXIT_INTERRUPTED` after a Ctrl-C."""
    pyinfra = Path(sys.executable).parent / "pyinfra"
    argv = [str(pyinfra) if pyinfra.exists() else (shutil.which("pyinfra") or "pyinfra"), "-y", inventory, "deploy.py"]
    for name in names:
        argv += ["--limit", name]
    env = {**os.environ, UP_STARTED: f"{started:.3f}"} if started else None
    asked: list[float] = []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the child inherits, until pyinfra takes it
    try:
        child = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=sys.stderr, stderr=sys.stderr, env=env)
        signal.signal(signal.SIGINT, lambda signum, frame: asked.append(time.monotonic()))
        forwarded = 0.0
        while True:
            try:
                status = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if not asked:
                    continue
            since = time.monotonic() - asked[0]
            if since >= KILL_AFTER:
                child.kill()
            elif since >= TERMINATE_AFTER:
                child.terminate()
            elif since - forwarded >= FORWARD_EVERY:
                child.send_signal(signal.SIGINT)
                forwarded = since
    finally:
        signal.signal(signal.SIGINT, previous)
    if asked:
        what = "the deploy had finished" if status == 0 else "the deploy stopped"
        click.echo(
            f"podkit up: interrupted (Ctrl-C): {what} {time.monotonic() - asked[0]:.1f} s later (its lines above "
            "say what ran); no client settings were printed: re-run podkit up",
            err=True,
        )
        return EXIT_INTERRUPTED
    return status


@click.command("up")
@click.argument("inventory")
@host_option
@click.option("--wait", default=600, show_default=True, help="Seconds to wait for resumed pods to get an SSH address.")
def up(inventory, host_names, wait):
    """Start on demand: resume stopped RunPod pods (they come back at new addresses, with new host
    keys, which the inventory handles), apply the deploy to them (or, on bare metal, to the hosts:
    it starts a server that was stopped), then print each endpoint's client settings.

    \b
    Exit codes: 0 every host serves, 1 a host could not be brought up, 130 interrupted (Ctrl-C).

    \b
    podkit up inventories/runpod.py --host coder-1
    podkit up inventories/baremetal.py
    """
    from .client import client_settings, emit_settings
    from .hosts import load_targets

    started = time.time()
    step = "before the deploy: no host was changed (a stopped pod asked to resume may be starting)"
    try:
        select = pod_selection(inventory)
        problems: list[str] = []
        names = host_names
        if select is not None:
            up_now, problems = resume(select, host_names, wait)
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
