"""Which checkpoint will be served, read from metadata only: config, file sizes, safetensors headers.

A model is a hub repo id (optionally ``@revision``) or a directory holding
``config.json`` and ``*.safetensors`` (or a ``model.safetensors.index.json``).
From the hub this reads ``config.json``, the file list with sizes and the
safetensors headers (parameters per dtype, through Range requests), never the
weights. ``HF_TOKEN`` and ``HF_ENDPOINT`` are honoured (huggingface_hub reads
them); a gated or missing repo is an error that says what to do.

Every file is read through :mod:`podkit.plan.modelfiles`, which checks each number and type the
plan reads (a hub repo is anyone's to publish), so a hostile one is a :class:`ModelError` line.
"""

from __future__ import annotations

import fnmatch
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podkit.plan import modelfiles
from podkit.plan.checkpointfiles import CONFIG, QUANT_CONFIG, support_files
from podkit.plan.modelfiles import ModelError
from podkit.text import clean

FP8_DTYPES = ("F8_E4M3", "F8_E5M2", "F8_E4M3FN", "F8_E8M0")
#: The files beside config.json that podkit reads (each checked by :mod:`podkit.plan.modelfiles`).
QUANT_FILE, GENERATION_FILE, INDEX_FILE = QUANT_CONFIG, "generation_config.json", "model.safetensors.index.json"


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
        return q.get("quant_method") or q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo")

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
    """Parameters per dtype in one safetensors header (checked: :func:`modelfiles.header`)."""
    return modelfiles.header("a checkpoint", "a safetensors file", header)


#: The largest safetensors header read (the format's own reader refuses past 100 MB).
MAX_HEADER_BYTES = 100_000_000


def read_safetensors_header(path: Path, model: str = "") -> dict[str, Any]:
    """The JSON header of a local safetensors file, read within its bounds; ModelError otherwise."""
    model = model or str(path.parent)
    with open(path, "rb") as handle:
        raw = handle.read(8)
        length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if not 0 < length <= MAX_HEADER_BYTES:
            raise modelfiles.refuse(
                model, path.name, "header length", length, f"from 1 to {MAX_HEADER_BYTES} bytes (8 bytes first)"
            )
        data = handle.read(length)
    if len(data) != length:
        raise modelfiles.refuse(model, path.name, "header length", length, f"within the file ({len(data) + 8} bytes)")
    return modelfiles.an_object(model, path.name, modelfiles.load_json(model, path.name, data), "header")


def _quant_config(config: dict[str, Any], hf_quant: dict[str, Any] | None) -> dict[str, Any] | None:
    return config.get("quantization_config") or config.get("compression_config") or hf_quant


def _read(root: Path, name: str) -> Any:
    """File ``name`` of the folder ``root``, as strict JSON (:func:`modelfiles.load_json`)."""
    try:
        if (root / name).stat().st_size > modelfiles.MAX_JSON_BYTES:
            raise ModelError(f"{root}: {name} is past {modelfiles.MAX_JSON_BYTES} bytes: {modelfiles.FIX}")
        raw = (root / name).read_bytes()
    except OSError as exc:
        raise ModelError(f"{root}: cannot read {name} ({exc.strerror or exc}); check vllm_model") from None
    return modelfiles.load_json(str(root), name, raw)


def from_directory(path: str | Path) -> Checkpoint:
    """A checkpoint in a local directory (on the controller), every file podkit reads checked."""
    root = Path(path).expanduser()
    config_file = root / CONFIG
    if not config_file.is_file():
        raise ModelError(f"{root} has no config.json; point vllm_model at a checkpoint folder or a hub repo id")
    model = str(root)
    files = modelfiles.file_sizes(model, {p.name: p.stat().st_size for p in root.iterdir() if p.is_file()})
    config = modelfiles.config(model, _read(root, CONFIG))
    hf_quant = modelfiles.quant(model, _read(root, QUANT_FILE)) if QUANT_FILE in files else None
    if GENERATION_FILE in files:
        modelfiles.generation(model, _read(root, GENERATION_FILE))
    if INDEX_FILE in files:
        modelfiles.index(model, _read(root, INDEX_FILE), files)
    dtypes: dict[str, int] = {}
    for name in needed_files(files, mistral_format=False):
        if name.endswith(".safetensors"):
            header = read_safetensors_header(root / name, model)
            for dtype, count in modelfiles.header(model, name, header).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + count
    return Checkpoint(model, None, config, files, dtypes, _quant_config(config, hf_quant), local=True)


def from_probe(path: str, data: dict[str, Any]) -> Checkpoint:
    """A checkpoint in a directory on the host, as podctl's probe read it (each file checked here:
    podctl only reads them, and says which it could not)."""
    data = data if isinstance(data, dict) else {}
    unread = data.get("errors")
    for name, why in sorted(unread.items() if isinstance(unread, dict) else []):
        raise ModelError(f"{path} on the host: {name} {clean(why)[:200]}: {modelfiles.FIX}")
    if not data.get("config"):
        raise ModelError(f"{path} on the host has no readable config.json; check vllm_model")
    files = modelfiles.file_sizes(path, data.get("files") or {})
    config = modelfiles.config(path, data["config"])
    hf_quant = data.get("hf_quant_config")
    if hf_quant is not None:
        hf_quant = modelfiles.quant(path, hf_quant)
    if data.get("generation_config") is not None:
        modelfiles.generation(path, data["generation_config"])
    if data.get("index") is not None:
        modelfiles.index(path, data["index"], files)
    dtypes = modelfiles.parameter_counts(path, data.get("dtypes") or {})
    return Checkpoint(path, None, config, files, dtypes, _quant_config(config, hf_quant), local=True)


def _hub_json(api, repo: str, name: str, sha: str | None, files: dict[str, int] | None = None) -> Any:
    """File ``name`` of a hub repo at commit ``sha``, as strict JSON (not fetched past its bound)."""
    size = (files or {}).get(name, 0)
    if size > modelfiles.MAX_JSON_BYTES:
        raise ModelError(f"{repo}: {name} is {size} bytes (at most {modelfiles.MAX_JSON_BYTES}): {modelfiles.FIX}")
    return modelfiles.load_json(repo, name, Path(api.hf_hub_download(repo, name, revision=sha)).read_bytes())


def _hub_parameters(api, repo: str, sha: str | None, weights: list[str]) -> dict[str, int]:
    """Parameters per dtype from the safetensors headers of ``weights`` (Range requests through the
    hub client, a few at a time), each header checked by :func:`modelfiles.header`."""
    from concurrent.futures import ThreadPoolExecutor

    def read(name: str) -> dict[str, int]:
        try:
            found = api.parse_safetensors_file_metadata(repo, name, revision=sha)
            header = {tensor: {"dtype": info.dtype, "shape": info.shape} for tensor, info in found.tensors.items()}
        except Exception as exc:  # a header the hub client cannot parse (hostile, cut short), or the network
            raise ModelError(
                f"{repo}: {name}'s safetensors header cannot be read ({type(exc).__name__}: {clean(exc)[:200]}): "
                f"{modelfiles.FIX}, or check the network"
            ) from None
        return modelfiles.header(repo, name, header)

    counts: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for shard in pool.map(read, weights):
            for dtype, count in shard.items():
                counts[dtype] = counts.get(dtype, 0) + count
    return counts


def _weights(files: dict[str, int], mistral: bool) -> list[str]:
    """The safetensors files vLLM would load (none: the plan says the checkpoint has none to serve)."""
    try:
        return [name for name in needed_files(files, mistral_format=mistral) if name.endswith(".safetensors")]
    except ModelError:
        return []


def from_hub(model: str, *, api=None, token: str | None = None) -> Checkpoint:
    """A hub checkpoint's metadata (no weights are downloaded), every file podkit reads checked."""
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
        files = modelfiles.file_sizes(repo, {s.rfilename: s.size or 0 for s in info.siblings or []})
        config = modelfiles.config(repo, _hub_json(api, repo, CONFIG, info.sha, files))
        hf_quant = (
            modelfiles.quant(repo, _hub_json(api, repo, QUANT_FILE, info.sha, files)) if QUANT_FILE in files else None
        )
        if GENERATION_FILE in files:
            modelfiles.generation(repo, _hub_json(api, repo, GENERATION_FILE, info.sha, files))
        if INDEX_FILE in files:
            modelfiles.index(repo, _hub_json(api, repo, INDEX_FILE, info.sha, files), files)
        mistral = "params.json" in files and not any(
            n.endswith(".safetensors") and not n.startswith("consolidated") for n in files
        )
        params = _hub_parameters(api, repo, info.sha, _weights(files, mistral))
    except ModelError:
        raise
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
            f"cannot read {repo} from {endpoint} ({type(exc).__name__}: {clean(exc)[:200]}); "
            "check the network or HF_ENDPOINT"
        ) from None
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
