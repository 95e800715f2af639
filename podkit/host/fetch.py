"""Fetching a checkpoint on the host: the commands, and reading their progress.

The download runs on the host (the weights never cross the controller),
detached with ``setsid`` so a dropped SSH connection does not kill it, into
the hub cache on the volume, at the revision the plan pinned, with only the
files vLLM needs. The deploy polls ``podctl fetch-status`` every few seconds
and prints bytes and percent. Once complete, a record on the volume lets every
later apply see the snapshot without asking the hub.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from importlib import resources

from podkit.paths import Paths

_HEREDOC = "PODKIT_FETCH_EOF"


@dataclass(frozen=True)
class FetchSpec:
    model: str  # the vllm_model spec the record answers to
    repo: str  # the repo actually fetched (an FP8 sibling, maybe)
    revision: str  # a commit sha
    files: tuple[str, ...]
    total_bytes: int

    def snapshot(self, paths: Paths) -> str:
        return posixpath.join(paths.repo_cache(self.repo), "snapshots", self.revision)


def start_command(spec: FetchSpec, paths: Paths, python: str, endpoint: str | None) -> str:
    """One command: source the env file, then start fetch.py detached; prints its pid."""
    cfg = {
        "model": spec.model,
        "repo": spec.repo,
        "revision": spec.revision,
        "files": list(spec.files),
        "cache_dir": paths.hub_cache,
        "token_file": paths.hf_token,
        "record": paths.checkpoint_record,
        "status_file": posixpath.join(paths.run, "fetch.json"),
    }
    source = resources.files("podkit.remote").joinpath("fetch.py").read_text()
    assert _HEREDOC not in source
    exports = "export HF_HUB_OFFLINE=0 HF_HUB_DISABLE_TELEMETRY=1"
    if endpoint:
        exports += f" HF_ENDPOINT={shlex.quote(endpoint)}"
    run = shlex.quote(paths.run)
    return (
        f". {shlex.quote(paths.env_file)} && {exports}\n"
        f"rm -f {run}/fetch.json {run}/fetch.pid\n"
        f"setsid {shlex.quote(python)} - {shlex.quote(json.dumps(cfg, sort_keys=True))} "
        f"> {shlex.quote(paths.fetch_log)} 2>&1 <<'{_HEREDOC}' &\n{source}\n{_HEREDOC}\n"
        f"pid=$!; echo \"$pid $(sed 's/^.*) //' /proc/$pid/stat | cut -d' ' -f20)\" > {run}/fetch.pid; echo $pid"
    )


def status_config(spec: FetchSpec, paths: Paths) -> dict:
    return {"run_dir": paths.run, "hub_repo_cache": paths.repo_cache(spec.repo), "log_file": paths.fetch_log}


def progress_line(spec: FetchSpec, done: int, elapsed: float, deadline: float) -> str:
    share = min(100.0, 100.0 * done / spec.total_bytes) if spec.total_bytes else 100.0
    return (
        f"fetching {spec.repo}@{spec.revision[:12]}: {done / 1e9:.2f} of {spec.total_bytes / 1e9:.2f} GB "
        f"({share:.0f}%), {elapsed:.0f}s of {deadline:.0f}s"
    )
