"""``podkit plan --measure INVENTORY MODEL``: vLLM itself says whether MODEL fits the host.

On each selected host, under its deploy lock, with the vLLM the host runs: the deploy's own plan
and flags for MODEL, the checkpoint's config and tokenizer only (the FP8 sibling where the plan
picks it) in a scratch folder on the volume, one ``vllm serve --load-format dummy`` start on a
free loopback port, read and stopped. The logic is in :mod:`podkit.host.measure`; this module
reaches the hosts.
"""

from __future__ import annotations

import os
import sys

import click

from podkit import project_path, state_dir
from podkit.host.measure import keep_case, measure_command, measure_config, parse_answer, read_measurement, report_lines
from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.host.probe import ProbeError, parse_probe, probe_config, server_config
from podkit.host.shell import RemoteError
from podkit.host.start.startup import plan_record
from podkit.settings import Settings, SettingsError
from podkit_cli.output import dumps

#: where ``plan --measure --json`` and ``status --json`` keep each start as a reference case
CALIBRATION = "calibration"


def _controller() -> dict:
    import getpass
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid(), "user": getpass.getuser()}


def _podctl(host, action: str, cfg: dict, timeout: float = 120) -> dict:
    result = host.run(podctl_command(action, cfg), timeout)
    try:
        return read_answer(action, result.stdout, result.stderr, result.status)
    except PodctlError as exc:
        raise click.ClickException(f"{host.name}: {exc}") from None


def server_refusal(name: str, settings: Settings, state, stop_server: bool) -> str | None:
    """Why the host's own server stops a measurement: on GPUs it holds its share of their memory,
    which the measured start needs too (the CPU build's KV cache is the size its flags give)."""
    if stop_server or not state.has_gpus or not state.server_pid:
        return None
    return (
        f"{name}: the host's own vLLM (pid {state.server_pid}) holds vllm_gpu_memory_utilization "
        f"{settings.gpu_memory_utilization} of each GPU's memory, which the measured start needs too; "
        "re-run with --stop-server (it stops the server for the measurement and starts it again)"
    )


def measure_host(host, model: str, overrides: dict, stop_server: bool) -> dict:
    """Measure ``model`` on one inventory host; raises ClickException with one line on a refusal."""
    from podkit.host.hostplan import plan_host
    from podkit.host.preflight import choose_vllm
    from podkit.keys import ApiKeyError, read_hf_token
    from podkit.plan.checkpoints import from_hub

    try:
        settings = Settings.from_mapping({**host.data, "vllm_model": model, **overrides})
        token = read_hf_token(project_path(settings.hf_token_file))
    except (SettingsError, ApiKeyError) as exc:
        raise click.ClickException(f"{host.name}: {exc}") from None
    probed = host.run(podctl_command("probe", probe_config(settings, controller=_controller())), 120)
    try:
        state = parse_probe(probed.stdout)
    except ProbeError as exc:
        raise click.ClickException(f"{host.name}: {exc}") from None
    held = state.lock_problems()
    if held:
        raise click.ClickException(f"{host.name}: {held[0]}")
    package, found = choose_vllm(settings, state)
    if found is None or not found.python or not found.vllm_bin:
        raise click.ClickException(
            f"{host.name}: {package} is not installed on the host, and a measurement runs the vLLM the host "
            "runs; apply the deploy first (it installs vLLM), then measure"
        )
    launch = plan_host(
        settings,
        state,
        vllm_version=package.version,
        prefer_fp8=settings.prefer_fp8,
        resolve=lambda m: from_hub(m, token=token),
    )
    analytic = launch.plan
    # the analytic memory verdict is what the measurement checks: every other problem stops it
    problems = [p for p in launch.problems if not (analytic is not None and p.startswith(analytic.reason))]
    if problems:
        raise click.ClickException(f"{host.name}: {problems[0]}")
    refusal = server_refusal(host.name, settings, state, stop_server)
    if refusal:
        raise click.ClickException(refusal)
    stopped = bool(stop_server and state.server_pid)
    if stopped:
        from podkit.client.status import status_config

        down = _podctl(host, "down", status_config(settings, host.name))
        if not down.get("ok"):
            raise click.ClickException(f"{host.name}: could not stop the server: {down.get('error')}")
    try:
        cfg = measure_config(settings, launch, found.vllm_bin)
        result = host.run(
            measure_command(cfg, found.python, os.environ.get("HF_ENDPOINT")), settings.ready_timeout + 600
        )
        answer = parse_answer(result.stdout + "\n" + result.stderr)
    finally:
        if stopped:
            started = _podctl(host, "supervise", server_config(settings))
            if not started.get("ok"):
                click.echo(
                    f"{host.name}: could not start the server again ({started.get('error')}); re-apply the deploy",
                    err=True,
                )
    measured = read_measurement(host.name, answer, plan_record(settings, launch))
    measured["analytic"] = {"fits": analytic.fits, "reason": analytic.reason} if analytic is not None else None
    measured["checkpoint"] = f"{launch.fetch.repo}@{launch.fetch.revision}" if launch.fetch else launch.model
    measured["server_stopped_and_started"] = stopped
    return measured


def run_measure(inventory: str, host_names: tuple[str, ...], model: str, overrides: dict, stop_server: bool, as_json):
    from podkit_cli.hosts import load_hosts

    results = []
    for host in load_hosts(inventory, host_names):
        try:
            measured = measure_host(host, model, overrides, stop_server)
        except RemoteError as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            host.disconnect()  # the deploy lock's holder lets go with the connection
        if as_json and measured.get("reference_case"):
            measured["reference_case_file"] = str(keep_case(measured["reference_case"], state_dir() / CALIBRATION))
        results.append(measured)
        if not as_json:
            for line in report_lines(measured):
                click.echo(line)
    if as_json:
        click.echo(dumps(results))
    sys.exit(0 if all(m["fits"] for m in results) else 1)
