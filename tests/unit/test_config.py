"""Settings: every datum validated with an error that names the key and the fix."""

import ast
import re
from pathlib import Path

import pytest

from podkit.settings import KEYS, PackageSpec, Paths, Settings, SettingsError, default_served_name

ROOT = Path(__file__).resolve().parent.parent.parent


def sample_data():
    """group_data/all.py's values, read as the deploy reads them."""
    namespace = {}
    exec((ROOT / "group_data" / "all.py").read_text(), namespace)
    return {key: namespace[key] for key in KEYS}


def test_group_data_defines_every_key_with_a_comment():
    source = (ROOT / "group_data" / "all.py").read_text()
    lines = source.splitlines()
    assigned = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            assigned[node.targets[0].id] = node.lineno
    assert set(assigned) == set(KEYS)
    for name, lineno in assigned.items():
        assert lines[lineno - 2].lstrip().startswith("#"), f"{name} needs a comment above it"


def test_readme_settings_table_lists_every_key():
    readme = (ROOT / "README.md").read_text()
    settings = readme.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]  # other sections have tables too
    table = set(re.findall(r"^\| `([a-z0-9_]+)` \|", settings, re.M))
    assert table == set(KEYS)


def test_defaults_validate():
    settings = Settings.from_mapping(sample_data())
    assert settings.served_model_name == "Qwen3-Coder-30B-A3B-Instruct"
    assert settings.package_for(has_gpus=True) == PackageSpec("vllm", "0.33.0")
    assert settings.package_for(has_gpus=False).is_cpu_build


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("vllm_port", "eighty", "vllm_port must be an integer from 1 to 65535"),
        ("vllm_port", 70000, "vllm_port must be an integer from 1 to 65535"),
        ("vllm_max_model_len", "long", "vllm_max_model_len must be a token count"),
        ("vllm_gpu_memory_utilization", 1.5, "must be in (0, 1]"),
        ("vllm_kv_cache_dtype", "int4", "vllm_kv_cache_dtype must be one of"),
        ("podkit_vllm_package", "vllm>=0.30", "is not a pinned pip spec; write it as NAME==VERSION"),
        ("podkit_volume", "workspace", "must be an absolute path"),
        ("vllm_extra_args", ["--api-key", "x"], "must not carry --api-key"),
        ("vllm_extra_args", ["--api-key=x"], "must not carry --api-key"),
        ("vllm_extra_args", "--enforce-eager", "must be a list of strings"),
        ("vllm_extra_env", {"VLLM_API_KEY": "x"}, "must not set VLLM_API_KEY"),
        ("vllm_extra_env", {"A B": "x"}, "invalid variable name"),
        ("vllm_tensor_parallel_size", 0, "positive integer or None"),
    ],
)
def test_bad_datum_names_key_and_fix(key, value, message):
    with pytest.raises(SettingsError, match=re.escape(message)):
        Settings.from_mapping({**sample_data(), key: value})


def test_missing_keys_say_run_from_project_root():
    data = sample_data()
    del data["vllm_port"]
    with pytest.raises(SettingsError, match="run from the project root"):
        Settings.from_mapping(data)


@pytest.mark.parametrize(
    "model, name",
    [("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-Coder-30B-A3B-Instruct"), ("/w/models/tiny/", "tiny"), ("org/m@abc123", "m")],
)
def test_served_name_defaults_to_last_part(model, name):
    assert default_served_name(model) == name


def test_every_cache_is_on_the_volume():
    paths = Paths("/workspace")
    env = paths.cache_env()
    assert set(env) >= {
        "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT",
        "TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
    }
    assert all(value.startswith("/workspace/podkit/") for value in env.values())
    assert paths.directories()[paths.secrets] == "700"
