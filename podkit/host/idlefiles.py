"""The idle watcher's files on a host: its program (one file put together from
``podkit/remote/idle/``) and its config, and whether its idle stop is a sleep (bare metal, a
build with a sleep mode) with the wake hook the edge asks."""

from __future__ import annotations

import json

from podkit.host.cluster import Cluster
from podkit.host.shipped import program
from podkit.paths import UNIT_NAME
from podkit.settings import PackageSpec, Settings

# How often the watcher reads vLLM's counters: a stop comes at most this late.
IDLE_POLL_SECONDS = 5
#: How long the watcher's proof that a pod can stop itself stands before it proves it again.
SELF_STOP_CHECK_SECONDS = 6 * 3600

#: How long the edge holds a request while the server wakes or starts, before a 503 (a start from
#: the volume's caches; a cold start that has to compile everything may take longer)
WAKE_TIMEOUT_SECONDS = 600

#: the settings each key of the watcher's config comes from, for a refusal that names what to fix
IDLE_SETTINGS = {"idle_seconds": "podkit_idle_stop_minutes", "usd_per_hour": "podkit_usd_per_hour"}


def idle_source() -> str:
    """The idle watcher's program, as it runs on the host: one file put together from ``podkit/remote/idle/``."""
    return program("podkit.remote.idle")


def sleeps_when_idle(settings: Settings, package: PackageSpec, pod_id: str | None, cluster: Cluster | None) -> bool:
    """Whether the idle stop puts vLLM to sleep: an idle time is set, the GPU stays ours (bare
    metal: a sleeping pod still bills its GPU), one host, and a build with a sleep mode (vLLM's
    ``is_sleep_mode_available`` covers CUDA, ROCm and XPU: the CPU build has none, and stops)."""
    return settings.idle_stop_minutes > 0 and pod_id is None and cluster is None and not package.is_cpu_build


def idle_config(
    settings: Settings, host_name: str, pod_id: str | None, follow: dict | None = None, sleep: bool = False
) -> str:
    """The watcher's config (JSON; no secret): where vLLM's counters are, how long idle is too
    long, and what to stop: the pod (``pod_id``), else vLLM under its supervisor (put to sleep
    when ``sleep``), with the wake hook the edge asks (podkit/remote/idle/wake.py). A cluster's
    follower has no counters of its own: it ``follow``s the head's store port."""
    paths = settings.paths
    wake = {
        "wake_socket": paths.wake_socket,
        "waking_file": paths.waking_marker,
        "wake_file": paths.wake_record,
        "proof_file": paths.wake_proof,
        "wake_timeout_seconds": WAKE_TIMEOUT_SECONDS,
        "key_file": paths.api_key,
        "served_model_name": settings.served_model_name,
        "base_url": f"http://127.0.0.1:{settings.port}",
        "sleep": sleep,
    }
    config = {
        **({} if follow or pod_id else wake),
        **({"follow": follow} if follow else {}),
        "host": host_name,
        "metrics_url": f"http://127.0.0.1:{settings.port}/metrics",
        "idle_seconds": settings.idle_stop_minutes * 60,
        "usd_per_hour": settings.usd_per_hour,  # for podkit status: what the host was deployed with
        "poll_seconds": IDLE_POLL_SECONDS,
        "retry_seconds": 300,
        "self_stop_check_seconds": SELF_STOP_CHECK_SECONDS,
        "state_file": paths.idle_state,
        "stopped_file": paths.stopped_marker,
        "action": "runpod" if pod_id else "server",
        "pod_id": pod_id,
        "supervisor": settings.supervisor,
        "supervisorctl": f"{paths.venv}/bin/supervisorctl",
        "supervisord_conf": paths.supervisord_conf,
        "supervisor_socket": paths.supervisor_socket,  # the stop without supervisorctl (the venv gone)
        "unit": UNIT_NAME,
        "deploy_lock": settings.volume,  # what a deploy flocks while it runs: no idle stop meanwhile
    }
    return json.dumps(config, indent=1, sort_keys=True) + "\n"


def idle_config_problems(settings: Settings, host_name: str, pod_id: str | None) -> list[str]:
    """The deploy writes no idle.json its watcher would refuse (it would leave the watcher FATAL,
    so nothing stops the host when idle): the watcher's own check, run on the rendered config."""
    from podkit.remote.idle.config import config_problem

    problem = config_problem(json.loads(idle_config(settings, host_name, pod_id)))
    if problem is None:
        return []
    key = problem.split(" ", 1)[0]
    fix = f"fix {IDLE_SETTINGS[key]}" if key in IDLE_SETTINGS else "re-apply with podkit's own templates"
    return [f"the idle watcher would refuse its config ({problem}): {fix}"]


def self_stop_problem(pod_id: str, minutes: float, proof: dict | None) -> str | None:
    """Why pod ``pod_id`` would not stop itself after ``minutes`` idle (the idle watcher's proof: a
    read of the pod with its own key, the same ways the stop goes), with the fix; None when it can."""
    if isinstance(proof, dict) and proof.get("ok") and proof.get("pod_id") == pod_id:
        return None
    if not isinstance(proof, dict) or proof.get("pod_id") not in (pod_id, None):
        why = "the idle watcher has not proven it can (is it running? podkit status says)"
    else:
        why = str(proof.get("why") or "no reason given")
    if "RUNPOD_API_KEY" in why or "RUNPOD_POD_ID" in why:
        fix = "RunPod gives every pod its id and a pod-scoped key: use an image that keeps RunPod's environment"
    elif "statuscode 410" in why or 'unknown command "pod"' in why:
        fix = "the pod's runpodctl is an old build, which speaks APIs RunPod switched off: runpodctl update in the pod"
    elif "refused the pod's key" in why:
        fix = "RunPod refused the pod's own key: restart the pod (RunPod gives it a new one)"
    else:
        fix = "the pod must reach api.runpod.io (or carry a runpodctl that does)"
    return (
        f"pod {pod_id} cannot stop itself, so its idle stop after {minutes:g} minutes would not happen ({why}): "
        f"{fix}; or set podkit_idle_stop_minutes = 0 and stop it with podkit down"
    )
