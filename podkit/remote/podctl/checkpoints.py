"""Checkpoints and the hub cache: a model folder on the host, the record a fetch left, partial downloads
and stale locks; and the verbs ``cache`` (list or clean the hub cache) and ``fetch-status``.
"""

import json
import os

from podkit.remote.podctl.base import log_lines, pid_alive, read_json, read_text


def safetensors_dtypes(path):
    counts = {}  # type: dict[str, int]
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if length > 100 * 1024 * 1024:
                return counts
            header = json.loads(handle.read(length))
    except (OSError, ValueError):
        return counts
    for name, info in header.items():
        if name == "__metadata__":
            continue
        n = 1
        for dim in info.get("shape", []):
            n *= dim
        counts[info.get("dtype")] = counts.get(info.get("dtype"), 0) + n
    return counts


def model_dir(path):
    """Metadata of a checkpoint folder on this host: config, file sizes, weight dtypes."""
    if not path or not os.path.isdir(path):
        return None
    files = {e.name: e.stat().st_size for e in os.scandir(path) if e.is_file()}
    dtypes = {}  # type: dict[str, int]
    result = {"files": files, "config": None, "hf_quant_config": None, "dtypes": dtypes}
    for key, name in (("config", "config.json"), ("hf_quant_config", "hf_quant_config.json")):
        try:
            with open(os.path.join(path, name)) as handle:
                result[key] = json.load(handle)
        except (OSError, ValueError):
            pass
    for name in files:
        if name.endswith(".safetensors") and not name.startswith("consolidated"):
            for dtype, count in safetensors_dtypes(os.path.join(path, name)).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + count
    return result


def hub_cache_bytes(folder):
    """Bytes of complete blobs already in the hub cache for one repo (partial downloads excluded)."""
    total = 0
    try:
        for entry in os.scandir(os.path.join(folder, "blobs")):
            if entry.is_file() and not entry.name.endswith(".incomplete"):
                total += entry.stat().st_size
    except OSError:
        pass
    return total


RECORD_TEXT = ("model", "repo", "revision", "snapshot")


def checkpoint_record(path):
    """(record, None) for the fetch's record at ``path``, (None, None) when there is none, and
    (None, why) when it is malformed (hand-edited, cut short): a malformed record is no record."""
    if not path or not os.path.exists(path):
        return None, None
    record = read_json(path)
    if not isinstance(record, dict):
        return None, "%s is not a JSON object" % path
    for name in RECORD_TEXT:
        if not isinstance(record.get(name), str) or not record[name]:
            return None, "%s has no %s (%s)" % (path, name, json.dumps(record.get(name)))
    files = record.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        return None, "%s has no list of files" % path
    if not os.path.isabs(record["snapshot"]):
        return None, "%s names a snapshot that is not an absolute path" % path
    return record, None


def recorded_checkpoint(cfg):
    """The checkpoint a previous fetch recorded for this model spec, and whether it is still whole.

    A malformed record is treated as none: ``{"complete": False, "missing": [], "ignored": why}``,
    so the deploy fetches again (which rewrites it) and can say in one line why."""
    record, problem = checkpoint_record(cfg.get("record"))
    if problem:
        return {"complete": False, "missing": [], "ignored": problem + ": ignored, the fetch rewrites it"}
    if not record or record.get("model") != cfg.get("model"):
        return None
    snapshot = record["snapshot"]
    missing = [f for f in record["files"] if not os.path.exists(os.path.join(snapshot, f))]
    record["complete"] = bool(record["files"]) and not missing
    record["missing"] = missing
    return record


def open_files():
    """Every path some process holds open (what a download in progress writes or locks)."""
    held = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    held.add(os.readlink("/proc/%s/fd/%s" % (pid, fd)))
                except OSError:
                    pass
        except OSError:
            pass
    return held


def cache_problems(hub_cache):
    """Partial downloads (old <etag>.incomplete and new <etag>.<8hex>.incomplete), lock files and
    snapshot links whose blob is gone, each with its size and whether a process holds it."""
    found = []  # type: list[dict]
    if not hub_cache or not os.path.isdir(hub_cache):
        return found
    for repo in sorted(os.listdir(hub_cache)):
        top = os.path.join(hub_cache, repo)
        if not repo.startswith(("models--", "datasets--", "spaces--")) or not os.path.isdir(top):
            continue
        try:
            for entry in os.scandir(os.path.join(top, "blobs")):
                if entry.name.endswith(".incomplete"):
                    found.append({"kind": "partial", "path": entry.path, "bytes": entry.stat().st_size, "repo": repo})
        except OSError:
            pass
        for root, _dirs, files in os.walk(os.path.join(top, "snapshots")):
            for name in files:
                path = os.path.join(root, name)
                if os.path.islink(path) and not os.path.exists(path):
                    found.append({"kind": "broken_link", "path": path, "bytes": 0, "repo": repo})
    # huggingface_hub leaves <etag>.lock behind every download; one whose blob never completed
    # belongs to a download that died
    for root, _dirs, files in os.walk(os.path.join(hub_cache, ".locks")):
        for name in files:
            blob = os.path.join(hub_cache, os.path.basename(root), "blobs", name[: -len(".lock")])
            if name.endswith(".lock") and not os.path.exists(blob):
                found.append(
                    {"kind": "lock", "path": os.path.join(root, name), "bytes": 0, "repo": os.path.basename(root)}
                )
    if found:
        held = open_files()
        for item in found:
            item["in_use"] = item["path"] in held
    return found


def fetch_running(cfg):
    return pid_alive(read_text(os.path.join(cfg["run_dir"], "fetch.pid")))


def cache(cfg):
    """List (and with "clean": remove) what broke in the hub cache; never a complete blob."""
    problems = cache_problems(cfg["hub_cache"])
    busy = fetch_running(cfg)
    freed = 0
    for item in problems:
        item["removed"] = False
        if not cfg.get("clean") or item["in_use"] or busy:
            continue
        try:
            os.remove(item["path"])
        except OSError as exc:
            item["error"] = str(exc)
            continue
        item["removed"] = True
        freed += item["bytes"]
    stat = os.statvfs(cfg["hub_cache"]) if os.path.isdir(cfg["hub_cache"]) else None
    return {
        "problems": problems,
        "freed_bytes": freed,
        "fetch_running": bool(busy),
        "free_bytes": stat.f_bavail * stat.f_frsize if stat else None,
        "repos": repo_sizes(cfg["hub_cache"]),
    }


def repo_sizes(hub_cache):
    sizes = {}
    if hub_cache and os.path.isdir(hub_cache):
        for repo in os.listdir(hub_cache):
            if repo.startswith("models--"):
                sizes[repo[len("models--") :].replace("--", "/")] = hub_cache_bytes(os.path.join(hub_cache, repo))
    return sizes


def fetch_status(cfg):
    """How far a detached fetch has come: bytes on disk for the repo (partial files included)."""
    done = 0
    folder = os.path.join(cfg["hub_repo_cache"], "blobs")
    try:
        for entry in os.scandir(folder):
            done += entry.stat().st_size
    except OSError:
        pass
    log = log_lines(cfg["log_file"], 20)
    return {
        "running": bool(fetch_running(cfg)),
        "bytes": done,
        "result": read_json(os.path.join(cfg["run_dir"], "fetch.json")),
        "log_tail": log,
    }
