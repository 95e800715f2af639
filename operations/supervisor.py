"""Operations for what keeps vLLM and the edge running: supervisord from the venv (the default,
no systemd, no root) or two systemd units (``podkit_supervisor = "systemd"``)."""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation

from podkit.host.hoststate import orphan_line
from podkit.host.idlefiles import self_stop_problem
from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.host.programs import PROGRAMS
from podkit.text import clean


def podctl_answer(host, action: str, cfg: dict) -> dict:
    """Run ``podctl ACTION`` on the host: its JSON answer, ``ok`` false when it failed or printed none."""
    status, output = host.run_shell_command(podctl_command(action, cfg), print_output=False)
    try:
        result = read_answer(action, output.stdout, output.stderr)
    except PodctlError as exc:
        result = {"ok": False, "error": str(exc)}
    return result if status else {**result, "ok": False}


def _supervise(state, host, cfg: dict) -> bool:
    result = podctl_answer(host, "supervise", cfg)
    if not result.get("ok"):
        host.log_styled(
            clean(f"supervisord: {result.get('error')}; see {cfg['supervisord_log']} and re-apply"),
            fg="red",
            log_func=logger.error,
        )
        return False
    for line in result.get("done", []):
        host.log(clean(line))
    return True


@operation(is_idempotent=False)
def programs(
    config: dict,
    running: bool,
    programs: dict[str, str],
    reload: bool = False,
    restart: list[str] = (),
    names: tuple[str, ...] = PROGRAMS,
):
    """
    Ensure supervisord runs vLLM and the edge from the current files, restarting only what changed.

    supervisord (PyPI ``supervisor``, in the venv) is started when it is not running (it
    starts both programs); restarted when its own config changed; otherwise each program
    in ``restart`` is restarted, and a program left stopped (FATAL after its retries) is
    started. Starts do not wait for vLLM: readiness is the next operation.

    + config: podctl's supervise config (``server_config`` plus ``supervisord_log``)
    + running: the probe found this config's supervisord running
    + programs: the probe's ``{program: state}``
    + reload: supervisord.conf changed: stop supervisord and its programs, start it again
    + restart: programs whose files changed (``vllm``, ``edge``, ``idle``)
    + names: the programs the config runs (a router host: ``router``, ``edge``)

    **Example:**

    .. code:: python

        supervisor.programs(
            name="Ensure supervisord runs vLLM, the edge and the idle watcher from the current files",
            config=cfg, running=True, programs={"vllm": "RUNNING", "edge": "RUNNING"}, restart=["vllm"],
        )
    """
    stopped = [name for name in names if programs.get(name) not in ("RUNNING", "STARTING", "BACKOFF")]
    if running and not reload and not restart and not stopped:
        what = "vLLM, the edge and the idle watcher" if names == PROGRAMS else " and ".join(names)
        host.noop(f"supervisord runs {what} from the current files")
        return
    yield FunctionCommand(_supervise, ({**config, "reload": bool(running and reload), "restart": list(restart)},), {})


@operation()
def supervisord_stopped(supervisorctl: str, conf: str, pid: int | None):
    """
    Ensure no supervisord runs (systemd supervises): one left from before holds the ports.

    + supervisorctl: the venv's ``supervisorctl``
    + conf: its ``supervisord.conf``
    + pid: the probe's pid of a supervisord still running (None: nothing to stop)
    """
    if pid is None:
        host.noop("supervisord does not run (systemd supervises)")
        return
    yield (
        f"{shlex.quote(supervisorctl)} -c {shlex.quote(conf)} shutdown >/dev/null"
        f" && timeout 90 sh -c 'while kill -0 {int(pid)} 2>/dev/null; do sleep 0.2; done'"
    )


@operation()
def legacy_runner(runner_script: str, pid: int | None):
    """
    Ensure podkit's own runner (before supervisord) is stopped, with the server it ran: it holds the port.

    + runner_script: its ``bin/runner.sh``
    + pid: the probe's pid of a runner still running (None: nothing to stop)
    """
    if pid is None:
        host.noop("no runner from an older podkit runs")
        return
    yield f"/bin/sh {shlex.quote(runner_script)} stop && rm -f {shlex.quote(runner_script)}"


def _sudo(as_root: bool) -> str:
    return "" if as_root else "sudo -n "


@operation()
def unit(source: str, path: str, current_sha256: str | None, sha256: str, as_root: bool = False):
    """
    Ensure the systemd unit is installed from its copy on the volume, reloading systemd when it changed.

    The copy is written as the SSH user like every other file; only this
    install and ``systemctl daemon-reload`` run with ``sudo -n`` (unless the
    user is root).

    + source: the unit's copy on the volume (already current)
    + path: where systemd reads it, e.g. ``/etc/systemd/system/podkit-vllm.service``
    + current_sha256: the probe's checksum of ``path`` (None: absent)
    + sha256: checksum of the copy's content
    + as_root: the SSH user is root (no sudo)

    **Example:**

    .. code:: python

        supervisor.unit(
            name="Ensure systemd has the current podkit-vllm.service",
            source=paths.unit_copy, path=UNIT_PATH,
            current_sha256=pod.files.get(UNIT_PATH), sha256=files["unit"].sha256,
        )
    """
    if current_sha256 == sha256:
        host.noop(f"{path} is up to date")
        return
    sudo = _sudo(as_root)
    yield f"{sudo}install -m 0644 {shlex.quote(source)} {shlex.quote(path)} && {sudo}systemctl daemon-reload"


@operation()
def unit_service(
    unit: str, enabled: bool, up: bool, restarted: bool = False, present: bool = True, as_root: bool = False
):
    """
    Ensure the systemd unit is enabled and running, restarting it only when asked.

    + unit: the unit's name, e.g. ``podkit-vllm.service``
    + enabled: whether the probe found it enabled (started at boot)
    + up: whether the probe found it active (or starting)
    + restarted: restart it (its files changed)
    + present: False when supervisord supervises instead: stop and disable a unit left from before
    + as_root: the SSH user is root (no sudo)

    **Example:**

    .. code:: python

        supervisor.unit_service(
            name="Ensure podkit-vllm.service serves the current launch script",
            unit="podkit-vllm.service", enabled=True, up=True, restarted=launch.will_change,
        )
    """
    systemctl = f"{_sudo(as_root)}systemctl"
    name = shlex.quote(unit)
    if not present:
        if enabled or up:
            yield f"{systemctl} disable --now {name}"
        else:
            host.noop(f"{unit} is neither enabled nor running (supervisord supervises)")
        return
    commands = [] if enabled else [f"{systemctl} enable {name}"]
    if restarted or not up:
        commands.append(f"{systemctl} restart {name}")
    if not commands:
        host.noop(f"{unit} is enabled and runs from the current files")
        return
    yield " && ".join(commands)


def _reap(state, host, found: list[dict]) -> bool:
    for orphan in found:
        host.log_styled(clean(orphan_line(orphan)), fg="yellow", log_func=logger.warning)
    cfg = {"orphans": [{"pid": o["pid"], "start": o["start"]} for o in found], "timeout": 10}
    status, output = host.run_shell_command(podctl_command("reap", cfg), print_output=False)
    try:
        result = read_answer("reap", output.stdout, output.stderr)
    except PodctlError as exc:
        host.log_styled(
            clean(f"could not stop the orphaned engines and stray programs: {exc}"), fg="red", log_func=logger.error
        )
        return False
    if result["left"]:
        pids = " ".join(str(pid) for pid in result["left"])
        why = "; ".join(f"pid {pid}: {error}" for pid, error in sorted(result["errors"].items())) or "still running"
        host.log_styled(
            clean(
                f"processes {pids} did not stop ({why}); stop them as their owner (kill -9 {pids}) and re-apply: "
                "they hold memory or a port the next start needs, and a stray edge or server the key it started with"
            ),
            fg="red",
            log_func=logger.error,
        )
        return False
    host.log(
        f"stopped {len(result['stopped'])} process(es) left by a killed server or supervisor "
        f"({len(result['killed'])} needed SIGKILL)"
    )
    return True


@operation(is_idempotent=False)
def orphans(found: list[dict]):
    """
    Ensure no vLLM engine outlives its server and no program of podkit runs outside its
    supervisor: stop what the probe found.

    A server killed with SIGKILL (the OOM killer's way) leaves its ``VLLM::EngineCore``
    re-parented to PID 1, holding its memory (GPU memory on a GPU host), so the next
    server would run out of it. The launch script ends its whole process group when vLLM
    ends; this stops what a killed launch script, or an older podkit, left behind.
    A supervisord killed with SIGKILL leaves its programs running re-parented (the launch
    script and vLLM, Caddy, the idle watcher): strays, which would serve beside the next
    supervisord's (Caddy's SO_REUSEPORT lets two edges share the port), each with the key it
    started with. Each is stopped only if it is still that very process (pid and start time),
    with everything under it: SIGTERM, then SIGKILL after 10 s.

    + found: the probe's orphans (``HostState.orphans``)

    **Example:**

    .. code:: python

        supervisor.orphans(name="Ensure no vLLM engine outlives its server", found=pod.orphans)
    """
    if not found:
        host.noop("no vLLM engine outlived its server")
        return
    yield FunctionCommand(_reap, (found,), {})


@operation(is_idempotent=False)
def self_stop(pod_id: str, minutes: float, proof: dict | None, restarted: bool, cfg: dict):
    """
    Ensure a RunPod pod can stop itself when idle: its idle watcher read the pod through RunPod's
    API with the pod's own key (the same ways the stop goes), so the stop is known to work before
    it is needed. A watcher this run restarted proves it again at its start, and this waits for it.

    + pod_id: the pod
    + minutes: the idle stop (podkit_idle_stop_minutes)
    + proof: what the probe read of the watcher's last proof
    + restarted: the watcher (re)started in this run, so the probe's proof is not its own
    + cfg: podctl self-stop's config (``idle_state``, ``pod_id``, ``after``, ``window``)

    **Example:**

    .. code:: python

        supervisor.self_stop(
            name="Ensure pod abc can stop itself after 30 minutes without a request",
            pod_id="abc", minutes=30, proof=pod.self_stop, restarted=False, cfg=cfg,
        )
    """
    if not restarted and proof is not None and self_stop_problem(pod_id, minutes, proof) is None:
        host.noop(f"pod {pod_id} can stop itself: RunPod answered its own key ({proof.get('via')})")
        return
    yield FunctionCommand(_prove_self_stop, (pod_id, minutes, None if restarted else proof, cfg), {})


def _prove_self_stop(state, host, pod_id: str, minutes: float, proof: dict | None, cfg: dict) -> bool:
    if proof is None:  # the watcher proves it at its start: wait for that
        answer = podctl_answer(host, "self-stop", cfg)
        proof = answer.get("self_stop") or {"ok": False, "pod_id": pod_id, "why": answer.get("error")}
    problem = self_stop_problem(pod_id, minutes, proof)
    if problem:
        host.log_styled(clean(problem), fg="red", log_func=logger.error)
        return False
    host.log(f"pod {pod_id} can stop itself: RunPod answered a read of it with its own key ({proof.get('via')})")
    return True
