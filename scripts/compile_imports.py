"""Byte-compile what every pyinfra run and podkit command imports: their packages in the venv, and
this project's own code. Run by scripts/setup.sh after its pip install (``--no-compile``).

Python compiles a module when it first imports it and keeps the bytecode beside it, unless the
environment sets PYTHONDONTWRITEBYTECODE (some do, for every process) or the process turns writing
off itself, as pyinfra's CLI does before it loads the inventory and the deploy: then every run
compiles the same sources again. A converged re-apply cost 1.1 CPU-seconds that way on the
sandbox, 0.6 with the bytecode kept (``benchmarks/converge.py --profile``, docs/measured.md).
py_compile writes the bytecode whatever the environment says.
"""

from __future__ import annotations

import compileall
import importlib
import os
import re
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where the deploy and the commands start: their imports at start, and their packages whole (a
#: command imports the rest of its package when it runs).
ENTRIES = (
    "pyinfra_cli.main",
    "pyinfra_cli.cli",
    "pyinfra_cli.inventory",
    "roles.server",
    "roles.router",
    "podkit_cli",
    "podkit.client.verify",
    "huggingface_hub",
    "httpx",
)
PROJECT = ("podkit", "podkit_cli", "operations", "roles", "group_data", "inventories", "testing")
#: The eval tasks' workspaces are fixtures the model edits, copied before they run: not compiled here.
TASKS = re.compile(r"[/\\]eval[/\\]tasks[/\\]")


def packages() -> list[str]:
    """The venv's top-level packages and modules that the entries import."""
    import gevent.monkey

    gevent.monkey.patch_all = lambda *args, **kwargs: None  # pyinfra_cli patches the process: not here
    sys.path.insert(0, str(ROOT))
    for name in ENTRIES:
        importlib.import_module(name)
    site = Path(sysconfig.get_paths()["purelib"])
    found = set()
    for module in list(sys.modules.values()):
        path = Path(getattr(module, "__file__", None) or "/")
        if site in path.parents and path.suffix == ".py":
            found.add(site / path.relative_to(site).parts[0])
    return sorted(map(str, found))


def main() -> int:
    """Every package and folder compiled; a file that does not compile (a package's fixture of
    another Python's syntax) is left to Python, as it would be anyway."""
    for target in packages() + [str(ROOT / name) for name in PROJECT]:
        if os.path.isdir(target):
            compileall.compile_dir(target, quiet=2, workers=0, rx=TASKS)
        else:
            compileall.compile_file(target, quiet=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
