"""Converge a host into a serving, verified vLLM endpoint.

    pyinfra -y inventories/sandbox.py deploy.py      # the local sandbox pod
    pyinfra -y inventories/mine.py deploy.py         # your own hosts (an inventory you write)

Reads top to bottom in the order a host converges: read the host (one remote
command), plan and preflight, the volume, vLLM, caches, key, checkpoint, launch
script, runner (or systemd unit), readiness. On a converged host every operation
reports "No changes" and the run costs one remote command.

Everything runs as the SSH user. A non-root user needs sudo for two things only:
making the volume root theirs when it is missing or root's, and, with
``podkit_supervisor = "systemd"``, installing the unit and running systemctl.
"""

import os

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from operations import checkpoint, facts, interrupt, preflight, runner, vllm, volume
from podkit import project_path
from podkit.host.preflight import choose_vllm, host_problems
from podkit.host.probe import Unit
from podkit.host.render import host_files
from podkit.keys import ApiKeyError, ensure_key, file_content, key_digest, read_hf_token
from podkit.plan.checkpoints import from_hub
from podkit.plan.hostplan import plan_host
from podkit.settings import UNIT_NAME, UNIT_PATH, Settings, SettingsError

try:  # all of the host's data, so a misspelt podkit_/vllm_ key is refused, not ignored
    settings = Settings.from_mapping(host.data.dict())
except SettingsError as bad:  # before any remote command: say which datum and how to fix it
    raise DeployError(f"{host.name}: {bad}") from None
paths = settings.paths
try:  # the controller's key and HF token, before any remote command: a bad file or variable is one line
    key = ensure_key(project_path(settings.api_key_file))
    hf_token = read_hf_token(project_path(settings.hf_token_file))
except ApiKeyError as bad:
    raise DeployError(f"{host.name}: {bad}") from None

# 1. Read the host (GPUs, volume, installed vLLM, managed files and their modes, runner, server,
#    orphaned engines) and take its deploy lock, in one command. Ctrl-C exits non-zero, saying what is left.
interrupt.exit_nonzero_on_interrupt()
pod = facts.pod_state(settings)
package, found = choose_vllm(settings, pod)

# Plan before spending: checkpoint (FP8 if it helps), context, TP, parsers, disk.
launch = plan_host(settings, pod, prefer_fp8=settings.prefer_fp8, resolve=lambda m: from_hub(m, token=hf_token))
preflight.checks(
    name="Ensure the model, its context and its download fit this host before anything is installed",
    problems=pod.lock_problems() + host_problems(settings, pod, needs_install=found is None) + launch.problems,
    summary="; ".join(filter(None, [launch.summary(), pod.lock_note()])),
)

# 2. The volume (made the SSH user's with sudo if it is missing or root's), its folders, and vLLM
#    (the system's if it matches, else a venv on the volume).
volume.root(
    name=f"Ensure {settings.volume} exists and {pod.user or 'the SSH user'} can write it",
    path=settings.volume,
    user=pod.user or "root",
    group=pod.group or "root",
    writable=pod.volume_writable,
)
volume.directories(
    name=f"Ensure podkit's folders exist on {settings.volume}, each with its mode and owner",
    paths=paths.directories(),
    present=pod.dirs,
    modes=pod.modes,
    owner=pod.owner,
)
installed = vllm.venv(
    name=f"Ensure {package} is installed ({paths.venv} unless the system has it), with no package that breaks it",
    package=package,
    paths=paths,
    found=found,
    venv_python_ok=pod.venv.python_ok,
)
files = host_files(
    settings,
    package=package,
    vllm_bin=found.vllm_bin if found else f"{paths.venv}/bin/vllm",
    launch=launch,
    user=pod.user,
    group=pod.group,
)


def managed(name, role):
    rendered = files[role]
    return volume.file(
        name=name,
        path=rendered.path,
        content=rendered.content,
        mode=rendered.mode,
        current_sha256=pod.files.get(rendered.path),
        sha256=rendered.sha256,
        current=pod.modes.get(rendered.path),
        owner=pod.owner,
    )


# 3. Every cache on the volume, through one env file the launch script sources.
managed("Ensure the env file puts every cache on the volume", "env")

# 4. One API key: the controller's file is the source (read above); the host gets a 0600 copy.
volume.secret(
    name="Ensure the host's API key matches the controller's, mode 0600",
    path=paths.api_key,
    what="API key",
    content=file_content(key),
    current_sha256=pod.files.get(paths.api_key),
    sha256=key_digest(key),
    current=pod.modes.get(paths.api_key),
    owner=pod.owner,
)

# 5. The checkpoint: a clean hub cache, then the planned snapshot in it (fetched on the host).
if hf_token:
    volume.secret(
        name="Ensure the host's Hugging Face token matches the controller's, mode 0600",
        path=paths.hf_token,
        what="Hugging Face token",
        content=file_content(hf_token),
        current_sha256=pod.files.get(paths.hf_token),
        sha256=key_digest(hf_token),
        current=pod.modes.get(paths.hf_token),
        owner=pod.owner,
    )
checkpoint.cache_clean(
    name="Ensure the hub cache holds no partial downloads, stale locks or broken links",
    paths=paths,
    problems=pod.cache_problems,
    fetch_running=pod.fetch_running,
)
if launch.fetch:
    checkpoint.fetched(
        name=f"Ensure {launch.fetch.repo}@{launch.fetch.revision[:12]} is complete on the volume",
        spec=launch.fetch,
        paths=paths,
        python=found.python if found else f"{paths.venv}/bin/python",
        endpoint=os.environ.get("HF_ENDPOINT"),
        deadline=settings.fetch_timeout,
        complete=launch.fetched,
        running=pod.fetch_running,
        note=(pod.checkpoint or {}).get("ignored"),
    )

# 6. The launch script and 7. what keeps it serving: the runner, or a systemd unit (podkit_supervisor).
served = f"{launch.fetch.repo}@{launch.fetch.revision[:12]}" if launch.fetch else launch.model
managed(f"Ensure the launch script serves {served} as {settings.served_model_name}", "launch")
systemd, unit = settings.supervisor == "systemd", pod.unit or Unit(UNIT_NAME)
if systemd:
    managed(f"Ensure the volume holds the current {UNIT_NAME}", "unit")
    supervisor = runner.unit(
        name=f"Ensure systemd has the current {UNIT_NAME} (daemon-reload when it changed)",
        source=paths.unit_copy,
        path=UNIT_PATH,
        current_sha256=pod.files.get(UNIT_PATH),
        sha256=files["unit"].sha256,
        as_root=pod.root,
    )
else:
    supervisor = managed("Ensure the runner script is current", "runner")
# Restart when what the server reads changes (content: a mode put back changes nothing), or it runs older files.
sums = {f.path: f.sha256 for role, f in files.items() if role != "unit"} | {paths.api_key: key_digest(key)}
restart = (
    any(pod.files.get(path) != sha for path, sha in sums.items())
    or (systemd and supervisor.will_change)
    or installed.will_change
    or not pod.serving_current_files()
)
runner.orphans(name="Ensure no vLLM engine outlives its server (stopped before any start)", found=pod.orphans)
# One supervisor at a time: the one not chosen lets go of the server (and its port) first.
if unit.present and not systemd:
    runner.unit_service(
        name=f"Ensure {UNIT_NAME} is stopped and disabled (the runner supervises vLLM)",
        unit=UNIT_NAME,
        enabled=unit.is_enabled,
        up=unit.up,
        present=False,
        as_root=pod.root,
    )
runner.service(
    name="Ensure podkit's runner is stopped (systemd supervises vLLM)"
    if systemd
    else "Ensure the runner supervises vLLM with the current files",
    runner_script=paths.runner_script,
    running=pod.runner_pid is not None,
    restarted=restart,
    present=not systemd,
)
if systemd:
    runner.unit_service(
        name=f"Ensure {UNIT_NAME} is enabled and serves vLLM with the current files",
        unit=UNIT_NAME,
        enabled=unit.is_enabled,
        up=unit.up,
        restarted=restart,
        as_root=pod.root,
    )

# 8. Readiness: /health answers and /v1/models lists the served model, with the key.
vllm.endpoint(
    name=f"Ensure vLLM on port {settings.port} answers and lists {settings.served_model_name}",
    settings=settings,
    ready=pod.ready(settings.served_model_name) and pod.supervised(settings.supervisor) and not restart,
)
