"""``podkit up --move``: a pod whose GPU is gone moves to a new pod on the same network volume.

A stopped RunPod pod keeps its machine, not its GPU: when another user rents the GPU meanwhile,
RunPod refuses the start (400, "not enough free GPUs on the host machine") or the pod comes back
without it, and RunPod's answer is a new pod. The move, one pod at a time:

1. refuse, before anything is created, a pod whose volume is its own disk (it cannot leave its
   machine) and a GPU type that is not in stock in the volume's data center (unless ``--any-gpu``:
   then the cheapest type in stock there on which the plan says the model and its context fit);
2. stop the old pod if it runs without its GPU (two servers must not share one volume);
3. create the new pod: the old one's name, image, arguments, disk, ports and env, the same network
   volume in the same data center, and the GPU chosen;
4. wait for its SSH address, apply the deploy to it (nothing is installed or downloaded: it is all on
   the volume) and verify it;
5. only then terminate the old pod. A move that fails anywhere leaves the old pod as it was (stopped)
   and says what exists now.
"""

from __future__ import annotations

import click

from podkit.runpod import control
from podkit.runpod.api import RunPodApi, RunPodError
from podkit.runpod.catalog import offers
from podkit.runpod.newpod import cannot_move, move_request
from podkit.runpod.pods import Pod, selected

from .pods import account, catalog_reader, deploy_and_verify, planner, pod_selection, pod_settings, say


def move_pods(
    inventory: str, lost: dict[str, Pod], wait: float, any_gpu: bool, started: float
) -> tuple[list[str], set[str], list[str]]:
    """Move each pod of ``lost`` (host name -> pod). Returns the host names of the pods that serve
    now, the old host names whose problem the move settled, and one line per move that failed."""
    api = account()
    select = pod_selection(inventory)
    moved: list[str] = []
    settled: set[str] = set()
    failed: list[str] = []
    for name, pod in lost.items():
        try:
            moved.append(move_one(api, inventory, select, name, pod, wait, any_gpu, started))
            settled.add(name)
        except (click.ClickException, control.PodsError) as exc:
            failed.append(exc.format_message() if isinstance(exc, click.ClickException) else str(exc))
    return moved, settled, failed


def choose_gpu(api: RunPodApi, inventory: str, name: str, pod: Pod, any_gpu: bool) -> tuple[str, int, str]:
    """The GPU type and count for the new pod, and why: the old pod's when it is in stock in the
    volume's data center, else (``any_gpu``) the cheapest there that the plan says fits."""
    cloud = pod.cloud or "SECURE"
    catalog = catalog_reader(api, cloud, f"pod {name}: ")

    same: dict = next((g for g in catalog(pod.gpu_count or 1) if g.get("id") == pod.gpu_id), {})
    stock = {dc.get("id"): dc.get("availability") for dc in same.get("dataCenters") or [] if isinstance(dc, dict)}
    if stock.get(pod.data_center, "NONE") != "NONE" and pod.gpu_id:
        return pod.gpu_id, pod.gpu_count or 1, f"the same GPU ({pod.gpu_id} x{pod.gpu_count or 1})"
    if not any_gpu:
        raise control.PodsError(
            f"pod {name} ({pod.id}): no {pod.gpu_id} x{pod.gpu_count or 1} is free in {pod.data_center} now "
            f"(RunPod's catalog), where its volume is: run podkit up {inventory} --host {name} --move again later, "
            "or add --any-gpu to take any GPU type there that the plan says fits"
        )
    settings = pod_settings(inventory, name)
    ranked = [o for o in offers(catalog, planner(settings), cloud, data_center=pod.data_center) if o.in_stock]
    if not ranked:
        raise control.PodsError(
            f"pod {name} ({pod.id}): no GPU type on which {settings.model} fits with its context "
            f"({settings.max_model_len}) is free in {pod.data_center} now: run the move again later"
        )
    best = ranked[0]
    price = f", ${best.usd_per_hour:g}/h" if best.usd_per_hour is not None else ""
    return best.gpu_id, best.count, f"{best.name} x{best.count}{price}: the cheapest free there that the plan fits"


def move_one(
    api: RunPodApi, inventory: str, select, name: str, pod: Pod, wait: float, any_gpu: bool, started: float
) -> str:
    """Move one pod (see the module); returns the host name the new pod serves as."""
    why = cannot_move(pod, name)
    if why:
        raise control.PodsError(why)
    gpu_id, count, chosen = choose_gpu(api, inventory, name, pod, any_gpu)
    if pod.running:
        say(f"{name}: stopping pod {pod.id} first: it runs without its GPU, and the new pod mounts its volume")
        control.stop(api, pod, name)
    try:
        new = Pod.of(api.create_pod(move_request(pod, gpu_id, count)))
    except RunPodError as exc:
        raise control.PodsError(
            control.line(f"pod {name}: RunPod did not create its new pod (nothing was)", exc)
        ) from None
    keep = f"the old pod {pod.id} is kept (stopped) with the volume"
    say(
        f"{name}: moving to new pod {new.id} on volume {pod.network_volume} in {pod.data_center}, {chosen}; "
        f"{keep} until the new one verifies"
    )
    try:
        control.wait_for_ssh(api, new.id, name, wait, say=say)
    except control.PodsError as exc:
        raise control.PodsError(f"{exc}; {keep}: terminate pod {new.id} or run the move again") from None
    host = next((host for host, found in selected(control.list_pods(api), select) if found.id == new.id), None)
    if host is None:
        raise control.PodsError(f"pod {name}: the inventory does not select the new pod {new.id}; {keep}")
    failed = deploy_and_verify(inventory, host, started)
    if failed:
        raise control.PodsError(
            f"pod {name}: the new pod {new.id} {failed}; {keep}: fix what failed and run podkit up {inventory} "
            f"--host {host}, then terminate pod {pod.id} in RunPod's console"
        )
    control.terminate(api, pod.id, name)
    say(f"{name}: moved to pod {new.id}, which serves and verifies; the old pod {pod.id} is terminated")
    now = next((host for host, found in selected(control.list_pods(api), select) if found.id == new.id), host)
    return now
