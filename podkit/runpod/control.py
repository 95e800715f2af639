"""What the controller asks RunPod of the user's pods, each failure one line that names the pod and
the fix: list them, stop one, start one (and say when its GPU is gone), terminate one, and wait
until a pod has an SSH address.

The user's own key (``RUNPOD_API_KEY``) is used here, on the controller; a pod stops itself with
its own pod-scoped key (``podkit/remote/idle/stops.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from podkit.runpod.api import RunPodApi, RunPodError
from podkit.runpod.pods import Pod
from podkit.text import clean

#: What RunPod answers a start when the GPUs of the pod's machine were rented out while it was
#: stopped (v2: 400 ``{"error": "not enough free GPUs on the host machine"}``; GraphQL said the same).
NO_GPUS = ("not enough free gpus", "no longer any instances available", "no gpus available")


class PodsError(RuntimeError):
    """RunPod could not do what was asked; the message is one line with the fix."""


class NoGpu(PodsError):
    """A start refused because the pod's machine has no free GPU for it: the pod must move."""


def account(key: str | None, sleep: Callable[[float], None] = time.sleep) -> RunPodApi:
    """The user's RunPod account, or the line that says how to give the key."""
    if not key:
        raise PodsError("RUNPOD_API_KEY is not set: export your RunPod API key (Settings > API Keys) and re-run")
    return RunPodApi(key, sleep=sleep)


def list_pods(api: RunPodApi) -> list[dict[str, Any]]:
    """Every pod of the account (v2's shape)."""
    try:
        return api.pods()
    except RunPodError as exc:
        raise PodsError(line("cannot list pods from RunPod", exc)) from None


def stop(api: RunPodApi, pod: Pod, name: str) -> Pod:
    """Stop a pod: its GPU goes back to RunPod, billing stops, the volume stays."""
    try:
        return Pod.of(api.action(pod.id, "stop") or {"id": pod.id, "status": "EXITED"})
    except RunPodError as exc:
        raise PodsError(line(f"pod {name} ({pod.id}): RunPod did not stop it", exc)) from None


def start(api: RunPodApi, pod: Pod, name: str, inventory: str = "INVENTORY") -> Pod:
    """Start a stopped pod; a machine whose GPUs were taken meanwhile is a :class:`NoGpu`, with the move."""
    try:
        return Pod.of(api.action(pod.id, "start") or {"id": pod.id, "status": "STARTING"})
    except RunPodError as exc:
        if exc.status in (400, 409, 500) and any(marker in exc.said.lower() for marker in NO_GPUS):
            raise NoGpu(no_gpu_line(pod, name, inventory, exc.said)) from None
        raise PodsError(line(f"pod {name} ({pod.id}): RunPod did not start it", exc)) from None


def no_gpu_line(pod: Pod, name: str, inventory: str, said: str | None = None) -> str:
    """The one line for a pod whose GPU is gone, and the move that brings it back."""
    why = f"RunPod says: {said}" if said else "it came back without its GPU"
    return clean(
        f"pod {name} ({pod.id}) cannot get its GPU back: its machine has no free GPU now ({why}); "
        f"move it to a new pod on the same volume: podkit up {inventory} --host {name} --move"
    )


def terminate(api: RunPodApi, pod_id: str, name: str) -> None:
    """Terminate a pod for good (its network volume stays)."""
    try:
        api.action(pod_id, "terminate")
    except RunPodError as exc:
        if exc.status == 404:  # already gone
            return
        raise PodsError(line(f"pod {name} ({pod_id}): RunPod did not terminate it", exc)) from None


def read(api: RunPodApi, pod_id: str, name: str) -> Pod:
    try:
        return Pod.of(api.pod(pod_id))
    except RunPodError as exc:
        raise PodsError(line(f"pod {name} ({pod_id}): cannot read it from RunPod", exc)) from None


def wait_for_ssh(
    api: RunPodApi,
    pod_id: str,
    name: str,
    seconds: float,
    say: Callable[[str], None] = lambda _line: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    every: float = 2.0,
) -> Pod:
    """Poll the pod until it runs with an SSH address (``ssh.direct``) or ``seconds`` pass."""
    deadline = clock() + seconds
    said = None
    while True:
        pod = read(api, pod_id, name)
        if pod.running and pod.ssh_address() is not None:
            return pod
        if pod.state in ("error", "terminated"):
            raise PodsError(f"pod {name} ({pod_id}) is {pod.state} (RunPod says {pod.status}): look at its logs")
        now = f"{pod.status}" + ("" if pod.state != "running" else ", no SSH address yet")
        if now != said:
            say(f"{name}: RunPod says {now}")
            said = now
        if clock() >= deadline:
            raise PodsError(
                f"pod {name} ({pod_id}) has no SSH address after {seconds:.0f} s (RunPod says {pod.status}): "
                "re-run podkit up, or look at the pod's logs"
            )
        sleep(every)


def line(what: str, exc: RunPodError) -> str:
    """``what`` with RunPod's answer and the fix, on one line."""
    fix = exc.fix()
    return clean(f"{what} ({exc.what}: {exc.answer()})" + (f": {fix}" if fix else ""))
