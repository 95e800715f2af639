"""``podkit create``: a RunPod pod made from the plan, deployed and verified, in one command.

Where people fail when they size a pod by hand (a volume sized for the quantized weights, not the
download; a model that fits but leaves no context) the plan decides: the GPU types in RunPod's
catalog on which the model and the context fit, the cheapest in stock first; a network volume sized
from the real download; then the pod, its deploy and ``podkit verify``. ``--dry`` prints the choice
and creates nothing.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import click

from podkit.runpod import control
from podkit.runpod.api import RunPodError
from podkit.runpod.catalog import Offer, offers, volume_gb, volume_usd_per_month
from podkit.runpod.newpod import IMAGE, create_request
from podkit.runpod.pods import Pod, selected
from podkit.settings import default_served_name

from .output import emit
from .pods import account, catalog_reader, deploy_and_verify, planner, pod_selection, pod_settings, say


def _name(model: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", default_served_name(model).lower()).strip("-")[:40] or "coder"


@click.command()
@click.argument("inventory")
@click.argument("model")
@click.option("--context", type=click.IntRange(min=256), required=True, help="Tokens of context each request may use.")
@click.option("--name", help="The pod's name (default: from the model); the inventory must select it.")
@click.option("--gpu", "gpu_wanted", help="Only this GPU type (its catalog id or name, e.g. 'H100 SXM').")
@click.option("--cloud", type=click.Choice(["SECURE", "COMMUNITY"]), default="SECURE", show_default=True)
@click.option("--volume", "volume_id", help="An existing network volume to use (its data center decides the pod's).")
@click.option("--ssh-key", type=click.Path(exists=True, dir_okay=False), help="A public key to register if missing.")
@click.option("--image", default=IMAGE, show_default=True, help="The container image (it must start sshd).")
@click.option("--wait", default=900, show_default=True, help="Seconds to wait for the new pod's SSH address.")
@click.option(
    "--dry", is_flag=True, help="Print the choice (GPU, $/h, volume and its cost, context) and create nothing."
)
@click.option("--json", "as_json", is_flag=True, help="Print the choice (and what was created) as JSON.")
def create(inventory, model, context, name, gpu_wanted, cloud, volume_id, ssh_key, image, wait, dry, as_json):
    """Create a RunPod pod for MODEL and its --context, from the plan, then deploy and verify it.

    Asks RunPod's catalog for every GPU type with its price and stock, keeps those on which the plan
    says MODEL fits with that context (the fewest GPUs each needs), and takes the cheapest in stock;
    sizes a network volume from the real download (the checkpoint the deploy fetches) plus vLLM's
    venv and caches; creates the volume and the pod (22/tcp and the edge's port exposed, SSH with
    the account's keys, the model and context in its env PODKIT_DATA); then applies the deploy to it
    and runs podkit verify. The pod's settings are the inventory's group data with those two.

    \b
    Exit codes: 0 created and verified (or, with --dry, a choice was found), 1 nothing fits or is
    in stock, or a step failed (what was created is said), 2 bad input.

    \b
    podkit create inventories/runpod.py Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 --context 65536 --dry
    podkit create inventories/runpod.py Qwen/Qwen3-8B --context 32768 --name coder-1
    """
    started = time.time()
    name = name or _name(model)
    select = pod_selection(inventory)
    if select is None:
        raise click.BadParameter(f"{inventory} lists no RunPod pods (it defines no select())", param_hint="INVENTORY")
    if not select({"name": name}):
        raise click.BadParameter(f"the inventory does not select a pod named {name}: give a --name it selects")
    data = {"vllm_model": model, "vllm_max_model_len": context}
    settings = pod_settings(inventory, name, new=True, overrides=data)
    api = account()
    if any(pod.name == name for _, pod in selected(control.list_pods(api), lambda _: True)):
        raise click.BadParameter(f"a pod named {name} exists already: give another --name", param_hint="--name")
    volume = _volume(api, volume_id)
    chosen = _choose(api, settings, cloud, gpu_wanted, volume["dataCenter"] if volume else None)
    data_center = volume["dataCenter"] if volume else chosen.data_centers[0][0]
    size = volume["size"] if volume else volume_gb(chosen.plan.download_bytes)
    choice = {
        **chosen.as_dict(),
        "cloud": cloud,
        "data_center": data_center,
        "volume_gb": size,
        "volume_usd_per_month": volume_usd_per_month(size),
        "volume_id": volume["id"] if volume else None,
        "name": name,
    }
    if volume and volume["size"] < volume_gb(chosen.plan.download_bytes):
        raise click.ClickException(
            f"network volume {volume['id']} has {volume['size']} GB; {model} needs "
            f"{volume_gb(chosen.plan.download_bytes)} GB (its download, vLLM and the caches): grow it in RunPod's "
            "console, or leave out --volume"
        )
    if dry:
        _print(choice, as_json)
        return
    _ssh_keys(api, ssh_key)
    if volume is None:
        try:
            volume = api.create_network_volume(f"podkit-{name}", size, data_center)
        except RunPodError as exc:
            raise click.ClickException(
                control.line("RunPod did not create the network volume (nothing was)", exc)
            ) from None
        say(f"{name}: network volume {volume['id']} ({size} GB, about ${choice['volume_usd_per_month']:g} a month)")
    body = create_request(
        name,
        chosen.gpu_id,
        chosen.count,
        cloud,
        data_center,
        volume["id"],
        settings.edge_port,
        data,
        image,
        settings.volume,
    )
    kept = (
        f"network volume {volume['id']} stays (it bills until deleted; podkit create --volume {volume['id']} uses it)"
    )
    try:
        pod = Pod.of(api.create_pod(body))
    except RunPodError as exc:
        raise click.ClickException(control.line(f"RunPod did not create pod {name}; {kept}", exc)) from None
    say(f"{name}: pod {pod.id}: {chosen.name} x{chosen.count} in {data_center}, ${chosen.usd_per_hour}/h")
    try:
        control.wait_for_ssh(api, pod.id, name, wait, say=say)
    except control.PodsError as exc:
        raise click.ClickException(f"{exc}; pod {pod.id} and {kept}") from None
    failed = deploy_and_verify(inventory, name, started)
    if failed:
        raise click.ClickException(
            f"pod {name} ({pod.id}) {failed}: fix it and run podkit up {inventory} --host {name}"
        )
    choice.update(pod_id=pod.id, volume_id=volume["id"], seconds=round(time.time() - started, 1))
    _print(choice, as_json)
    say(f"{name}: serves and verifies after {choice['seconds']:g} s: podkit client {inventory} --host {name}")


def _volume(api, volume_id: str | None) -> dict | None:
    if not volume_id:
        return None
    try:
        return api.network_volume(volume_id)
    except RunPodError as exc:
        raise click.BadParameter(control.line(f"network volume {volume_id}", exc), param_hint="--volume") from None


def _choose(api, settings, cloud: str, gpu_wanted: str | None, data_center: str | None) -> Offer:
    catalog = catalog_reader(api, cloud)

    only = None
    if gpu_wanted:
        wanted = gpu_wanted.lower()
        match = [g for g in catalog(1) if wanted in (str(g.get("id")).lower(), str(g.get("name")).lower())]
        if not match:
            known = ", ".join(sorted(str(g.get("name")) for g in catalog(1)))
            raise click.BadParameter(f"no GPU type {gpu_wanted!r} in RunPod's catalog; it has: {known}")
        only = match[0]["id"]
    fitting = offers(catalog, planner(settings), cloud, data_center=data_center, only=only)
    where = f" in {data_center}" if data_center else ""
    if not fitting:
        raise click.ClickException(
            f"{settings.model} does not fit with {settings.max_model_len} tokens of context on "
            f"{'that GPU type' if only else 'any GPU type RunPod lists'} (up to 8 GPUs): ask for less context, "
            "or a quantized (FP8) checkpoint"
        )
    if not fitting[0].in_stock:
        cheapest = fitting[0]
        raise click.ClickException(
            f"no GPU type that fits {settings.model} with {settings.max_model_len} tokens is in stock{where} now "
            f"(the cheapest that fits: {cheapest.name} x{cheapest.count}): try again later, or --cloud COMMUNITY"
        )
    return fitting[0]


def _ssh_keys(api, ssh_key: str | None) -> None:
    """The account's SSH keys reach a pod created with startSsh: register ``ssh_key`` when missing;
    with none at all, nothing could log in, so say how before anything is created."""
    try:
        keys = api.ssh_keys()
        if ssh_key:
            public = Path(ssh_key).read_text().strip()
            if not re.fullmatch(r"(ssh|ecdsa|sk)-\S+ \S+( [^\n\r]*)?", public):
                raise click.BadParameter(
                    f"{ssh_key} is not an SSH public key (ssh-ed25519 AAAA...)", param_hint="--ssh-key"
                )
            if public.split()[:2] not in [key.split()[:2] for key in keys]:
                keys = api.set_ssh_keys([*keys, public])
                say(f"registered {ssh_key} with your RunPod account (pods created from now on accept it)")
    except RunPodError as exc:
        raise click.ClickException(control.line("cannot read your RunPod account's SSH keys", exc)) from None
    if not keys:
        raise click.ClickException(
            "your RunPod account has no SSH public key, so no new pod would let podkit in: add one with "
            "--ssh-key ~/.ssh/id_ed25519.pub (or under Settings > SSH Public Keys); nothing was created"
        )


def _print(choice: dict, as_json: bool) -> None:
    emit(choice, as_json, _human)


def _human(choice: dict) -> None:
    price = f"${choice['usd_per_hour']:g}/h" if choice.get("usd_per_hour") is not None else "price unknown"
    rows = [
        ("GPU", f"{choice['gpu']} x{choice['count']} ({choice['gpu_id']}, {choice['cloud']}), {price}"),
        ("data center", f"{choice['data_center']} (stock: {choice['availability']})"),
        ("volume", f"{choice['volume_gb']} GB network volume, about ${choice['volume_usd_per_month']:g} a month"),
        ("checkpoint", f"{choice['checkpoint']} ({choice['download_bytes'] / 1e9:.1f} GB to download)"),
        ("context", f"{choice['context']} tokens, about {choice['max_concurrency']} such requests at once"),
    ]
    rows += [("pod", choice["pod_id"])] if choice.get("pod_id") else []
    for label, value in rows:
        click.echo(f"{label:<12} {value}")
