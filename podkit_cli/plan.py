"""``podkit plan``: will a model and its context fit, before anything is downloaded?"""

from __future__ import annotations

import re
import sys

import click

from podkit.settings import FLAGS

from .output import Finite, dumps


def _max_model_len(ctx, param, value):
    if value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter("a token count or 'auto'") from None
    if number < 16:
        raise click.BadParameter("at least 16 tokens")
    return number


def _version(ctx, param, value):
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-][A-Za-z0-9.]+)?", value):
        raise click.BadParameter("a vLLM version such as 0.33.0")
    return value


@click.command()
@click.argument("model")
@click.option("--gpu", "gpu_name", help="Card by name: H100, H200, A100 80GB, L40S, L4, A6000, RTX 4090 ...")
@click.option(
    "--gpu-memory-gib",
    type=Finite(min=1, max=100_000),
    help="Total memory per GPU as torch reports it (H100 80GB: 79.19).",
)
@click.option("--gpus", "gpu_count", type=click.IntRange(min=1), default=1, show_default=True)
# the options that are vLLM's flags take their names from the settings' declarations
@click.option(FLAGS["tensor_parallel_size"], type=click.IntRange(min=1), help="Default: every GPU (over the stages).")
@click.option(
    FLAGS["pipeline_parallel_size"],
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Pipeline stages: each holds its share of the layers; the KV pool is the smallest stage's.",
)
@click.option(FLAGS["gpu_memory_utilization"], type=Finite(0.05, 1.0), default=0.9, show_default=True)
@click.option(
    FLAGS["max_model_len"], default="auto", callback=_max_model_len, show_default=True, help="Tokens, or auto."
)
@click.option(FLAGS["kv_cache_dtype"], type=click.Choice(["auto", "fp8"]), default="auto", show_default=True)
@click.option("--quantization", type=click.Choice(["fp8"]), help="Runtime FP8 quantization of a BF16 checkpoint.")
@click.option("--disk-free-gib", type=Finite(min=0), help="Free space on the volume, to check the download.")
@click.option("--no-fp8-search", is_flag=True, help="Do not look for an FP8 sibling checkpoint.")
@click.option(
    "--vllm-version",
    default="0.33.0",
    show_default=True,
    callback=_version,
    help="The vLLM the host runs: its overheads and parsers differ by version (the deploy uses the host's).",
)
@click.option(
    "--measure",
    "inventory",
    metavar="INVENTORY",
    help="Measure on the inventory's hosts instead: vLLM started with random weights (--load-format dummy) "
    "and the host's flags, from the config and tokenizer alone.",
)
@click.option("--host", "host_names", multiple=True, help="With --measure: only this host (repeatable).")
@click.option(
    "--stop-server",
    is_flag=True,
    help="With --measure on GPUs: stop the host's own server for the measurement, then start it again.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
def plan(
    model,
    gpu_name,
    gpu_memory_gib,
    gpu_count,
    tensor_parallel_size,
    pipeline_parallel_size,
    gpu_memory_utilization,
    max_model_len,
    kv_cache_dtype,
    quantization,
    disk_free_gib,
    no_fp8_search,
    vllm_version,
    inventory,
    host_names,
    stop_server,
    as_json,
):
    """Will MODEL and its context fit, before anything is downloaded?

    MODEL is a hub repo id (optionally @revision) or a local checkpoint folder.
    Reads only metadata (config, file sizes, safetensors headers). Exit 0 when
    it fits, 1 when it does not (the plan is still printed), 2 for bad input.

    \b
    podkit plan Qwen/Qwen3-Coder-30B-A3B-Instruct --gpu H100 --max-model-len 65536
    podkit plan meta-llama/Llama-3.1-8B-Instruct --gpu L4 --disk-free-gib 20 --json
    podkit plan deepseek-ai/DeepSeek-V2-Lite --gpu L4 --gpus 4 --tensor-parallel-size 2 --pipeline-parallel-size 2

    With --measure INVENTORY the host answers instead: its own vLLM starts once with the
    flags the deploy would serve MODEL with (the inventory's data; --max-model-len overrides
    the context) and random weights, after fetching only the config and tokenizer into a
    scratch folder on the volume, under the deploy lock; it reports measured against
    predicted (with --json it also keeps the start as a reference case in
    .podkit/calibration/). Exit 0 when vLLM started, 1 when it did not (its reason shown).

    \b
    podkit plan --measure inventories/mine.py --host gpu-box Qwen/Qwen3-8B --max-model-len 32768
    """
    if inventory:
        from podkit_cli.measure import run_measure

        if gpu_name or gpu_memory_gib:
            raise click.BadParameter("--measure reads the host's own GPUs: leave out --gpu and --gpu-memory-gib")

        source = click.get_current_context().get_parameter_source("max_model_len")
        given = source is not None and source.name != "DEFAULT"
        overrides = {"vllm_max_model_len": max_model_len} if given else {}
        run_measure(inventory, host_names, model, overrides, stop_server, as_json)
    if host_names or stop_server:
        raise click.BadParameter("--host and --stop-server go with --measure INVENTORY")
    from podkit.plan.checkpoints import ModelError, find_fp8_alternative, from_directory, from_hub, is_local
    from podkit.plan.families import UnknownFamily, family_for
    from podkit.plan.memory import GIB, Hardware, PlanError, gpu_by_name
    from podkit.plan.serverplan import make_plan

    if bool(gpu_name) == bool(gpu_memory_gib):
        raise click.BadParameter("give exactly one of --gpu NAME or --gpu-memory-gib GIB")
    try:
        if gpu_name:
            card, memory, capability = gpu_by_name(gpu_name)
        else:
            card, memory, capability = None, gpu_memory_gib, None
        checkpoint = from_directory(model) if is_local(model) else from_hub(model)
    except PlanError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpu") from None
    except ModelError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL") from None
    fp8 = None if no_fp8_search else find_fp8_alternative(checkpoint)
    try:
        family = family_for(checkpoint.repo, checkpoint.config)
        family_error = None
    except UnknownFamily as exc:
        family, family_error = None, str(exc)
    try:
        result = make_plan(
            checkpoint,
            Hardware(card, memory, gpu_count, capability),
            fp8_alternative=fp8,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            kv_cache_dtype=kv_cache_dtype,
            runtime_fp8=quantization == "fp8",
            disk_free_bytes=int(disk_free_gib * GIB) if disk_free_gib is not None else None,
            family=family,
            vllm_version=vllm_version,
            pipeline_parallel_size=pipeline_parallel_size,
        )
    except PlanError as exc:
        raise click.BadParameter(str(exc)) from None
    except (ModelError, KeyError) as exc:  # no safetensors, or a config without the sizes the plan reads
        detail = f"config.json lacks {exc}" if isinstance(exc, KeyError) else str(exc)
        raise click.BadParameter(detail, param_hint="MODEL") from None
    if as_json:
        click.echo(dumps({**result.as_dict(), "family_error": family_error}))
    else:
        _print_plan(result, family_error)
    sys.exit(0 if result.fits else 1)


def _print_plan(p, family_error: str | None) -> None:
    ck = p.checkpoint
    rows = [
        ("checkpoint", f"{ck.repo}{'@' + ck.revision[:12] if ck.revision else ''}{' (FP8)' if ck.is_fp8 else ''}"),
        ("FP8 alternative", p.fp8_alternative or "none found"),
        ("download", f"{p.download_bytes / 1e9:.1f} GB in {len(p.download_files)} files"),
        ("weights per GPU", f"{p.weights_gib_per_gpu} GiB" if p.weights_gib_per_gpu is not None else "-"),
        ("KV bytes per token", p.kv_bytes_per_token),
        ("KV cache", f"{p.available_kv_cache_gib} GiB = {p.kv_cache_tokens} tokens"),
        ("max model len", f"{p.max_model_len} (longest that fits: {p.max_model_len_fit})"),
        ("max concurrency", p.max_concurrency),
        ("tensor parallel", p.tensor_parallel_size),
        ("pipeline parallel", p.pipeline_parallel_size),
        ("tool-call parser", p.tool_call_parser or family_error or "-"),
        ("reasoning parser", p.reasoning_parser or "-"),
        ("vLLM", p.vllm_version),
    ]
    for label, value in rows:
        click.echo(f"{label:<20} {value}")
    for stage in p.stages:
        click.echo(
            f"  stage {stage.stage}: {stage.layers} layers, {stage.weights_gib} GiB of weights per GPU, "
            f"KV cache {stage.available_kv_cache_gib} GiB = {stage.kv_cache_tokens} tokens"
        )
    if p.stages:
        smallest = min(p.stages, key=lambda stage: stage.kv_cache_tokens)
        click.echo(f"  KV cache tokens: {p.kv_cache_tokens}, the minimum over the stages (stage {smallest.stage})")
    verdict = click.style("FITS", fg="green") if p.fits else click.style("DOES NOT FIT", fg="red")
    click.echo(f"\n{verdict}: {p.reason}")
    for suggestion in p.suggestions:
        click.echo(f"  - {suggestion}")
    from podkit.host.hostplan import context_note

    if note := context_note(p.max_model_len):
        click.echo(note, err=True)
