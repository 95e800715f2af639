"""The files of a checkpoint podkit reads, besides the weights: one list, for every reader.

Each pattern says what the file is and which format reads it (``hf``: the transformers layout
with ``config.json`` and ``*.safetensors`` shards; ``mistral``: Mistral's own, ``params.json`` and
``consolidated*.safetensors``). Three readers take their files from it:

- the download on the host (:func:`podkit.plan.checkpoints.needed_files`): the weights of the served
  format plus its files here;
- the plan: the config and the quantization config it reads (:data:`CONFIG`, :data:`QUANT_CONFIG`);
- the measured start (``podkit_plan_measure``, :mod:`podkit.host.measure`): every file here but the
  weight index (:data:`METADATA_PATTERNS`), so a start with random weights reads what the served
  start reads (an FP8 checkpoint's quantization config included), and never a weight.

A file vLLM needs that is missing here is missing for all three at once, and a test holds them
together (``tests/unit/test_checkpoint_files.py``).
"""

from __future__ import annotations

import fnmatch

#: The model's architecture, and the quantization config a ModelOpt checkpoint keeps beside it.
CONFIG = "config.json"
QUANT_CONFIG = "hf_quant_config.json"

#: pattern -> (what it is, the formats that read it)
FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    CONFIG: ("config", ("hf",)),
    "params.json": ("config", ("mistral",)),
    "generation_config.json": ("sampling defaults", ("hf", "mistral")),
    QUANT_CONFIG: ("quantization", ("hf",)),
    "quantization_config.json": ("quantization", ("hf",)),
    "tokenizer.json": ("tokenizer", ("hf",)),
    "tokenizer_config.json": ("tokenizer", ("hf",)),
    "tokenizer.model": ("tokenizer", ("hf",)),
    "special_tokens_map.json": ("tokenizer", ("hf",)),
    "added_tokens.json": ("tokenizer", ("hf",)),
    "vocab.json": ("tokenizer", ("hf",)),
    "merges.txt": ("tokenizer", ("hf",)),
    "*.tiktoken": ("tokenizer", ("hf",)),
    "tekken.json": ("tokenizer", ("mistral",)),
    "chat_template.json": ("chat template", ("hf",)),
    "*.jinja": ("chat template", ("hf", "mistral")),
    "preprocessor_config.json": ("processor", ("hf",)),
    "processor_config.json": ("processor", ("hf",)),
    "model.safetensors.index.json": ("weight index", ("hf",)),
}

#: What the measured start fetches: every file above but the weight index (it loads no weight).
METADATA_PATTERNS: tuple[str, ...] = tuple(p for p, (what, _) in FILES.items() if what != "weight index")


def support_files(names: list[str], fmt: str) -> list[str]:
    """The files of ``names`` (top-level only) that format ``fmt`` reads besides its weights."""
    patterns = [p for p, (_, formats) in FILES.items() if fmt in formats]
    return [n for n in names if "/" not in n and any(fnmatch.fnmatch(n, p) for p in patterns)]
