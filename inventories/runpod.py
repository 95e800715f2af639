"""Your RunPod pods, listed live from RunPod's REST API v2 (a dynamic pyinfra inventory).

    export RUNPOD_API_KEY=...                    # RunPod > Settings > API Keys
    pyinfra -y inventories/runpod.py deploy.py   # converge every selected pod
    podkit verify inventories/runpod.py   # then prove each endpoint works

Each run asks the API where every pod is now (every page of GET /v2/pods): a pod
that was stopped, started or moved is found at its new IP and port. A pod is
reached by "full SSH" (ssh.direct: its public IP and the port mapped to 22/tcp);
expose 22/tcp when you create it (podkit create does). Selected pods that
cannot be deployed to (stopped, starting, no public SSH port, back without its
GPU, a host key that changed without a restart) are reported in one line each
and left out, or fail the whole run with PODKIT_POD_STRICT=1. Host keys are
trusted on first use per pod id, and again after a start the API reports (see
podkit/runpod/hostkeys.py). A pod's env PODKIT_DATA (a JSON object of settings,
as podkit create writes it) overrides group_data for that pod.

Environment:
    RUNPOD_API_KEY               your API key
    RUNPOD_API_BASE_URL          another API endpoint (default https://api.runpod.io)
    PODKIT_POD_PREFIX            only pods whose name starts with this (default: every pod)
    PODKIT_POD_STRICT=1          fail the run when a selected pod cannot be deployed to
    PODKIT_ACCEPT_NEW_HOST_KEY   pod ids (comma-separated, or "all") whose changed SSH host key to accept
                                 when no restart explains it
    PODKIT_STATE_DIR             where the per-project host keys live (default .podkit/)

For another selection, edit select() below (podkit up, down and status use it too). Every pod's host data carries
runpod_pod_id, runpod_gpu_name, runpod_gpu_count, runpod_cost_per_hr,
runpod_public_ip, runpod_tcp_ports and podkit_volume (the
pod's volume mount path); settings for every pod go in group_data/runpod.py.
"""

import os
import sys

from podkit.runpod.control import PodsError, account, list_pods
from podkit.runpod.hostkeys import PodKeys
from podkit.runpod.pods import SETTINGS_ENV, by_prefix, hosts_for, settings_hosts

select = by_prefix(os.environ.get("PODKIT_POD_PREFIX", ""))


def _say(line):
    print(f"inventories/runpod.py: {line}", file=sys.stderr)


def _pods():
    try:
        pods = list_pods(account(os.environ.get("RUNPOD_API_KEY")))
    except PodsError as exc:
        sys.exit(f"inventories/runpod.py: {exc}")
    hosts, skipped = hosts_for(pods, select, inventory=os.path.relpath(__file__))
    hosts, changed, notes = PodKeys().check(hosts)
    skipped += changed
    for line in notes:
        _say(line)
    for pod in skipped:
        _say(pod.line())
    if skipped and os.environ.get("PODKIT_POD_STRICT") == "1":
        sys.exit(f"inventories/runpod.py: {len(skipped)} selected pod(s) cannot be deployed to (PODKIT_POD_STRICT=1)")
    if not hosts:
        sys.exit(
            "inventories/runpod.py: no pod to deploy to" + ("" if skipped else f" (none of {len(pods)} pods selected)")
        )
    return [(host.name, host.data) for host in hosts]


def _settings(mode):
    """podkit create and podkit up --move plan with the settings a pod has (or will have), whatever
    its state: every selected pod (or the one to create) with its data, nothing to connect to."""
    try:
        pods = [] if mode.startswith("new:") else list_pods(account(os.environ.get("RUNPOD_API_KEY")))
    except PodsError as exc:
        sys.exit(f"inventories/runpod.py: {exc}")
    return settings_hosts(pods, select, mode)


# podkit up, down and status run this file as "podkit.pods" to read `select` alone: they see
# stopped pods too, and resume or stop them.
if __name__ != "podkit.pods":
    runpod = _settings(os.environ[SETTINGS_ENV]) if os.environ.get(SETTINGS_ENV) else _pods()
