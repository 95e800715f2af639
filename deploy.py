"""Converge a host into a serving, verified vLLM endpoint.

    pyinfra -y inventories/sandbox.py deploy.py      # the local sandbox pod
    pyinfra -y inventories/mine.py deploy.py         # your own hosts (an inventory you write)

Reads top to bottom in the order a host converges: read the host (one remote
command), plan and preflight, vLLM, caches, key, launch script, runner, readiness. On a
converged host every operation reports "No changes" and the run costs one
remote command.
"""

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from operations import facts, preflight, runner, vllm, volume
from podkit import project_path
from podkit.config import KEYS, Settings, SettingsError
from podkit.hostplan import plan_host
from podkit.hoststate import choose_vllm, host_problems
from podkit.render import host_files
from podkit.secrets import ensure_key, file_content, key_digest

_UNSET = object()
try:
    settings = Settings.from_mapping(
        {key: value for key in KEYS if (value := host.data.get(key, _UNSET)) is not _UNSET}
    )
except SettingsError as bad:  # before any remote command: say which datum and how to fix it
    raise DeployError(f"{host.name}: {bad}") from None
paths = settings.paths

# 1. Read the host: GPUs, volume, installed vLLM, managed files, runner, server.
pod = facts.pod_state(settings)
package, found = choose_vllm(settings, pod)

# Plan before spending: checkpoint (FP8 if it helps), context, TP, parsers, disk.
launch = plan_host(settings, pod, prefer_fp8=settings.prefer_fp8)
preflight.checks(
    name="Ensure the model, its context and its download fit this host before anything is installed",
    problems=host_problems(settings, pod, needs_install=found is None) + launch.problems,
    summary=launch.summary(),
)

# 2. The folders on the volume, and vLLM (the system's if it matches, else a venv on the volume).
volume.directories(
    name=f"Ensure podkit's folders exist on {settings.volume}",
    paths=paths.directories(),
    present=pod.dirs,
)
vllm.venv(
    name=f"Ensure {package} is installed ({paths.venv} unless the system has it)",
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
    )


# 3. Every cache on the volume, through one env file the launch script sources.
env = managed("Ensure the env file puts every cache on the volume", "env")

# 4. One API key: the controller's file is the source; the host gets a 0600 copy.
key = ensure_key(project_path(settings.api_key_file))
secret = volume.secret(
    name="Ensure the host's API key matches the controller's",
    path=paths.api_key,
    content=file_content(key),
    current_sha256=pod.files.get(paths.api_key),
    sha256=key_digest(key),
)

# 5. The launch script and 6. the runner that keeps it serving.
script = managed(f"Ensure the launch script serves {launch.model} as {settings.served_model_name}", "launch")
runner_file = managed("Ensure the runner script is current", "runner")
restart = any(op.will_change for op in (env, secret, script, runner_file)) or not pod.serving_current_files()
runner.service(
    name="Ensure the runner supervises vLLM with the current files",
    runner_script=paths.runner_script,
    running=pod.runner_pid is not None,
    restarted=restart,
)

# 7. Readiness: /health answers and /v1/models lists the served model, with the key.
vllm.endpoint(
    name=f"Ensure vLLM on port {settings.port} answers and lists {settings.served_model_name}",
    settings=settings,
    ready=pod.ready(settings.served_model_name) and pod.runner_pid is not None and not restart,
)
