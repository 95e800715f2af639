"""What every part reads with: files and JSON, a process's start time, a local HTTP request."""

import hashlib
import json
import os
import ssl
import urllib.error
import urllib.request


def sha256_of(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def starttime(pid):
    """The start time of a live ``pid``; None when it is gone or a zombie.

    A supervisor killed by a pod stop, or a server whose supervisor died, is
    re-parented to PID 1, which in many containers never reaps: its /proc
    entry, start time included, stays until the container ends.
    """
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def pid_alive(pid_text):
    """The pid in a runner pid file ("PID STARTTIME") if that very process still runs."""
    try:
        pid, start = (pid_text or "").split()
        pid = int(pid)
    except ValueError:
        return None
    return pid if starttime(pid) == start else None


def local_address(host):
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


_OPENER = []  # type: list[urllib.request.OpenerDirector]


def loopback_opener():
    """The one opener of this process: no proxy, and for the edge's own TLS a context that checks no
    certificate (loopback only, and never with the key over TLS). Made once, without loading the
    system's CA store: that costs about 20 ms of CPU, and readiness asks several URLs a second."""
    if not _OPENER:
        insecure = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        handlers = [urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=insecure)]
        _OPENER.append(urllib.request.build_opener(*handlers))
    return _OPENER[0]


def http_get(url, key=None, timeout=2.0):
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with loopback_opener().open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (OSError, ValueError):
        return None, b""


def log_lines(path, count):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-count:]


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_json_dict(path):
    """The JSON object in ``path``, or None (missing, empty, unreadable, not an object)."""
    data = read_json(path)
    return data if isinstance(data, dict) else None


def write_atomically(path, text):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def process_argv(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except (OSError, TypeError):
        return None


def boot_time():
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def started_at(pid):
    """When live ``pid`` started, in seconds since the epoch (None when gone or unknown)."""
    ticks, boot = starttime(pid) if pid else None, boot_time()
    if ticks is None or boot is None:
        return None
    return boot + int(ticks) / float(os.sysconf("SC_CLK_TCK"))


def last_lines_json(path, count):
    """The last ``count`` JSON lines of ``path`` (older first); [] when there is none."""
    try:
        with open(path or "") as handle:
            return [json.loads(line) for line in handle.read().splitlines()[-count:] if line.strip()]
    except (OSError, ValueError):
        return []
