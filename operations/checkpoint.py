"""Operations for the checkpoint on the volume: a clean hub cache, and the planned snapshot in it."""

from __future__ import annotations

import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from podkit.host.fetch import FetchSpec, progress_line, start_command, status_config
from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.paths import Paths
from podkit.text import clean


def _podctl(host, action: str, cfg: dict):
    status, output = host.run_shell_command(podctl_command(action, cfg), print_output=False)
    try:
        return read_answer(action, output.stdout, output.stderr)
    except PodctlError as exc:
        raise RuntimeError(clean(exc)) from None


def _clean(state, host, paths: Paths) -> bool:
    result = _podctl(host, "cache", {"hub_cache": paths.hub_cache, "run_dir": paths.run, "clean": True})
    removed = [item for item in result["problems"] if item["removed"]]
    kept = [item for item in result["problems"] if not item["removed"]]
    host.log(
        f"hub cache: removed {len(removed)} partial download(s), lock(s) or broken link(s), "
        f"freed {result['freed_bytes'] / 1e9:.2f} GB" + (f"; left {len(kept)} in use" if kept else "")
    )
    return True


@operation(is_idempotent=False)
def cache_clean(paths: Paths, problems: list[dict], fetch_running: bool):
    """
    Ensure no partial download, stale lock or broken snapshot link is left in the hub cache.

    Removes only what no process holds open, and nothing while a fetch runs;
    never a complete blob. A failed attempt that filled the disk is recovered
    by re-applying.

    + paths: podkit's paths on the volume
    + problems: what the probe found (``podctl cache``'s list)
    + fetch_running: a fetch started by an earlier apply is still running

    **Example:**

    .. code:: python

        checkpoint.cache_clean(
            name="Ensure the hub cache holds no partial downloads",
            paths=paths, problems=pod.cache_problems, fetch_running=pod.fetch_running,
        )
    """
    removable = [p for p in problems if not p.get("in_use")]
    if not removable or fetch_running:
        why = "a fetch is running" if removable else "no partial downloads, stale locks or broken links"
        host.noop(f"hub cache on the volume: {why}")
        return
    yield FunctionCommand(_clean, (paths,), {})


def _kill(host, paths: Paths) -> None:
    host.run_shell_command(
        f"pid=$(cut -d' ' -f1 {paths.run}/fetch.pid 2>/dev/null) && kill -TERM \"$pid\" 2>/dev/null; "
        f"rm -f {paths.run}/fetch.pid",
        print_output=False,
    )


def _fetch(
    state,
    host,
    spec: FetchSpec,
    paths: Paths,
    python: str,
    endpoint: str | None,
    deadline: float,
    already_running: bool,
    poll: float = 5.0,
) -> bool:
    if not already_running:
        status, output = host.run_shell_command(start_command(spec, paths, python, endpoint), print_output=False)
        if not status:
            host.log_styled(
                clean(f"could not start the fetch: {output.stderr[-300:]}"), fg="red", log_func=logger.error
            )
            return False
    start = time.monotonic()
    cfg = status_config(spec, paths)
    while True:
        time.sleep(poll)
        elapsed = time.monotonic() - start
        report = _podctl(host, "fetch-status", cfg)
        result = report["result"]
        if result and result.get("ok"):
            host.log(f"fetched {spec.repo}@{spec.revision} ({spec.total_bytes / 1e9:.2f} GB) in {elapsed:.0f}s")
            return True
        if result or not report["running"]:
            error = (result or {}).get("error") or "the fetch stopped without a result; its log follows"
            host.log_styled(clean(f"fetching {spec.repo} failed: {error}"), fg="red", log_func=logger.error)
            for line in report["log_tail"][-10:]:
                host.log(f"  | {clean(line)}", log_func=logger.error)
            return False
        if elapsed >= deadline:
            _kill(host, paths)
            host.log_styled(
                f"fetching {spec.repo} did not finish within {deadline:.0f}s (podkit_fetch_timeout); "
                "stopped it; re-apply to go on (partial files are cleaned and the download restarts)",
                fg="red",
                log_func=logger.error,
            )
            return False
        host.log(progress_line(spec, report["bytes"], elapsed, deadline))


@operation(is_idempotent=False)
def fetched(
    spec: FetchSpec,
    paths: Paths,
    python: str,
    endpoint: str | None,
    deadline: float,
    complete: bool,
    running: bool,
    note: str | None = None,
):
    """
    Ensure the planned checkpoint is complete in the hub cache on the volume, at its pinned revision.

    Downloads on the host (detached, so a dropped connection does not stop it)
    only the files vLLM needs, printing bytes and percent every few seconds,
    within ``deadline`` seconds. A complete snapshot is a no-op with no hub
    request.

    + spec: repo, pinned revision, files and size (from the plan)
    + paths: podkit's paths on the volume
    + python: the interpreter with huggingface_hub on the host (vLLM's)
    + endpoint: ``HF_ENDPOINT`` to use on the host, or None for the hub
    + deadline: seconds before the fetch is stopped
    + complete: the probe found the recorded snapshot whole
    + running: a fetch from an earlier apply is still running (it is watched, not restarted)
    + note: a line to say first, e.g. the probe's reason for ignoring a malformed checkpoint record

    **Example:**

    .. code:: python

        checkpoint.fetched(
            name="Ensure Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 is on the volume",
            spec=launch.fetch, paths=paths, python=f"{paths.venv}/bin/python", endpoint=None,
            deadline=7200, complete=launch.fetched, running=pod.fetch_running,
        )
    """
    if note:
        host.log(clean(note), logger.warning)
    if complete:
        host.noop(f"{spec.repo}@{spec.revision[:12]} is complete on the volume")
        return
    yield FunctionCommand(_fetch, (spec, paths, python, endpoint, deadline, running), {})
