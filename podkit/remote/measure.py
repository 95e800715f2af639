"""measure: start vLLM once with random weights and hand back what it logged.

Runs on the host with the Python that has vLLM (and so huggingface_hub), sent inline
with its config (paths, names and flags only, never a secret). It fetches only a
checkpoint's config and tokenizer files (``allow_patterns``) into a scratch hub cache on
the volume, apart from the one the server uses, then starts ``vllm serve`` with the
served flags and ``--load-format dummy`` on a free loopback port, offline (so nothing
more can be downloaded), waits until it serves or stops, stops it, and prints one JSON
line: whether it started, the start lines worth reading, the error lines when it did
not, and the seconds each part took. With ``record`` it also keeps that outcome there
with the key it depends on, so the deploy does not measure the same thing twice.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

#: the lines that say vLLM serves (the CPU build's and the GPU build's)
READY = ("Application startup complete", "Starting vLLM API server", "Starting vLLM server on")
#: the lines that say why a start failed (the last of them is the reason)
ERRORS = ("Error", "error:", "CUDA out of memory", "Killed")


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def read_token(path):
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except (OSError, TypeError):
        return None


def fetch_metadata(cfg):
    """The checkpoint's config and tokenizer files in the scratch hub cache: its snapshot folder and
    the files it holds. Weights are never asked for (``allow_patterns``)."""
    from huggingface_hub import snapshot_download

    token = read_token(cfg.get("token_file"))
    try:
        snapshot = snapshot_download(
            cfg["repo"],
            revision=cfg["revision"],
            allow_patterns=cfg["patterns"],
            cache_dir=cfg["scratch_hub"],
            token=token if token else False,
            endpoint=cfg.get("endpoint"),
        )
    except Exception as exc:
        message = "%s: %s" % (type(exc).__name__, exc)
        raise RuntimeError(message.replace(token, "***") if token else message) from None
    files = sorted(os.path.relpath(os.path.join(d, f), snapshot) for d, _, fs in os.walk(snapshot) for f in fs)
    return snapshot, files


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment(cfg):
    env = dict(os.environ)
    env.update(cfg.get("env") or {})
    env.update({"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TMPDIR": cfg["tmp_dir"]})
    os.makedirs(cfg["tmp_dir"], mode=0o700, exist_ok=True)
    key = read_token(cfg.get("key_file"))
    if key:  # the measured server answers on loopback only, and with the host's key
        env["VLLM_API_KEY"] = key
    return env


def stop(proc, grace):
    """SIGTERM the start's process group, then SIGKILL what is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def serve(cfg, model):
    """Start vLLM, wait for it to serve or stop, stop it. Returns (started, exit code, log lines)."""
    port = free_port()
    argv = [model if arg == "{model}" else str(port) if arg == "{port}" else arg for arg in cfg["argv"]]
    os.makedirs(os.path.dirname(cfg["log_file"]), exist_ok=True)
    started, code = False, None
    with open(cfg["log_file"], "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment(cfg),
            start_new_session=True,
        )
        deadline = time.time() + cfg["timeout"]
        try:
            while time.time() < deadline:
                code = proc.poll()
                with open(cfg["log_file"], "rb") as reader:
                    text = reader.read().decode(errors="replace")
                if any(marker in text for marker in READY):
                    started = True
                    break
                if code is not None:
                    break
                time.sleep(0.5)
        finally:
            stop(proc, cfg.get("stop_grace", 30))
    with open(cfg["log_file"], "rb") as reader:
        lines = reader.read().decode(errors="replace").splitlines()
    return started, code, lines, port


def picked(lines, needles, started):
    """The start lines worth reading, and on a failed start its error lines, each cut to 400 chars."""
    keep = [line for line in lines if any(needle in line for needle in needles)]
    errors = [] if started else [line for line in lines[-200:] if any(mark in line for mark in ERRORS)]
    return [line[:400] for line in keep[:400]], [line[:600] for line in errors[-20:]], [x[:400] for x in lines[-30:]]


def main(cfg):
    began = time.time()
    result = {"measure": 1, "started": False}  # type: dict
    try:
        model = cfg["model"]
        if cfg.get("repo"):
            model, result["fetched"] = fetch_metadata(cfg)
        result["fetch_seconds"] = round(time.time() - began, 2)
        started, code, lines, port = serve(cfg, model)
        keep, errors, tail = picked(lines, cfg["needles"], started)
        result.update(started=started, exit=code, lines=keep, errors=errors, port=port)
        if not started:
            result["tail"] = tail
            result["timed_out"] = code is None
    except Exception as exc:  # report every failure plainly, in the one JSON line
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    result["seconds"] = round(time.time() - began, 2)
    if cfg.get("record") and "error" not in result:
        write_json(cfg["record"], {"key": cfg.get("key"), "at": time.time(), "result": result})
    return result


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(json.loads(sys.argv[1])), sort_keys=True) + "\n")
