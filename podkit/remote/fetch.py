"""fetch: download one checkpoint into the hub cache on the volume, then record it.

Runs on the host, detached (setsid), with the Python that has vLLM and so
huggingface_hub. It is given paths and names only; the Hugging Face token, if
any, is read from its 0600 file and handed to the client in memory: never on
argv, in the environment of other processes, or in a log. On success it writes
the record (repo, pinned revision, snapshot path, files) that later probes read;
either way it writes ``fetch.json`` with the outcome.
"""

import json
import os
import sys
import time


def write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def main(cfg):
    token = None
    try:
        with open(cfg["token_file"]) as handle:
            token = handle.read().strip() or None
    except OSError:
        pass
    started = time.time()
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(
            cfg["repo"],
            revision=cfg["revision"],
            allow_patterns=cfg["files"],
            cache_dir=cfg["cache_dir"],
            token=token if token else False,
        )
        missing = [f for f in cfg["files"] if not os.path.exists(os.path.join(snapshot, f))]
        if missing:
            raise RuntimeError("the download finished without %s" % ", ".join(missing))
    except Exception as exc:  # report every failure in the status file, plainly
        message = "%s: %s" % (type(exc).__name__, exc)
        if token:
            message = message.replace(token, "***")
        write_json(cfg["status_file"], {"ok": False, "error": message[-800:], "seconds": time.time() - started})
        print("podkit fetch failed: " + message, file=sys.stderr)
        return 1
    record = {
        "model": cfg["model"],
        "repo": cfg["repo"],
        "revision": cfg["revision"],
        "snapshot": snapshot,
        "files": cfg["files"],
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(cfg["record"], record)
    write_json(cfg["status_file"], {"ok": True, "snapshot": snapshot, "seconds": time.time() - started})
    print("podkit fetch: %s@%s complete in %s" % (cfg["repo"], cfg["revision"], snapshot))
    return 0


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    try:
        code = main(config)
    finally:
        try:
            os.remove(os.path.join(os.path.dirname(config["status_file"]), "fetch.pid"))
        except OSError:
            pass
    sys.exit(code)
