"""One list of the checkpoint files podkit reads (``podkit/plan/checkpointfiles.py``): the download,
the plan and the measured start take their files from it, so a start with random weights reads
what the served start reads."""

from __future__ import annotations

import fnmatch

import pytest

from podkit.host.fetch import FetchSpec
from podkit.host.hostplan import HostPlan
from podkit.host.measure import measure_config
from podkit.plan.checkpointfiles import CONFIG, FILES, METADATA_PATTERNS, QUANT_CONFIG
from podkit.plan.checkpoints import Checkpoint, needed_files
from podkit.settings import Settings, defaults

#: A ModelOpt FP8 checkpoint as the hub lists it (nvidia/*-FP8): its quantization in hf_quant_config.json.
MODELOPT_FP8 = [
    "config.json",
    "generation_config.json",
    "hf_quant_config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "README.md",
    "original/consolidated.00.pth",
]
#: An FP8 checkpoint that keeps a quantization_config.json of its own, and a tiktoken tokenizer.
OTHER_FP8 = ["config.json", "quantization_config.json", "model.safetensors", "tiktoken.model", "o200k.tiktoken"]
MISTRAL = ["params.json", "tekken.json", "consolidated.safetensors", "chat_template.jinja", "config.json"]


def measured(name: str, patterns=METADATA_PATTERNS) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


@pytest.mark.parametrize("files, fmt", [(MODELOPT_FP8, "hf"), (OTHER_FP8, "hf"), (MISTRAL, "mistral")])
def test_the_measured_start_reads_every_file_the_download_brings_but_the_weights(files, fmt):
    """What the served start reads besides weights (the fetch's list) is what the measurement fetches."""
    downloaded = needed_files(dict.fromkeys(files, 1), mistral_format=fmt == "mistral")
    not_weights = [n for n in downloaded if not n.endswith(".safetensors") and n != "model.safetensors.index.json"]
    assert not_weights, "the case has support files"
    assert [n for n in not_weights if not measured(n)] == []
    assert [n for n in downloaded if n.endswith(".safetensors") and measured(n)] == []


def test_an_fp8_checkpoints_quantization_files_are_measured():
    """The plan's download of an FP8 checkpoint holds its quantization files, and the measured start
    of the same launch asks for each of them."""
    settings = Settings.from_mapping(dict(defaults(), vllm_model="acme/Coder-FP8"))
    checkpoint = Checkpoint("acme/Coder-FP8", "a" * 40, {}, dict.fromkeys(MODELOPT_FP8 + OTHER_FP8, 1))
    assert {QUANT_CONFIG, "quantization_config.json"} <= set(checkpoint.download)
    spec = FetchSpec("acme/Coder-FP8", "acme/Coder-FP8", "a" * 40, tuple(checkpoint.download), 10)
    launch = HostPlan(spec.snapshot(settings.paths), 4096, 1, None, None, fetch=spec)
    patterns = measure_config(settings, launch, "/v/bin/vllm")["patterns"]
    for name in (CONFIG, QUANT_CONFIG, "quantization_config.json"):
        assert measured(name, patterns), name


def test_every_file_has_a_kind_and_a_format():
    for pattern, (what, formats) in FILES.items():
        assert what and formats and set(formats) <= {"hf", "mistral"}, pattern
    assert QUANT_CONFIG in FILES and CONFIG in FILES
