"""The verbs that read the host: ``probe`` (everything the deploy needs, in one round trip, and the deploy
lock), ``wait`` (readiness), ``describe`` (what is serving) and ``status``; and :func:`main`, which
runs any verb and prints its answer, one line of JSON.
"""

import importlib.util
import json
import os
import sys
import time

from podkit.remote.podctl.base import (
    boot_time,
    http_get,
    last_lines_json,
    local_address,
    log_lines,
    process_argv,
    read_json,
    read_json_dict,
    read_text,
    sha256_of,
    started_at,
)
from podkit.remote.podctl.checkpoints import (
    cache,
    cache_problems,
    checkpoint_record,
    fetch_running,
    fetch_status,
    model_dir,
    recorded_checkpoint,
    repo_sizes,
)
from podkit.remote.podctl.cluster import cluster_facts
from podkit.remote.podctl.control import down, restore, self_stop, supervise
from podkit.remote.podctl.lock import deploy_lock
from podkit.remote.podctl.machine import account, gpus, mode_and_owner, sudo_state, system_dists, venv_dists, volume
from podkit.remote.podctl.processes import listen_addresses, listener, reap
from podkit.remote.podctl.server import (
    edge_health,
    endpoint,
    failed_start_lines,
    generation_config,
    key_leaks,
    lasting_failure,
    openapi_routes,
    port_listening,
    record_accepted,
    record_start,
    refused_requests,
    router_workers,
    serve_args,
    server_tail,
    start_lines,
    startup_lines,
    startup_plans,
)
from podkit.remote.podctl.supervisor import (
    SYSTEMD_RUNNING,
    leftovers,
    legacy_runner,
    program_said,
    settled_state,
    stopped_on_purpose,
    supervision,
    supervisor_state,
    unit_state,
)


def probe(cfg):
    # one systemctl each
    unit, edge_unit, idle_unit = (unit_state(cfg.get(name)) for name in ("unit", "edge_unit", "idle_unit"))
    runner = supervisor_state(cfg, {"vllm": unit, "edge": edge_unit, "idle": idle_unit})
    who = account()
    vol = volume(cfg["volume"])
    state = {
        "podctl": 1,
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        **who,
        "venv_module": all(importlib.util.find_spec(m) for m in ("venv", "ensurepip")),
        "gpus": gpus(),
        "volume": vol,
        "systemd": os.path.isdir(SYSTEMD_RUNNING),
        "unit": unit,
        "edge_unit": edge_unit,
        "idle_unit": idle_unit,
        "sudo": sudo_state(cfg, who, vol, unit),
        "vllm": {"venv": venv_dists(cfg["venv"]), "system": system_dists()},
        "files": {path: sha256_of(path) for path in cfg["files"]},
        "dirs": {path: os.path.isdir(path) for path in cfg["dirs"]},
        "modes": {path: mode_and_owner(path) for path in list(cfg["files"]) + list(cfg["dirs"])},
        "supervisor": runner,
        "legacy_runner": legacy_runner(cfg),
        "port_listening": port_listening(cfg),
        # a router host's hops and metrics: each port's listener, podkit's when under supervisord's tree
        "ports_held": {str(port): listener(port, runner["pid"]) for port in cfg.get("extra_ports") or []},
        "endpoint": endpoint(cfg) if runner["vllm_pid"] else None,
        "edge": edge_health(cfg) if runner["edge_pid"] else None,
        # the edge CA's root certificate (public): the controller pins it
        "ca_root": read_text(cfg["ca_root"]) if cfg.get("ca_root") else None,
        "model_dir": model_dir(cfg.get("model_dir")),
        "checkpoint": recorded_checkpoint(cfg),
        # the last measured start (``podkit_plan_measure``): its key and outcome
        "measured": read_json_dict(cfg["measured"]) if cfg.get("measured") else None,
        # the launches the installed vLLM accepted before: the deploy does not check them again
        "accepted_launches": (read_text(cfg.get("accepted_launches") or "") or "").split(),
        "cache_problems": cache_problems(cfg.get("hub_cache")),
        "fetch_running": bool(fetch_running(cfg)),
        "hub_repos": repo_sizes(cfg.get("hub_cache")),
        "orphans": leftovers(cfg, runner["vllm_pid"]),
        "cluster": cluster_facts(cfg["cluster"]) if cfg.get("cluster") else None,
        # the idle watcher's proof that the pod can stop itself (a read of the pod with its own key)
        "self_stop": (read_json_dict(cfg["idle_state"]) or {}).get("self_stop") if cfg.get("idle_state") else None,
        # last: what it creates (run/, the lock file) is not mistaken for what the deploy made
        "lock": deploy_lock(cfg),
    }
    if state["checkpoint"] and state["checkpoint"]["complete"]:
        state["checkpoint"]["metadata"] = model_dir(state["checkpoint"]["snapshot"])
    return state


def wait(cfg):
    """Poll the local server for up to ``window`` seconds; stop early when it answers, when its
    supervisor is gone, or when it has exited ``crash_limit`` times and no server runs now (a count
    left from earlier starts is no reason to give up on a server that is still starting), or once
    with a failure of ``lasting_failures`` in its lines (the next start of the same launch meets it
    again, so the one the supervisor began is not waited for). The endpoint is asked first: a server
    that answers is ready, whatever the count or the log say. The log tail is the current start's
    (after the last start marker), or the failed start's when its failure ended the wait."""
    began = time.time()
    deadline = began + cfg.get("window", 10)
    while True:
        state = endpoint(cfg)
        edge = edge_health(cfg) or {}
        state["edge"] = edge
        ready = (
            state["health"] == 200 and cfg["served_model_name"] in (state["models"] or []) and edge.get("health") == 200
        )
        runner = supervisor_state(cfg)
        since = runner["crashes"] - cfg.get("crashes_before", 0)  # exits before the wait are not this start's
        failed = failed_start_lines(cfg["log_file"]) if since >= 1 and not ready else []
        lasting = lasting_failure(failed, cfg.get("lasting_failures") or []) if failed else None
        crashed = (since >= cfg.get("crash_limit", 2) and not runner["vllm_pid"]) or lasting is not None
        # stopped on purpose (podkit down, the idle watcher) while the deploy waits: no point waiting
        stopped = stopped_on_purpose(cfg, runner)
        fatal = runner["programs"].get(cfg.get("program", "vllm")) in ("FATAL", "FAILED") or runner["programs"].get(
            "edge"
        ) in (
            "FATAL",
            "FAILED",
        )
        trouble = not runner["pid"] or crashed or fatal or bool(stopped)
        if ready or trouble or time.time() >= deadline:
            break
        time.sleep(1)
    tail = log_lines(cfg["log_file"], 1)
    if ready:
        log_tail = None
    elif lasting:
        log_tail = failed[-cfg.get("tail_lines", 60) :]
    else:
        log_tail = start_lines(cfg["log_file"], cfg.get("tail_lines", 60))
    state.update(
        ready=ready,
        runner=runner,
        crashes_before=cfg.get("crashes_before", 0),
        stopped=None if ready else stopped,
        ca_root=read_text(cfg["ca_root"]) if ready and cfg.get("ca_root") else None,
        last_log_line=tail[-1][-240:] if tail else None,
        log_tail=log_tail,
        lasting=lasting,
        # a ready server's start, beside what the deploy predicted for it
        startup=startup_lines(cfg["log_file"], cfg.get("startup_needles") or []) if ready else None,
        plan=read_json_dict(cfg["plan_file"]) if ready and cfg.get("plan_file") else None,
    )
    if ready and cfg.get("starts_file"):
        state["recorded"] = record_start(cfg, state["startup"], began)
    if ready and cfg.get("accept"):
        record_accepted(cfg["accept"])
    return state


def describe(cfg):
    """What serves on the port and from where (see the module docstring), and who listens on it."""
    # the pids the launch and edge scripts recorded, once an edge or watcher just started has run 2 s
    runner = settled_state(cfg)
    args = serve_args(process_argv(runner["vllm_pid"])) if runner["vllm_pid"] else None
    found = venv_dists(cfg["venv"])["dists"] or system_dists()["dists"]
    model = args[0] if args else ""
    folder = bool(model) and os.path.isdir(model)
    config = read_json(os.path.join(model, "config.json")) if folder else None
    return {
        "running": bool(args),
        "serve_args": args,
        "vllm_version": next(iter(found.values()), None),
        "vllm_dist": next(iter(found), None),
        "checkpoint": checkpoint_record(cfg.get("record"))[0],
        "architectures": (config or {}).get("architectures"),
        "model_type": (config or {}).get("model_type"),
        "text_model_type": ((config or {}).get("text_config") or {}).get("model_type"),
        "generation_config": generation_config(model) if folder else None,
        # reading every process's argv and the logs is verify's business, not bench's or eval's
        "leaks": key_leaks(cfg) if cfg.get("leaks") else None,
        # who holds the edge's port: a client sends the key only when it is podkit's edge
        "listener": listener((cfg.get("edge") or {}).get("port"), runner["edge_pid"])
        if (cfg.get("edge") or {}).get("port")
        else None,
        # where vLLM listens (loopback only, or the edge is bypassed) and what it serves
        "vllm_listens": listen_addresses(runner["vllm_pid"]) if args or cfg.get("replicas_file") else None,
        # podkit's vLLM's, else whatever answers on the edge's port (a server started there by hand)
        "routes": (openapi_routes(cfg["port"]) or openapi_routes((cfg.get("edge") or {}).get("port") or 0))
        if cfg.get("routes")
        else None,
        # vLLM engines that outlived their server, holding memory the next start needs, and
        # podkit's programs running outside its supervisor (a supervisord that died left them)
        "orphans": leftovers(cfg, runner["vllm_pid"]),
        # what supervises: its pid and each program's state (a watcher that is not running stops nothing)
        "supervisor": cfg.get("supervisor") or "supervisord",
        "supervisor_pid": runner["pid"],
        "programs": runner["programs"],
        "program_said": program_said(cfg, runner),
        "server_tail": server_tail(cfg, runner),
        # a router host: each replica, and whether the router has it in (its own health checks)
        "router": router_workers(cfg) if cfg.get("replicas_file") else None,
        # what the idle watcher is told to stop, and its proof that a pod can stop itself
        "idle": idle_promise(cfg),
        # what the edge refused lately (its access log: method, path, status, size, time)
        "refused": refused_requests(cfg["access_log"]) if cfg.get("access_log") else None,
    }


def idle_promise(cfg):
    """The idle watcher's config as far as it promises a stop (action, pod id, idle time), and its
    last proof that a pod can stop itself; None where the host has no watcher config."""
    config = read_json_dict((cfg.get("program_files") or {}).get("idle_config") or "")
    if config is None:
        return None
    state = read_json_dict(cfg.get("idle_state") or "") or {}
    promise = dict((key, config.get(key)) for key in ("action", "pod_id", "idle_seconds"))
    promise["self_stop"] = state.get("self_stop")
    return promise


def status(cfg):
    """What ``podkit status`` shows of a host, read on the host's own clock: the programs and
    their states, when vLLM started, what it serves and with what context, the idle watcher's last
    reading (in flight, last request, the deadline), and why the server is stopped, if it was
    stopped on purpose."""
    runner = supervisor_state(cfg)
    pid = runner["vllm_pid"]
    served = {"health": None, "models": None, "max_model_len": None}  # type: dict
    if pid:
        host = local_address(cfg["host"])
        base = "http://%s:%d" % ("[%s]" % host if ":" in host else host, cfg["port"])
        served["health"], _ = http_get(base + cfg.get("health_path", "/health"))
        if served["health"] == 200:
            code, body = http_get(base + "/v1/models", read_text(cfg["key_file"]))
            try:
                models = json.loads(body.decode()).get("data", []) if code == 200 else []
            except ValueError:
                models = []
            served["models"] = [m.get("id") for m in models]
            served["max_model_len"] = next((m.get("max_model_len") for m in models if m.get("max_model_len")), None)
    return {
        "podctl": 1,
        "now": time.time(),
        "boot_at": boot_time(),
        "supervisor_pid": runner["pid"],
        "programs": runner["programs"],
        "vllm_pid": pid,
        "vllm_started_at": started_at(pid),
        "crashes": runner["crashes"],
        "served": served,
        "idle": read_json_dict(cfg["idle_state"]),
        "stopped": read_json_dict(cfg["stopped_file"]),
        "wake": read_json_dict(cfg["wake_file"]) if cfg.get("wake_file") else None,
        "plan": read_json_dict(cfg["plan_file"]) if cfg.get("plan_file") else None,
        "startup": startup_lines(cfg.get("log_file"), cfg.get("startup_needles") or []),
        "starts": last_lines_json(cfg.get("starts_file"), 2),
        "startup_plans": startup_plans(cfg.get("startup_plans")),
        "refused": refused_requests(cfg["access_log"]) if cfg.get("access_log") else None,
        **supervision(cfg, runner),
        "server_tail": server_tail(cfg, runner),
    }


def main(argv):
    command, cfg = argv[1], json.loads(argv[2])
    result = {
        "probe": probe,
        "wait": wait,
        "cache": cache,
        "fetch-status": fetch_status,
        "describe": describe,
        "reap": reap,
        "supervise": supervise,
        "status": status,
        "down": down,
        "restore": restore,
        "self-stop": self_stop,
    }[command](cfg)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv)
