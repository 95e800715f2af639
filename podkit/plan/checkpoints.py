"""Which checkpoint will be served, read from metadata only: config, file sizes, safetensors headers.

A model is a hub repo id (optionally ``@revision``) or a directory holding
``config.json`` and ``*.safetensors`` (or a ``model.safetensors.index.json``).
From the hub this reads ``config.json``, the file list with sizes and the
safetensors headers (parameters per dtype, through Range requests), never the
weights. ``HF_TOKEN`` and ``HF_ENDPOINT`` are honoured (huggingface_hub reads
them); a gated or missing repo is an error that says what to do.
"""

from __future__ import annotations

import fnmatch
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podkit.plan.checkpointfiles import CONFIG, QUANT_CONFIG, support_files

FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E4M3FN", "F8_E8M0")


#: The config.json keys vLLM takes a model's context limit from (the smallest present wins).
POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


class ModelError(LookupError):
    """The model cannot be read; the message says why and what to do."""


@dataclass
class Checkpoint:
    repo: str  # repo id, or the directory
    revision: str | None  # the commit a hub revision resolved to
    config: dict[str, Any]
    files: dict[str, int]  # every file -> bytes
    params_by_dtype: dict[str, int] = field(default_factory=dict)
    quant_config: dict[str, Any] | None = None
    local: bool = False
    mistral_format: bool = False

    @property
    def quantization(self) -> str | None:
        q = self.quant_config or {}
        return q.get("quant_method") or q.get("quant_algo") or q.get("quantization", {}).get("quant_algo")

    @property
    def is_fp8(self) -> bool:
        """FP8 by its config, confirmed by the header dtypes when they are known."""
        q = self.quant_config or {}
        text = json.dumps(q).lower()
        declared = (
            q.get("quant_method") == "fp8"
            or "fp8" in str(q.get("quant_algo", "")).lower()
            or "fp8" in str((q.get("quantization") or {}).get("quant_algo", "")).lower()
            or (q.get("quant_method") == "compressed-tensors" and "float" in text and '"num_bits": 8' in text)
        )
        if not declared:
            return False
        if self.params_by_dtype:
            return any(dtype in FP8_DTYPES for dtype in self.params_by_dtype)
        return True

    @property
    def download(self) -> list[str]:
        return needed_files(self.files, mistral_format=self.mistral_format)

    @property
    def download_bytes(self) -> int:
        return sum(self.files[name] for name in self.download)

    @property
    def weight_bytes(self) -> int:
        return sum(self.files[name] for name in self.download if name.endswith(".safetensors"))


def max_positions(config: dict[str, Any]) -> int | None:
    """The longest context vLLM accepts for a model with ``config`` (its config.json), derived
    as vLLM derives it before it refuses a longer ``--max-model-len``: the smallest of the
    :data:`POSITION_KEYS` present (in ``text_config`` first for multimodal models), times the
    RoPE scaling factor unless the RoPE type already counts it (``llama3``, ``longrope``, ``su``;
    ``yarn`` scales its ``original_max_position_embeddings``). None when no key is present:
    vLLM then takes the length it is given."""
    c = {**config, **(config.get("text_config") or {})}
    found = [int(c[key]) for key in POSITION_KEYS if isinstance(c.get(key), (int, float)) and c[key] > 0]
    if not found:
        return None
    positions = min(found)
    rope = c.get("rope_scaling") or c.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("factor"), (int, float)):
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in ("su", "longrope", "llama3"):
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
                positions = rope["original_max_position_embeddings"]
            positions = int(positions * rope["factor"])
    return positions


def needed_files(files: dict[str, int], *, mistral_format: bool = False) -> list[str]:
    """The files vLLM needs: one copy of the weights (HF shards, or Mistral's consolidated
    file when served in Mistral format), config, tokenizer and chat template; never .bin,
    .pth, .gguf, ONNX or the other format's copy."""
    names = sorted(files)
    if mistral_format:
        weights = [n for n in names if fnmatch.fnmatch(n, "consolidated*.safetensors")]
    else:
        weights = [n for n in names if n.endswith(".safetensors") and "/" not in n and not n.startswith("consolidated")]
    support = support_files(names, "mistral" if mistral_format else "hf")
    if not weights:
        raise ModelError(
            "the checkpoint has no .safetensors weights podkit can serve (only safetensors are supported); "
            "point vllm_model at a checkpoint with .safetensors weights"
        )
    return sorted(set(weights + support))


def parse_spec(model: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``)."""
    repo, _, revision = model.partition("@")
    return repo, revision or None


def is_local(model: str) -> bool:
    """A path (absolute, relative with ./ or ../, or an existing folder) rather than a repo id."""
    return model.startswith(("/", "./", "../", "~")) or Path(model).is_dir()


def safetensors_dtypes(header: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for dim in info["shape"]:
            n *= int(dim)
        counts[info["dtype"]] = counts.get(info["dtype"], 0) + n
    return counts


def read_safetensors_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def _quant_config(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> dict[str, Any] | None:
    return config.get("quantization_config") or config.get("compression_config") or hf_quant


def from_directory(path: str | Path) -> Checkpoint:
    """A checkpoint in a local directory (on the controller)."""
    root = Path(path).expanduser()
    config_file = root / CONFIG
    if not config_file.is_file():
        raise ModelError(f"{root} has no config.json; point vllm_model at a checkpoint folder or a hub repo id")
    files = {p.name: p.stat().st_size for p in root.iterdir() if p.is_file()}
    config = json.loads(config_file.read_text())
    hf_quant = json.loads((root / QUANT_CONFIG).read_text()) if QUANT_CONFIG in files else None
    dtypes: dict[str, int] = {}
    for name in needed_files(files, mistral_format=False):
        if name.endswith(".safetensors"):
            for dtype, count in safetensors_dtypes(read_safetensors_header(root / name)).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + count
    return Checkpoint(str(root), None, config, files, dtypes, _quant_config(config, hf_quant), local=True)


def from_probe(path: str, data: dict[str, Any]) -> Checkpoint:
    """A checkpoint in a directory on the host, as podctl's probe read it."""
    if not data.get("config"):
        raise ModelError(f"{path} on the host has no readable config.json; check vllm_model")
    return Checkpoint(
        path,
        None,
        data["config"],
        data["files"],
        data.get("dtypes") or {},
        _quant_config(data["config"], data.get("hf_quant_config")),
        local=True,
    )


def from_hub(model: str, *, api=None, token: str | None = None) -> Checkpoint:
    """A hub checkpoint's metadata (no weights are downloaded)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, revision = parse_spec(model)
    api = api or HfApi(token=token or os.environ.get("HF_TOKEN") or None)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
        files = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
        config = json.loads(Path(api.hf_hub_download(repo, CONFIG, revision=info.sha)).read_text())
        hf_quant = None
        if QUANT_CONFIG in files:
            hf_quant = json.loads(Path(api.hf_hub_download(repo, QUANT_CONFIG, revision=info.sha)).read_text())
        try:
            params = dict(api.get_safetensors_metadata(repo, revision=info.sha).parameter_count)
        except Exception:  # not a safetensors repo, or headers unreadable: sizes still plan
            params = {}
    except HFValidationError:
        raise ModelError(f"{model!r} is neither a hub repo id (org/name[@revision]) nor an existing folder") from None
    except GatedRepoError:
        raise ModelError(
            f"{repo} is gated: accept its licence on the hub, then set HF_TOKEN to a token of that account"
        ) from None
    except RevisionNotFoundError:
        raise ModelError(f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise ModelError(f"{repo} does not exist on the hub (or is private: set HF_TOKEN); check vllm_model") from None
    except EntryNotFoundError:
        raise ModelError(f"{repo} has no config.json: it is not a transformers checkpoint vLLM can serve") from None
    except Exception as exc:  # network: the client raises its HTTP library's errors
        endpoint = getattr(api, "endpoint", None) or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        raise ModelError(
            f"cannot read {repo} from {endpoint} ({type(exc).__name__}: {exc}); check the network or HF_ENDPOINT"
        ) from None
    mistral = "params.json" in files and not any(
        n.endswith(".safetensors") and not n.startswith("consolidated") for n in files
    )
    return Checkpoint(repo, info.sha, config, files, params, _quant_config(config, hf_quant), mistral_format=mistral)


def fp8_candidates(repo: str) -> list[str]:
    """Where an FP8 sibling of ``org/Name`` usually lives (checked by its config, never by name)."""
    org, _, name = repo.partition("/")
    if name.upper().endswith("-FP8") or "fp8" in name.lower():
        return []
    return [
        f"{org}/{name}-FP8",
        f"RedHatAI/{name}-FP8-dynamic",
        f"RedHatAI/{name}-FP8",
        f"neuralmagic/{name}-FP8-dynamic",
        f"nvidia/{name}-FP8",
    ]


def find_fp8_alternative(checkpoint: Checkpoint, *, api=None) -> Checkpoint | None:
    """The first candidate sibling whose own config and headers say FP8."""
    if checkpoint.local or checkpoint.is_fp8:
        return None
    for candidate in fp8_candidates(checkpoint.repo):
        try:
            found = from_hub(candidate, api=api)
        except ModelError:
            continue
        if found.is_fp8 and _servable(found):
            return found
    return None


def _servable(checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint has weights podkit can serve (a sibling without them is passed over)."""
    try:
        return bool(checkpoint.download)
    except ModelError:
        return False
