"""A local server that answers the RunPod GraphQL API from recorded answers.

The ``runpod`` package posts every call to ``$RUNPOD_API_BASE_URL/graphql``
with ``Authorization: Bearer <key>``. Tests point that variable here and
change :attr:`RunPodReplay.pods` between calls to play a pod's life: running,
stopped, back at a new address and port, migrated to a new pod id.

Answered queries (the two the package's ``get_pods``/``get_pod`` send):

- ``query myPods { myself { pods { ... } } }`` -> every pod;
- ``query pod { pod(input: {podId: "ID"}) { ... } }`` -> one pod, or null.

Answered mutations (the package's ``stop_pod``/``resume_pod``, and runpodctl's
``podStop`` with ``$podId`` in ``variables``), which change :attr:`pods`:

- ``podStop(input: {podId: "ID"})`` -> the pod is EXITED, without a runtime;
  then ``on_stop(pod_id)`` is called, after the answer has been sent (a pod may
  be stopping itself, and the hook may end the very process that asked);
- ``podResume(input: {podId: "ID", gpuCount: N})`` -> the pod is RUNNING with
  the runtime ``on_resume(pod_id)`` returns (or the one it had before the stop),
  unless its id is in :attr:`no_gpu`: then RunPod's "not enough free GPUs" error.

REST's ``POST /v1/pods/{id}/stop`` (RunPod's REST API, ``https://rest.runpod.io/v1``, which the
pod's idle watcher asks first: point ``RUNPOD_REST_API_URL`` at ``<url>/v1``) stops the pod the
same way and answers the pod as JSON; :attr:`RunPodReplay.rest_api` False makes it a 404.

Keys: ``api_key`` is the account's and may do everything. ``pod_keys`` maps a
pod id to the pod-scoped key RunPod puts in that pod's environment
(``RUNPOD_API_KEY``); it may read its own pod and stop it, nothing else (a
GraphQL error starting "forbidden"). Any other key gets HTTP 401 (the package
raises ``AuthenticationError``); any other query gets a GraphQL ``errors``
answer (``QueryError``). The key may come as ``Authorization: Bearer`` or as
``?api_key=`` (as the legacy runpodctl sends it). Requests are logged in
:attr:`RunPodReplay.requests` with the kind of key used (``"account"``,
``"pod:<id>"`` or ``None``), never the key, and without the query string.

    with RunPodReplay(api_key="rp-test", pods=load_pods("pods.json")) as api:
        os.environ["RUNPOD_API_BASE_URL"] = api.url
        ...

To be reached from a stand-in pod (testing/netpods.py), listen on its gateway:
``RunPodReplay(..., host=pod.gateway)`` once the pod's namespace exists, or on
``"0.0.0.0"``; the pod then uses ``http://<gateway>:<api.port>``.
"""

from __future__ import annotations

import copy
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: RunPod's answer to a resume when the GPUs of the pod's machine are rented out meanwhile,
#: as runpod-python shows it (``QueryError``) in https://github.com/runpod/runpod-python/issues/168
#: (2023-10-11): the pod is tied to its machine, so it can only come back as a migrated pod.
NO_FREE_GPUS = "There are not enough free GPUs on the host machine to start this pod."

#: How long after a stop's answer is sent ``on_stop`` runs: long enough for the caller to
#: read the answer and report it, as a real pod's processes outlive the API call by seconds.
STOP_HOOK_DELAY_S = 0.2


def load_pods(path: str | Path) -> list[dict[str, Any]]:
    """Pods from a recorded ``myPods`` answer (the whole GraphQL response) or a bare list."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = data["data"]["myself"]["pods"]
    return data


def running_pod(
    pod_id: str,
    name: str,
    ip: str,
    ssh_port: int,
    volume_path: str,
    served_port: int = 8000,
    cost_per_hr: float = 0.79,
    gpu: str = "RTX A6000",
    uptime_seconds: int = 36000,
) -> dict[str, Any]:
    """A ``get_pods()`` entry for a running pod with 22/tcp and ``served_port``/tcp on a public IP
    (the served port mapped to itself). Its ``env`` holds a token made now, which must never be printed."""
    return {
        "id": pod_id,
        "name": name,
        "desiredStatus": "RUNNING",
        "gpuCount": 1,
        "costPerHr": cost_per_hr,
        "uptimeSeconds": uptime_seconds,
        # as RunPod words a running pod's last start (its text changes at every stop and start)
        "lastStatusChange": f"Rented by User: {_js_date(time.time() - uptime_seconds)}",
        "volumeMountPath": str(volume_path),
        "env": [f"HF_TOKEN=hf_{secrets.token_urlsafe(24)}"],
        "machine": {"gpuDisplayName": gpu},
        "ports": f"{served_port}/tcp,22/tcp",
        "runtime": {
            "ports": [
                {"ip": ip, "isIpPublic": True, "privatePort": 22, "publicPort": ssh_port, "type": "tcp"},
                {"ip": ip, "isIpPublic": True, "privatePort": served_port, "publicPort": served_port, "type": "tcp"},
            ]
        },
    }


class RunPodReplay:
    """The RunPod GraphQL API on ``host`` (an ephemeral port) for the pods in :attr:`pods`.

    + api_key: the account's key; may do everything
    + pods: ``get_pods()`` entries (see :func:`running_pod`); tests may replace the list between calls;
      a stop or a resume changes its pod's entry in place
    + host: the address to listen on; a pod in a network namespace needs its gateway or ``0.0.0.0``
    + pod_keys: pod id -> that pod's own key, which may only read and stop that pod
    + on_stop: ``on_stop(pod_id)``, called once a stop has been answered (e.g. end the stand-in pod)
    + on_resume: ``on_resume(pod_id) -> runtime`` (``{"ports": [...]}`` as in :func:`running_pod`;
      None: still starting, as RunPod shows a pod before its container runs), called before a
      resume is answered (e.g. start the stand-in pod again); without it the pod gets back the
      runtime it had before the stop
    + no_gpu: ids of stopped pods whose machine has no free GPU left: resuming them fails

    **Example:**

    .. code:: python

        replay = RunPodReplay(api_key="rp-account", pods=[pod], host=netns_pod.gateway,
                              pod_keys={"pod1": "rp-pod1"}, on_stop=lambda pod_id: netns_pod.stop())
    """

    def __init__(
        self,
        api_key: str,
        pods: list[dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        pod_keys: dict[str, str] | None = None,
        on_stop: Callable[[str], None] | None = None,
        on_resume: Callable[[str], dict[str, Any]] | None = None,
        no_gpu: set[str] | None = None,
    ) -> None:
        self.api_key = api_key
        self.pods = pods or []
        self.pod_keys = dict(pod_keys or {})
        self.on_stop = on_stop
        self.on_resume = on_resume
        self.no_gpu = set(no_gpu or ())
        #: whether REST's ``POST /v1/pods/{id}/stop`` is answered (False: 404, as an API without it)
        self.rest_api = True
        self.requests: list[dict[str, Any]] = []
        #: one line per hook that raised: "on_stop(ID): ValueError: ..."
        self.hook_errors: list[str] = []
        self._runtimes: dict[str, Any] = {}  # pod id -> its runtime before the last stop
        self._lock = threading.Lock()
        self._hooks = threading.Condition()
        self._hooks_pending = 0
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: tests read .requests instead
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                later: list[Callable[[], None]] = []
                status, answer = replay.answer(self.path, self.headers.get("Authorization", ""), body, later)
                payload = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    self.wfile.flush()
                finally:  # the answer is out (or the caller gone): now the hook may end the caller
                    for hook in later:
                        timer = threading.Timer(STOP_HOOK_DELAY_S, hook)
                        timer.daemon = True
                        timer.start()

        self.server = ThreadingHTTPServer((host, 0), Handler)
        # a short poll: stop() returns within 50 ms instead of serve_forever's default 0.5 s
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def answer(
        self, path: str, authorization: str, body: bytes, later: list[Callable[[], None]] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON answer to one POST. Hooks that must run after the answer
        is sent are appended to ``later``; without a list they run here, before returning."""
        parts = urlsplit(path)
        try:
            request = json.loads(body or b"{}")
            query, variables = request.get("query", ""), request.get("variables") or {}
        except (ValueError, AttributeError):
            query, variables = None, {}
        if not isinstance(variables, dict):
            variables = {}
        authorization = authorization or "Bearer " + parse_qs(parts.query).get("api_key", [""])[0]
        caller = self._caller(authorization)
        with self._lock:
            self.requests.append({"path": parts.path, "query": query, "key": caller})
        rest = re.fullmatch(r"/v1/pods/([^/]+)/stop", parts.path.rstrip("/"))
        if rest is not None and self.rest_api:
            return self._rest_stop(rest.group(1), caller, later)
        if parts.path.rstrip("/") != "/graphql":
            return 404, {"errors": [{"message": f"no such path {parts.path}"}]}
        if caller is None:
            return 401, {"error": "Unauthorized"}
        if not isinstance(query, str):
            return 400, {"errors": [{"message": "body must be JSON with a 'query'"}]}
        own = caller.split(":", 1)[1] if caller.startswith("pod:") else None
        pod_id = _argument(query, "podId", variables)
        if re.search(r"\bpodStop\s*\(", query):
            if own is not None and pod_id != own:
                return _forbidden(own)
            status, answer, hook = self._stop(pod_id)
            if hook is not None:
                if later is None:
                    hook()
                else:
                    later.append(hook)
            return status, answer
        if re.search(r"\bpodResume\s*\(", query):
            if own is not None:
                return _forbidden(own)
            return self._resume(pod_id, _argument(query, "gpuCount", variables))
        with self._lock:
            pods = copy.deepcopy(self.pods)
        if re.search(r"\bmyself\s*\{\s*pods\b", query):
            return 200, {"data": {"myself": {"pods": [pod for pod in pods if own in (None, pod.get("id"))]}}}
        if re.search(r"\bpod\s*\(\s*input\b", query):
            if own is not None and pod_id != own:
                return _forbidden(own)
            return 200, {"data": {"pod": next((pod for pod in pods if pod.get("id") == pod_id), None)}}
        if own is not None:
            return _forbidden(own)
        return 200, {"errors": [{"message": "this replay server answers only the pod queries, podStop and podResume"}]}

    def _rest_stop(
        self, pod_id: str, caller: str | None, later: list[Callable[[], None]] | None
    ) -> tuple[int, dict[str, Any]]:
        """REST's ``POST /pods/{id}/stop``: the pod's own key or the account's; the pod as JSON."""
        if caller is None:
            return 401, {"error": "Unauthorized"}
        if caller.startswith("pod:") and caller != f"pod:{pod_id}":
            return 403, {"error": f"forbidden: this API key belongs to {caller} and may only read and stop that pod"}
        status, answer, hook = self._stop(pod_id)
        if "errors" in answer:
            return 404, {"error": answer["errors"][0]["message"]}
        if hook is not None and later is not None:
            later.append(hook)
        elif hook is not None:
            hook()
        return 200, answer["data"]["podStop"]

    def _caller(self, authorization: str) -> str | None:
        """``"account"``, ``"pod:<id>"`` or None: whose key signed the request."""
        key = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""
        if key and hmac.compare_digest(key, self.api_key):
            return "account"
        for pod_id, pod_key in self.pod_keys.items():
            if key and pod_key and hmac.compare_digest(key, pod_key):
                return f"pod:{pod_id}"
        return None

    def _pod(self, pod_id: str | None) -> dict[str, Any] | None:
        return next((pod for pod in self.pods if pod_id is not None and pod.get("id") == pod_id), None)

    def _stop(self, pod_id: str | None) -> tuple[int, dict[str, Any], Callable[[], None] | None]:
        """Stop the pod (a pod already stopped stays so, and its hook does not run again)."""
        with self._lock:
            pod = self._pod(pod_id)
            if pod is None:
                return 200, _error(f"pod {pod_id} not found"), None
            was_running = pod.get("desiredStatus") != "EXITED"
            if was_running:
                if pod.get("runtime"):
                    self._runtimes[pod_id] = copy.deepcopy(pod["runtime"])
                pod.update(desiredStatus="EXITED", runtime=None, uptimeSeconds=0)
                pod["lastStatusChange"] = f"Exited by user: {_js_date()}"
            answer = {k: pod.get(k) for k in ("id", "desiredStatus", "lastStatusChange")}
        hook = None
        if was_running and self.on_stop is not None:
            hook = self._guarded("on_stop", self.on_stop, pod_id)
        return 200, {"data": {"podStop": answer}}, hook

    def _resume(self, pod_id: str | None, gpu_count: str | None) -> tuple[int, dict[str, Any]]:
        """Resume a stopped pod with the runtime ``on_resume`` gives (or its last one)."""
        with self._lock:
            pod = self._pod(pod_id)
            if pod is None:
                return 200, _error(f"pod {pod_id} not found")
            if pod.get("desiredStatus") == "RUNNING":
                # What RunPod answers here is not on record; the replay refuses, as a resume
                # that changes nothing would hide a controller resuming a pod it thinks stopped.
                return 200, _error(f"pod {pod_id} is already running")
            if pod_id in self.no_gpu:
                return 200, _error(NO_FREE_GPUS)
        runtime = self._runtimes.get(pod_id)
        if self.on_resume is not None:
            try:
                runtime = self.on_resume(pod_id)
            except Exception as exc:  # the API answers; the test reads hook_errors
                self.hook_errors.append(f"on_resume({pod_id}): {type(exc).__name__}: {exc}")
                # RunPod's catch-all answer (runpod/runpod-python#239, runpod/runpodctl#45)
                return 200, _error("Something went wrong. Please try again later or contact support.")
        with self._lock:
            pod = self._pod(pod_id) or {}
            pod.update(desiredStatus="RUNNING", runtime=copy.deepcopy(runtime), uptimeSeconds=0)
            pod["lastStatusChange"] = f"Rented by User: {_js_date()}"
            if gpu_count is not None and gpu_count.isdigit():
                pod["gpuCount"] = int(gpu_count)
            answer = {
                "id": pod_id,
                "desiredStatus": "RUNNING",
                "imageName": pod.get("imageName", "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"),
                "env": copy.deepcopy(pod.get("env", [])),
                "machineId": pod.get("machineId", f"m-{pod_id}"),
                "machine": {"podHostId": f"{pod_id}-{secrets.token_hex(4)}"},
            }
        return 200, {"data": {"podResume": answer}}

    def wait_for_hooks(self, timeout: float = 10.0) -> bool:
        """Wait until every ``on_stop`` scheduled so far has returned; False if one still runs after
        ``timeout`` seconds. Call it before starting a stopped stand-in pod again, so that its stop
        cannot reach the processes of the new start."""
        with self._hooks:
            return self._hooks.wait_for(lambda: self._hooks_pending == 0, timeout)

    def _guarded(self, name: str, hook: Callable[[str], Any], pod_id: str) -> Callable[[], None]:
        with self._hooks:
            self._hooks_pending += 1

        def run() -> None:
            try:
                hook(pod_id)
            except Exception as exc:  # a hook runs on a timer thread: keep its failure for the test
                self.hook_errors.append(f"{name}({pod_id}): {type(exc).__name__}: {exc}")
            finally:
                with self._hooks:
                    self._hooks_pending -= 1
                    self._hooks.notify_all()

        return run

    def start(self) -> RunPodReplay:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> RunPodReplay:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _argument(query: str, name: str, variables: dict[str, Any]) -> str | None:
    """The value of ``name: "literal"``, ``name: 3`` or ``name: $var`` (from ``variables``) in ``query``."""
    match = re.search(rf'\b{name}\s*:\s*(?:"([^"]*)"|(\d+)|\$(\w+))', query)
    if match is None:
        return None
    if match.group(3) is not None:
        value = variables.get(match.group(3))
        return None if value is None else str(value)
    return match.group(1) if match.group(1) is not None else match.group(2)


def _error(message: str) -> dict[str, Any]:
    return {"errors": [{"message": message}]}


def _forbidden(own: str) -> tuple[int, dict[str, Any]]:
    # RunPod's own wording for a pod-scoped key out of its scope is not on record.
    return 200, _error(f"forbidden: this API key belongs to pod {own} and may only read and stop that pod")


def _js_date(epoch: float | None = None) -> str:
    """A time as RunPod's lastStatusChange writes it (JavaScript's Date.toString() in UTC), e.g.
    "Exited by user: Wed Apr 08 2026 19:14:57 GMT+0000 (Coordinated Universal Time)" as clients of
    the live API quote it; a resume reads "Rented by User: ..."."""
    return time.strftime("%a %b %d %Y %H:%M:%S GMT+0000 (Coordinated Universal Time)", time.gmtime(epoch))
