"""The whole plan for one server: what it serves (the FP8 sibling when it helps), what it downloads
and whether that fits the volume, and the memory verdict of :mod:`podkit.plan.memory`; the
``podkit plan --json`` object and the deploy's preflight."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from podkit.plan.architecture import Architecture
from podkit.plan.gpus import Hardware
from podkit.plan.memory import GIB, Stage, plan_memory, suggestions

#: Kept free on the volume beyond the download itself.
DISK_HEADROOM_BYTES = 2 * GIB


@dataclass(frozen=True)
class ChosenCheckpoint:
    """The checkpoint a plan serves (the FP8 sibling when it was chosen)."""

    repo: str
    revision: str | None
    is_fp8: bool
    quantization: str | None
    local: bool


#: Only a plan for GPUs has these; a host without GPUs has no VRAM overheads, and its dict leaves them out.
_GPU_ONLY = ("activation_gib", "non_torch_gib", "cuda_graph_gib", "max_num_seqs", "warmup_gib", "warmup_room_gib")


@dataclass(frozen=True)
class Plan:
    """The whole plan for one server: what it serves and downloads, and whether that fits.

    On a host without GPUs the memory fields are None (the CPU build serves from host
    memory). :meth:`as_dict` is the ``plan --json`` object.
    """

    vllm_version: str
    checkpoint: ChosenCheckpoint
    fp8_alternative: str | None  # its repo
    hardware: Hardware | None
    download_bytes: int
    download_files: tuple[str, ...]
    missing_bytes: int  # what the hub cache does not hold yet
    disk_free_bytes: int | None
    disk_fits: bool | None  # None: the free space is unknown
    tool_call_parser: str | None
    reasoning_parser: str | None
    family: str | None
    chat_template: str | None
    weights_gib_per_gpu: float | None
    kv_bytes_per_token: int | None
    activation_gib: float | None
    non_torch_gib: float | None
    cuda_graph_gib: float | None
    available_kv_cache_gib: float | None
    kv_cache_tokens: int | None
    max_model_len: int | str | None
    max_concurrency: float | None
    max_model_len_fit: int | None
    fits: bool
    reason: str
    suggestions: tuple[str, ...]
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    stages: tuple[Stage, ...] = ()  # per pipeline stage (the KV pool is the smallest's)
    max_num_seqs: int | None = None
    warmup_gib: float | None = None  # needed outside the budget after KV sizing
    warmup_room_gib: float | None = None  # left there

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data: nested dicts, lists; no overheads on a host without GPUs."""
        out = asdict(self)
        out["download_files"], out["suggestions"] = list(self.download_files), list(self.suggestions)
        out["stages"] = list(out["stages"])
        if self.activation_gib is None:
            for key in _GPU_ONLY:
                del out[key]
        return out


def make_plan(
    checkpoint,
    hardware: Hardware | None,
    *,
    fp8_alternative=None,
    prefer_fp8: bool = True,
    tensor_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | str = "auto",
    kv_cache_dtype: str = "auto",
    runtime_fp8: bool = False,
    disk_free_bytes: int | None = None,
    cached_bytes: int | dict[str, int] = 0,
    family=None,
    vllm_version: str = "0.33.0",
    pipeline_parallel_size: int = 1,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> Plan:
    """The whole plan (the ``cli.py plan --json`` object and the deploy's preflight)."""
    chosen = checkpoint
    if fp8_alternative is not None and prefer_fp8 and hardware and hardware.fp8_supported and not checkpoint.is_fp8:
        chosen = fp8_alternative
    memory = None
    if hardware is not None and hardware.gpu_count > 0:
        arch = Architecture.from_config(chosen.config)

        def replan(use_fp8_checkpoint=False, **changes):
            ckpt = fp8_alternative if use_fp8_checkpoint and fp8_alternative else chosen
            args = dict(
                weight_bytes=ckpt.weight_bytes,
                gpu_memory_gib=hardware.gpu_memory_gib,
                gpu_count=hardware.gpu_count,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                kv_cache_dtype=kv_cache_dtype,
                runtime_fp8=runtime_fp8,
                vllm_version=vllm_version,
                pipeline_parallel_size=pipeline_parallel_size,
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
            )
            args.update(changes)
            return plan_memory(arch, **args)

        memory = replan()
        own_fixes = bool(memory.suggestions)  # a start or warm-up refusal: less weight memory would not help
        memory.suggestions = suggestions(
            arch,
            memory,
            replan,
            gpu_count=hardware.gpu_count,
            kv_cache_dtype=kv_cache_dtype,
            fp8_alternative=None if chosen is fp8_alternative else (fp8_alternative.repo if fp8_alternative else None),
            fp8_supported=hardware.fp8_supported,
        )
        if (
            runtime_fp8 is False
            and not chosen.is_fp8
            and fp8_alternative is None
            and not memory.fits
            and not own_fixes
            and hardware.fp8_supported
        ):
            memory.suggestions.append(
                "no FP8 checkpoint was found; vllm_extra_args ['--quantization', 'fp8'] quantizes at load "
                "(halves weight memory, not the download)"
            )
    download = chosen.download_bytes
    cached = cached_bytes.get(chosen.repo, 0) if isinstance(cached_bytes, dict) else cached_bytes
    missing = 0 if chosen.local else max(0, download - cached)
    disk_fits = None if disk_free_bytes is None else missing + DISK_HEADROOM_BYTES <= disk_free_bytes
    if memory is not None and hardware is not None:  # a memory plan is made for GPUs only
        verdict = dict(
            memory.as_dict(),
            stages=tuple(memory.stages),
            tensor_parallel_size=tensor_parallel_size or max(1, hardware.gpu_count // pipeline_parallel_size),
        )
    else:
        verdict = dict.fromkeys(
            (
                "weights_gib_per_gpu",
                "kv_bytes_per_token",
                *_GPU_ONLY,
                "available_kv_cache_gib",
                "kv_cache_tokens",
                "max_concurrency",
                "max_model_len_fit",
            )
        )
        verdict.update(
            fits=True,
            reason="no GPU: the CPU build serves from host memory (no VRAM plan)",
            suggestions=[],
            max_model_len=None if max_model_len == "auto" else max_model_len,
            tensor_parallel_size=1,
            pipeline_parallel_size=pipeline_parallel_size,
        )
    if disk_fits is False and disk_free_bytes is not None:  # no free space known: no verdict
        need = (missing + DISK_HEADROOM_BYTES) / 1e9
        fix = []
        if fp8_alternative is not None and chosen is not fp8_alternative:
            fix.append(f"use the FP8 checkpoint {fp8_alternative.repo} ({fp8_alternative.download_bytes / 1e9:.1f} GB)")
        fix += [f"grow the volume to at least {need:.0f} GB free", "remove other cached models (podkit cache clean)"]
        verdict.update(
            fits=False,
            suggestions=fix + verdict["suggestions"],
            reason=f"{chosen.repo} needs {missing / 1e9:.1f} GB to download (+{DISK_HEADROOM_BYTES / 1e9:.1f} GB "
            f"headroom) but the volume has {disk_free_bytes / 1e9:.1f} GB free",
        )
    verdict["suggestions"] = tuple(verdict["suggestions"])
    return Plan(
        vllm_version=vllm_version,
        checkpoint=ChosenCheckpoint(chosen.repo, chosen.revision, chosen.is_fp8, chosen.quantization, chosen.local),
        fp8_alternative=fp8_alternative.repo if fp8_alternative is not None else None,
        hardware=hardware,
        download_bytes=download,
        download_files=tuple(chosen.download),
        missing_bytes=missing,
        disk_free_bytes=disk_free_bytes,
        disk_fits=disk_fits,
        tool_call_parser=family[1].tool_call_parser if family else None,
        reasoning_parser=family[1].reasoning_parser if family else None,
        family=family[0] if family else None,
        chat_template=family[1].chat_template if family else None,
        **verdict,
    )
