"""The watcher's config checked at start: every number finite and in range, the paths and the action,
one line for what is wrong (the deploy runs the same check before it writes one).
"""

import math

# The longest idle time and poll the watcher takes: a year (a larger one is a mistake, and an
# overflow waiting to happen in time.sleep or a deadline).
LONGEST_SECONDS = 366 * 24 * 3600


def _number(cfg, key, least, most, zero=True):
    """Why ``cfg[key]`` is not a finite number in [least, most] (``zero``: 0 allowed), or None."""
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "%s must be a number (got %s)" % (key, repr(value)[:60])
    if not math.isfinite(value) or value < least or value > most or (not zero and value == 0):
        return "%s must be a finite number from %s to %s%s (got %s)" % (
            key,
            least,
            most,
            "" if zero else ", not 0",
            "%.6g" % value,
        )
    return None


def config_problem(cfg):
    """Why the watcher cannot run with ``cfg`` (one line naming the key), or None: checked at its
    start, before it promises anything, and by the deploy before it writes the file."""
    if not isinstance(cfg, dict):
        return "the config is not a JSON object"
    for key in ("state_file", "stopped_file"):
        if not isinstance(cfg.get(key), str) or not cfg.get(key):
            return "%s must be a file path (got %r)" % (key, cfg.get(key))
    problem = _number(cfg, "idle_seconds", 0, LONGEST_SECONDS) or _number(cfg, "poll_seconds", 0.1, 3600, zero=False)
    for key in ("retry_seconds", "self_stop_check_seconds"):
        if problem is None and cfg.get(key) is not None:
            problem = _number(cfg, key, 1, LONGEST_SECONDS)
    if problem is None and cfg.get("usd_per_hour") is not None:
        problem = _number(cfg, "usd_per_hour", 0, 1000000)
    if problem:
        return problem
    if cfg.get("action") not in ("runpod", "server"):
        return "action must be runpod or server (got %r)" % (cfg.get("action"),)
    follow = cfg.get("follow")
    if follow is not None:
        port = follow.get("port") if isinstance(follow, dict) else None
        if (
            not isinstance(follow, dict)
            or not follow.get("address")
            or isinstance(port, bool)
            or not isinstance(port, int)
        ):
            return "follow must name the head's address and port (got %r)" % (follow,)
    elif not isinstance(cfg.get("metrics_url"), str) or not cfg["metrics_url"].startswith("http"):
        return "metrics_url must be vLLM's http:// metrics address (got %r)" % (cfg.get("metrics_url"),)
    if cfg.get("action") == "server":
        if cfg.get("supervisor") == "systemd":
            if not cfg.get("unit"):
                return "unit must name vLLM's systemd unit"
        elif not cfg.get("supervisorctl") or not cfg.get("supervisord_conf"):
            return "supervisorctl and supervisord_conf must name supervisord's control program and config"
    return None
