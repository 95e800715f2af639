"""What the commands that ask RunPod for pods share (``up``, ``down``, ``status``, ``create``, the
move): the inventory's pod selection and the pods it selects, the deploy of some hosts; a pod's
settings read through the inventory (its settings mode: the pod need not run, or exist), the plan
for GPUs a pod does not have yet, and the deploy and verify of one new pod before anything old is
let go."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from podkit import PROJECT_ROOT
from podkit.host.start.readiness import UP_STARTED
from podkit.plan.gpus import Hardware
from podkit.runpod import control
from podkit.runpod.api import RunPodApi, RunPodError
from podkit.runpod.control import PodsError
from podkit.runpod.pods import SETTINGS_ENV, Pod, selected
from podkit.settings import Settings, SettingsError

from .hosts import inventory_file, load_hosts

POD_LISTING = "podkit.pods"  # the name inventories/runpod.py is run under to read `select` alone


def pod_selection(inventory: str):
    """The inventory's pod filter when it lists RunPod pods (it defines ``select``), else None."""
    path = inventory_file(inventory)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            namespace = runpy.run_path(str(path), run_name=POD_LISTING)
    except (SystemExit, Exception):  # a static inventory that refuses to load says why when pyinfra loads it
        return None
    select = namespace.get("select")
    return select if callable(select) else None


def account() -> RunPodApi:
    try:
        return control.account(os.environ.get("RUNPOD_API_KEY"))
    except PodsError as exc:
        raise click.ClickException(str(exc)) from None


def pods_of(select, host_names: tuple[str, ...], api: RunPodApi | None = None) -> list[tuple[str, Pod]]:
    """The inventory's pods, stopped ones too, as (host name, pod); only ``host_names`` when given."""
    try:
        pods = selected(control.list_pods(api or account()), select)
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


def running(pod: Pod) -> bool:
    return pod.running and pod.ssh_address() is not None


def quietly(load):
    """``load()`` with the inventory's notes about left-out pods held back (status says it better)."""
    with contextlib.redirect_stderr(io.StringIO()):
        return load()


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
    found = str(inventory_file(inventory))
    argv = [str(pyinfra) if pyinfra.exists() else (shutil.which("pyinfra") or "pyinfra"), "-y", found, "deploy.py"]
    for name in names:
        argv += ["--limit", name]
    env = {**os.environ, UP_STARTED: f"{started:.3f}"} if started else None
    if threading.current_thread() is not threading.main_thread():
        # a wake of podkit tunnel --wake: its own Ctrl-C handling ends the tunnel and this child with it
        return subprocess.run(argv, cwd=PROJECT_ROOT, stdout=sys.stderr, stderr=sys.stderr, env=env).returncode
    asked: list[float] = []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what the child inherits, until pyinfra takes it
    try:
        child = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=sys.stderr, stderr=sys.stderr, env=env)
        signal.signal(signal.SIGINT, lambda _signum, _frame: asked.append(time.monotonic()))
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


@contextmanager
def _env(name: str, value: str):
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def pod_settings(inventory: str, name: str, new: bool = False, overrides: dict[str, Any] | None = None) -> Settings:
    """The settings host ``name`` of a RunPod inventory has (``new``: would have, once created), with
    the group data the deploy reads and the pod's own PODKIT_DATA, whatever the pod's state; then
    ``overrides`` (checked as any data is)."""
    with _env(SETTINGS_ENV, f"new:{name}" if new else "all"):
        (host,) = load_hosts(inventory, (name,))
    try:
        return Settings.from_mapping({**host.data, **(overrides or {})})
    except SettingsError as exc:
        raise click.ClickException(f"{name}: {exc}") from None


def planner(settings: Settings) -> Callable[[Hardware], Any]:
    """``plan_for(hardware)``: the plan the deploy would make for ``settings`` on those GPUs (the
    checkpoint and its FP8 sibling read from the hub once). Bad input is one line."""
    from podkit.host.hostplan import plan_options
    from podkit.plan.checkpoints import ModelError, find_fp8_alternative, from_directory, from_hub, is_local
    from podkit.plan.families import UnknownFamily, family_for
    from podkit.plan.gpus import PlanError
    from podkit.plan.serverplan import make_plan

    try:  # a hub repo (the usual), or a folder both this machine and the pod see (as podkit plan takes one)
        checkpoint = from_directory(settings.model) if is_local(settings.model) else from_hub(settings.model)
    except ModelError as exc:
        raise click.ClickException(f"{settings.model}: {exc}") from None
    try:
        family = family_for(checkpoint.repo, checkpoint.config)
    except UnknownFamily:
        family = None
    found: dict[str, Any] = {}

    def plan_for(hardware: Hardware):
        fp8 = None
        if settings.prefer_fp8 and hardware.fp8_supported and not checkpoint.is_fp8 and not checkpoint.local:
            if "fp8" not in found:
                found["fp8"] = find_fp8_alternative(checkpoint)
            fp8 = found["fp8"]
        try:
            return make_plan(
                checkpoint,
                hardware,
                fp8_alternative=fp8,
                prefer_fp8=settings.prefer_fp8,
                family=family,
                **plan_options(settings, settings.vllm_package.version),
            )
        except (PlanError, ModelError, KeyError) as exc:
            detail = f"its config.json lacks {exc}" if isinstance(exc, KeyError) else str(exc)
            raise click.ClickException(f"{settings.model}: cannot be planned: {detail}") from None

    return plan_for


def catalog_reader(api: RunPodApi, cloud: str, who: str = "") -> Callable[[int], list]:
    """``catalog(count)``: RunPod's GPU catalog for pods of ``count`` GPUs in ``cloud``, read once per count."""
    cache: dict[int, list] = {}

    def catalog(count: int) -> list:
        if count not in cache:
            try:
                cache[count] = api.gpu_types(count, cloud)
            except RunPodError as exc:
                raise click.ClickException(control.line(f"{who}cannot read RunPod's GPU catalog", exc)) from None
        return cache[count]

    return catalog


def deploy_and_verify(inventory: str, name: str, started: float) -> str | None:
    """Apply the deploy to host ``name`` alone, then ``podkit verify`` it: None when both pass, else
    which one failed (their output is on this terminal)."""
    if apply_deploy(inventory, (name,), started) != 0:
        return "its deploy failed (see above)"
    argv = [sys.executable, "-m", "podkit_cli", "verify", str(inventory_file(inventory)), "--host", name]
    if subprocess.run(argv, cwd=PROJECT_ROOT, stdout=sys.stderr, stderr=sys.stderr).returncode != 0:
        return "its verify failed (see above)"
    return None


def say(line: str) -> None:
    click.echo(line, err=True)
