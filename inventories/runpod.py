"""Your RunPod pods, listed live from the RunPod API (a dynamic pyinfra inventory).

    export RUNPOD_API_KEY=...                    # RunPod > Settings > API Keys
    pyinfra -y inventories/runpod.py deploy.py   # converge every selected pod
    podkit verify inventories/runpod.py   # then prove each endpoint works

Each run asks the API where every pod is now: a pod that was stopped, reset or
migrated is found at its new IP and port. A pod is reached by "full SSH" (its
public IP and the public port mapped to 22/tcp); expose 22/tcp with a public
IP when you create it. Selected pods that cannot be deployed to (stopped, no
public SSH port, back with zero GPUs, a host key that changed without a
restart) are reported in one line each and left out, or fail the whole run
with PODKIT_POD_STRICT=1. Host keys are trusted on first use per pod id, and
again after a restart the API reports (see podkit/runpod/hostkeys.py).

Environment:
    RUNPOD_API_KEY               your API key (the runpod package does not read it itself)
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

from podkit.runpod.hostkeys import PodKeys
from podkit.runpod.pods import PodsError, by_prefix, hosts_for, list_pods

select = by_prefix(os.environ.get("PODKIT_POD_PREFIX", ""))


def _say(line):
    print(f"inventories/runpod.py: {line}", file=sys.stderr)


def _pods():
    try:
        pods = list_pods(os.environ.get("RUNPOD_API_KEY"))
    except PodsError as exc:
        sys.exit(f"inventories/runpod.py: {exc}")
    hosts, skipped = hosts_for(pods, select)
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


# podkit up, down and status run this file as "podkit.pods" to read `select` alone: they see
# stopped pods too, and resume or stop them.
if __name__ != "podkit.pods":
    runpod = _pods()
