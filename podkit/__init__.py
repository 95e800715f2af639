"""podkit: pure logic for turning an SSH-reachable GPU box into a verified vLLM endpoint.

Subpackages, each named for its job; none imports pyinfra or click (the pyinfra
operations in ``operations/`` and the CLI in ``podkit_cli/`` call into them,
never the reverse):

    settings, checks every setting declared once, and the checks its data pass
    keys             the API key and HF token files
    host/            what runs against one host: the probe, preflight, rendering,
                     install, fetch, and in start/ one vLLM start (its launch
                     check, readiness, diagnosis, rollback, profile and phases)
    plan/            GPU table, memory model, checkpoints, model families, the host plan
    client/          what a client of the endpoint does: targets, verify, status, bench, eval
    runpod/          RunPod pods and their SSH host keys
    remote/          programs shipped to the host and run there (podctl, fetch)
    sandbox/         the local sandbox pod: private sshd, tiny model
"""

__version__ = "0.2.0"

import os
from pathlib import Path


def _find_project_root() -> Path:
    """The podkit project (the folder with deploy.py and group_data/) that this process works in:
    $PODKIT_PROJECT_ROOT, else the working directory or its nearest parent holding one, else the
    checkout this package sits in, else the working directory."""
    if os.environ.get("PODKIT_PROJECT_ROOT"):
        return Path(os.environ["PODKIT_PROJECT_ROOT"]).resolve()

    def is_project(folder: Path) -> bool:
        return (folder / "deploy.py").is_file() and (folder / "group_data").is_dir()

    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if is_project(folder):
            return folder
    checkout = Path(__file__).resolve().parent.parent
    return checkout if is_project(checkout) else cwd


PROJECT_ROOT = _find_project_root()


def project_path(path: str) -> Path:
    """A path from the settings: absolute as given, relative ones from the project root."""
    return Path(path) if Path(path).is_absolute() else PROJECT_ROOT / path


def state_dir() -> Path:
    """The controller's state folder (pinned SSH host keys, edge CA certificates): ``.podkit/`` in
    the project (git-ignored) unless ``$PODKIT_STATE_DIR`` says otherwise."""
    return Path(os.environ.get("PODKIT_STATE_DIR") or PROJECT_ROOT / ".podkit")
