"""Checkpoints and the hub cache: a model folder on the host, the record a fetch left, partial downloads
and stale locks; and the verbs ``cache`` (list or clean the hub cache) and ``fetch-status``.
"""

import json
import os

from podkit.remote.podctl.base import log_lines, pid_alive, read_json, read_text


def strict_json(handle):
    """JSON as it is written: NaN, Infinity and a number past a float's reach are refused (ValueError)."""

    def no_constant(literal):
        raise ValueError("%s is not a JSON number" % literal)

    def finite_float(literal):
        number = float(literal)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError("%s is past what a number can hold" % literal[:60])
        return number

    return json.loads(handle.read(), parse_constant=no_constant, parse_float=finite_float)


def safetensors_dtypes(path):
    """(parameters per dtype, None) of one safetensors file's header, or (None, why it cannot be read):
    the controller refuses a checkpoint whose header is malformed (podkit/plan/modelfiles.py)."""
    counts = {}  # type: dict[str, int]
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if not 0 < length <= 100 * 1024 * 1024:
                return None, "has a header length of %d bytes (from 1 to 100 MB)" % length
            raw = handle.read(length)
            if len(raw) != length:
                return None, "is cut short within its header"
            header = json.loads(raw, parse_constant=lambda literal: float("nan"))
    except (OSError, ValueError, RecursionError) as exc:
        return None, "has a header that is not JSON (%s)" % str(exc)[:120]
    if not isinstance(header, dict):
        return None, "has a header that is not a JSON object"
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = info.get("shape") if isinstance(info, dict) else None
        dtype = info.get("dtype") if isinstance(info, dict) else None
        if not isinstance(dtype, str) or not isinstance(shape, list):
            return None, "has tensor %s without a dtype and a shape" % json.dumps(name)[:80]
        n = 1
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= 1 << 40:
                return None, "has tensor %s of shape %s (whole dimensions only)" % (
                    json.dumps(name)[:80],
                    json.dumps(shape)[:80],
                )
            n *= dim
        counts[dtype] = counts.get(dtype, 0) + n
    return counts, None


MAX_JSON_BYTES = 16 * 1024 * 1024  # as podkit/plan/modelfiles.py: a config is kilobytes
#: The JSON files of a checkpoint folder podkit reads, by the key the probe answers them under.
JSON_FILES = (
    ("config", "config.json"),
    ("hf_quant_config", "hf_quant_config.json"),
    ("generation_config", "generation_config.json"),
    ("index", "model.safetensors.index.json"),
)


def model_dir(path):
    """Metadata of a checkpoint folder on this host: config and the other JSON files podkit reads,
    file sizes, weight dtypes; ``errors``: each file that is there but cannot be read, and why (the
    controller checks what was read: podkit/plan/modelfiles.py)."""
    if not path or not os.path.isdir(path):
        return None
    files = dict((e.name, e.stat().st_size) for e in os.scandir(path) if e.is_file())
    result = {"files": files, "dtypes": {}, "errors": {}}  # type: dict
    for key, name in JSON_FILES:
        result[key] = None
        if name not in files:
            continue
        if files[name] > MAX_JSON_BYTES:
            result["errors"][name] = "is %d bytes (at most %d)" % (files[name], MAX_JSON_BYTES)
            continue
        try:
            with open(os.path.join(path, name), encoding="utf-8") as handle:
                result[key] = strict_json(handle)
        except OSError as exc:
            result["errors"][name] = "cannot be read (%s)" % (exc.strerror or exc)
        except (ValueError, RecursionError) as exc:
            result["errors"][name] = "is not valid JSON (%s)" % str(exc)[:120]
    for name in sorted(files):
        if name.endswith(".safetensors") and not name.startswith("consolidated"):
            counts, why = safetensors_dtypes(os.path.join(path, name))
            if why:
                result["errors"][name] = why
                continue
            for dtype, count in counts.items():
                result["dtypes"][dtype] = result["dtypes"].get(dtype, 0) + count
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
