"""A local server that plays RunPod's REST API v2 for podkit's tests, built from RunPod's own
OpenAPI document (the parts podkit uses: ``testing/runpod_spec.py``).

What it answers, as the document and RunPod's newer clients say:

- ``GET /v2/pods``: every pod, newest first; with :attr:`RunPodReplay.page_size` set, in pages of
  at most that many (fewer than a client asks for) with ``pagination.nextCursor``; without it, one
  answer with no ``pagination`` (the August document). A cursor it did not give is 422.
- ``GET /v2/pods/{id}``, ``DELETE /v2/pods/{id}`` (204), ``POST /v2/pods/{id}/action`` with
  ``start``, ``stop``, ``restart`` or ``terminate`` (204): an action the pod's status does not
  allow is 409; a start of a pod in :attr:`no_gpu` is the 400 ``{"error": "not enough free GPUs on
  the host machine"}`` seen live (the one answer the document does not describe; the request log
  marks it), and the pod stays EXITED; a pod in :attr:`gpu_lost` starts without its GPU.
- ``POST /v2/pods`` (201, PROVISIONING until ``on_create`` gives it an address), the network
  volumes, the GPU catalog with stock per data center, the account's SSH keys, pod billing.
- Every request body is checked against the document: an invalid one is 422 with its errors.
- :attr:`throttle` requests answer 429 with ``Retry-After`` first; every answer carries the
  ``RateLimit`` headers.
- GraphQL (``POST /graphql``) and REST v1 (``/v1/...``) answer 410 Gone, as RunPod has switched
  them off (GraphQL answers the account balance instead when :attr:`graphql_balance` is set).

Keys: ``api_key`` is the account's and may do everything; ``pod_keys`` maps a pod id to the
pod-scoped key RunPod gives that pod, which may read that pod and stop it, nothing else (403).
Any other key is 401. Hooks run after the answer is sent (a pod may be stopping itself): ``on_stop``,
``on_start`` and ``on_create`` (each may return ``(ip, ssh_port)``: the pod runs there from then on),
``on_terminate``. :attr:`requests` logs each request (method, path, query, whose key, the answer),
never the key.

    with RunPodReplay(api_key="rp-test", pods=[pods.pod("p1", "coder", "127.0.0.1", 2222)]) as api:
        os.environ["RUNPOD_API_BASE_URL"] = api.url
"""

from __future__ import annotations

import copy
import hmac
import json
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testing import runpod_pods as pods
from testing.runpod_spec import Spec

#: RunPod's answer to a start when the pod's machine has no free GPU for it (seen live as
#: ``{"error": ...}``, not problem+json).
NO_FREE_GPUS = "not enough free GPUs on the host machine"
NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. Please refresh and try again."
)
#: Seconds after an answer that its hook runs: the caller reads its answer first, as a pod's
#: processes outlive the API call that stops it.
HOOK_DELAY_S = 0.2
Answer = tuple[int, Any, dict[str, str]]


def problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> Answer:
    body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return status, body, {"Content-Type": "application/problem+json"}


def ok(body: Any, status: int = 200) -> Answer:
    return status, body, {"Content-Type": "application/json"} if body is not None else {}


class RunPodReplay:
    """RunPod's REST API v2 on ``host`` (an ephemeral port). The attributes are the account's state;
    tests change them between calls (a pod's life: running, stopped, started elsewhere, moved)."""

    def __init__(
        self,
        api_key: str,
        pods: list[dict[str, Any]] | None = None,
        host: str = "127.0.0.1",
        pod_keys: dict[str, str] | None = None,
        spec: Spec | None = None,
    ) -> None:
        self.api_key = api_key
        self.pods = pods or []
        self.pod_keys = dict(pod_keys or {})
        self.volumes: list[dict[str, Any]] = []
        self.catalog: list[dict[str, Any]] = []
        self.ssh_keys: list[str] = []
        self.billing: dict[str, list[float]] = {}  # pod id -> what each of its days was billed
        self.page_size: int | None = None
        self.throttle = 0  # the next this many requests answer 429
        self.retry_after = 1
        self.graphql_balance: float | None = None
        self.no_gpu: set[str] = set()
        #: User-Agents (any part of one) answered 403 "error code: 1010", as Cloudflare refused one client
        self.refused_agents: set[str] = set()
        self.gpu_lost: set[str] = set()
        self.on_stop: Callable[[str], Any] | None = None
        self.on_start: Callable[[str], Any] | None = None
        self.on_create: Callable[[dict[str, Any]], Any] | None = None
        self.on_terminate: Callable[[str], Any] | None = None
        self.requests: list[dict[str, Any]] = []
        self.hook_errors: list[str] = []
        self.spec = spec or Spec()
        self._cursors: dict[str, int] = {}
        self._lock = threading.RLock()
        self._hooks = threading.Condition()
        self._pending = 0
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: tests read .requests instead
                pass

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                later: list[Callable[[], None]] = []
                status, answer, headers = replay.answer(
                    self.command,
                    self.path,
                    self.headers.get("Authorization", ""),
                    body,
                    later,
                    agent=self.headers.get("User-Agent", ""),
                )
                payload = b"" if answer is None else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    for name, value in {**headers, "Content-Length": str(len(payload))}.items():
                        self.send_header(name, value)
                    self.send_header("RateLimit", '"minute";r=99;t=60')
                    self.send_header("RateLimit-Policy", '"minute";q=100;w=60')
                    self.end_headers()
                    self.wfile.write(payload)
                    self.wfile.flush()
                finally:  # the answer is out (or the caller gone): now a hook may end the caller
                    for hook in later:
                        timer = threading.Timer(HOOK_DELAY_S, hook)
                        timer.daemon = True
                        timer.start()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_one

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

    def pod(self, pod_id: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if p.get("id") == pod_id), None)

    # --- one request ---------------------------------------------------------------------------------

    def answer(
        self,
        method: str,
        path: str,
        authorization: str,
        body: bytes,
        later: list[Callable[[], None]],
        agent: str = "",
    ) -> Answer:
        parts = urlsplit(path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        caller = self._caller(authorization)
        record: dict[str, Any] = {"method": method, "path": parts.path, "query": query, "key": caller, "agent": agent}
        with self._lock:
            self.requests.append(record)
            if any(word in agent for word in self.refused_agents):
                # Cloudflare in front of RunPod's API, refusing a client by its User-Agent (error 1010)
                status, answer, headers = problem(403, "Forbidden", "error code: 1010")
            elif self.throttle > 0:
                self.throttle -= 1
                status, answer, headers = problem(429, "Too Many Requests", "rate limit exceeded for the minute window")
                headers["Retry-After"] = str(self.retry_after)
            else:
                status, answer, headers = self._route(method, parts.path.rstrip("/"), query, caller, body, later)
            if parts.path.endswith("/action"):  # which action (a body may carry a pod's env: nothing else is kept)
                try:
                    record["action"] = json.loads(body or b"{}").get("action")
                except (ValueError, AttributeError):
                    record["action"] = None
        record.update(status=status, answer=copy.deepcopy(answer), content_type=headers.get("Content-Type"))
        record["live_deviation"] = isinstance(answer, dict) and set(answer) == {"error"}
        return status, answer, headers

    def _route(self, method, path, query, caller, raw, later) -> Answer:
        if path.startswith("/v1/") or path == "/graphql":
            return self._retired(path, raw, caller)
        if caller is None:
            return problem(401, "Unauthorized", "invalid bearer token")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return problem(400, "Bad Request", "the body is not JSON")
        try:
            template, _ = self.spec.operation(method, path)
        except KeyError:
            return problem(404, "Not Found", f"no route {method} {path}")
        errors = self.spec.request_errors(method, path, body) if method in ("POST", "PUT", "PATCH") else []
        if errors:
            return problem(422, "Unprocessable Entity", "Request validation failed.", errors)
        segments = path.split("/")
        own = caller.split(":", 1)[1] if caller.startswith("pod:") else None
        if own is not None:  # a pod's own key: read that pod, stop it; nothing else
            allowed = (
                template == "/v2/pods/{id}"
                and method == "GET"
                or (template == "/v2/pods/{id}/action" and (body or {}).get("action") == "stop")
            )
            if not allowed or segments[3] != own:
                return problem(403, "Forbidden", "access denied")
        handler = {
            ("GET", "/v2/pods"): lambda: self._list(query),
            ("POST", "/v2/pods"): lambda: self._create(body, later),
            ("GET", "/v2/pods/{id}"): lambda: self._get(segments[3]),
            ("DELETE", "/v2/pods/{id}"): lambda: self._action(segments[3], "terminate", later),
            ("POST", "/v2/pods/{id}/action"): lambda: self._action(segments[3], body["action"], later),
            ("GET", "/v2/network-volumes"): lambda: ok({"networkVolumes": copy.deepcopy(self.volumes)}),
            ("POST", "/v2/network-volumes"): lambda: self._create_volume(body),
            ("GET", "/v2/network-volumes/{id}"): lambda: self._volume(segments[3]),
            ("GET", "/v2/catalog/gpus"): lambda: self._catalog(query),
            ("GET", "/v2/account/ssh-keys"): lambda: ok({"keys": list(self.ssh_keys)}),
            ("PUT", "/v2/account/ssh-keys"): lambda: self._set_keys(body),
            ("GET", "/v2/billing/pods"): lambda: self._billing(query),
        }[(method, template)]
        return handler()

    def _retired(self, path: str, raw: bytes, caller: str | None) -> Answer:
        if path == "/graphql" and self.graphql_balance is not None and caller == "account":
            if b"clientBalance" in raw:
                return ok({"data": {"myself": {"clientBalance": self.graphql_balance, "currentSpendPerHr": 0.34}}})
        return problem(410, "Gone", f"{path} is retired: use the REST API v2 (https://api.runpod.io/v2)")

    def _list(self, query: dict[str, str]) -> Answer:
        listed = [pods.public(p) for p in reversed(self.pods) if p.get("status") != "TERMINATED"]  # newest first
        if self.page_size is None:
            return ok({"pods": copy.deepcopy(listed)})
        start = 0
        if "cursor" in query:
            if query["cursor"] not in self._cursors:
                return problem(
                    422, "Unprocessable Entity", "invalid cursor", [f"cursor {query['cursor']!r} is unknown"]
                )
            start = self._cursors[query["cursor"]]
        try:
            asked = int(query.get("limit", 1000))
        except ValueError:
            return problem(422, "Unprocessable Entity", "limit must be an integer")
        size = max(1, min(asked, self.page_size))  # a page never holds more than the server's size
        page = listed[start : start + size]
        cursor = None
        if start + size < len(listed):
            cursor = secrets.token_urlsafe(9)
            self._cursors[cursor] = start + size
        return ok(
            {"pods": copy.deepcopy(page), "pagination": {"nextCursor": cursor, "hasNextPage": cursor is not None}}
        )

    def _get(self, pod_id: str) -> Answer:
        found = self.pod(pod_id)
        if found is None or found.get("status") == "TERMINATED":
            return problem(404, "Not Found", "pod not found")
        return ok(copy.deepcopy(pods.public(found)))

    def _action(self, pod_id: str, action: str, later: list[Callable[[], None]]) -> Answer:
        found = self.pod(pod_id)
        if found is None or found.get("status") == "TERMINATED":
            return problem(404, "Not Found", "pod not found")
        if action not in found["actions"]:
            return problem(409, "Conflict", f"action {action} is not valid for a pod that is {found['status']}")
        if action == "terminate":
            found.update(status="TERMINATED", actions=[], runtime=None, cost=0.0)
            self._later(later, "on_terminate", self.on_terminate, pod_id)
            return ok(None, 204)
        if action == "stop":
            pods.stopped(found)
            self._later(later, "on_stop", self.on_stop, pod_id)
        elif action == "start":
            if pod_id in self.no_gpu:
                return 400, {"error": NO_FREE_GPUS}, {"Content-Type": "application/json"}
            found.update(status="STARTING", actions=pods.actions_for("STARTING"))
            self._later(later, "on_start", self.on_start, pod_id, place=pod_id)
        elif action == "restart":
            found["startedAt"] = pods.now_text()
        return ok(copy.deepcopy(pods.public(found)))

    def _create(self, body: dict[str, Any], later: list[Callable[[], None]]) -> Answer:
        gpu = next((g for g in self.catalog if g["id"] == (body.get("gpu") or {}).get("id")), None)
        if gpu is None:
            return problem(400, "Bad Request", f"unknown GPU type {(body.get('gpu') or {}).get('id')!r}")
        count = (body.get("gpu") or {}).get("count", 1)
        network = (body.get("mounts") or {}).get("network") or []
        volume = next((v for v in self.volumes if network and v["id"] == network[0]["volumeId"]), None)
        if network and volume is None:
            return problem(400, "Bad Request", f"network volume {network[0]['volumeId']} not found")
        centers = [volume["dataCenter"]] if volume else (body.get("dataCenterIds") or list(gpu["_stock"]))
        if volume and body.get("dataCenterIds") and volume["dataCenter"] not in body["dataCenterIds"]:
            return problem(400, "Bad Request", "the network volume's data center is not among dataCenterIds")
        placed = next((dc for dc in centers if gpu["_stock"].get(dc, "NONE") != "NONE"), None)
        if placed is None or count > gpu["maxCount"]["secure"]:
            return problem(400, "Bad Request", NO_CAPACITY)
        pod_id = secrets.token_hex(7)
        made = pods.pod(
            pod_id,
            body["name"],
            None,
            None,
            gpu=gpu["id"],
            gpu_count=count,
            data_center=placed,
            env=body.get("env"),
            image=body.get("image", pods.IMAGE),
            network_volume=volume and volume["id"],
        )
        made["env"] = dict(body.get("env") or {})
        made.update(ports=list(body.get("ports") or []), disk=body.get("disk", 50), cloud=body.get("cloud", "SECURE"))
        made["mounts"] = body.get("mounts") or {}
        made.update(status="PROVISIONING", actions=pods.actions_for("PROVISIONING"), createdAt=pods.now_text())
        made["_cost"] = round(gpu["price"]["secure"] * count, 4)
        made["_ssh_keys"] = list(self.ssh_keys) if body.get("startSsh") else []  # what the pod's sshd accepts
        self.pods.append(made)
        self._later(later, "on_create", self.on_create, copy.deepcopy(made), place=pod_id)
        return ok(copy.deepcopy(pods.public(made)), 201)

    def _create_volume(self, body: dict[str, Any]) -> Answer:
        centers = {dc for gpu in self.catalog for dc in gpu["_stock"]} | {pods.DATA_CENTER}
        if body["dataCenter"] not in centers:
            return problem(400, "Bad Request", f"unknown data center {body['dataCenter']}")
        volume = pods.network_volume(secrets.token_hex(5), body["size"], body["dataCenter"], body["name"])
        self.volumes.append(volume)
        return ok(copy.deepcopy(volume), 201)

    def _volume(self, volume_id: str) -> Answer:
        volume = next((v for v in self.volumes if v["id"] == volume_id), None)
        return ok(copy.deepcopy(volume)) if volume else problem(404, "Not Found", "network volume not found")

    def _catalog(self, query: dict[str, str]) -> Answer:
        if "include" in query and "product" not in query:
            return problem(400, "Bad Request", "include=AVAILABILITY requires product")
        count = int(query.get("count") or 1)
        if "include" not in query:
            return ok({"gpus": [pods.public(g) for g in self.catalog]})
        return ok({"gpus": [pods.catalog_answer(g, count) for g in self.catalog]})

    def _set_keys(self, body: dict[str, Any]) -> Answer:
        self.ssh_keys = list(body["keys"])
        return ok({"keys": list(self.ssh_keys)})

    def _billing(self, query: dict[str, str]) -> Answer:
        days = self.billing.get(query.get("podId", ""), [])
        records = [
            {
                "startTime": "2026-11-28T00:00:00Z",
                "endTime": "2026-11-29T00:00:00Z",
                "podId": query.get("podId", ""),
                "totalAmount": amount,
                "gpuAmount": amount,
                "cpuAmount": 0.0,
                "diskAmount": 0.0,
            }
            for amount in days
        ]
        totals = {"totalAmount": sum(days), "gpuAmount": sum(days), "cpuAmount": 0.0, "diskAmount": 0.0}
        window = {"startTime": "2026-10-30T00:00:00Z", "endTime": "2026-11-30T00:00:00Z", "bucketSize": "day"}
        metadata = {
            "query": {**window, "podId": query.get("podId")},
            "recordCount": len(records),
            "uniquePodCount": 1 if records else 0,
            "totals": totals,
        }
        return ok({"records": records, "metadata": metadata})

    # --- keys and hooks ------------------------------------------------------------------------------

    def _caller(self, authorization: str) -> str | None:
        """``"account"``, ``"pod:<id>"`` or None: whose key signed the request."""
        key = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""
        if key and hmac.compare_digest(key, self.api_key):
            return "account"
        for pod_id, pod_key in self.pod_keys.items():
            if key and pod_key and hmac.compare_digest(key, pod_key):
                return f"pod:{pod_id}"
        return None

    def _later(self, later, name: str, hook, argument, place: str | None = None) -> None:
        """Run ``hook(argument)`` after the answer; with ``place`` (a pod id), an ``(ip, port)`` it
        returns is where that pod runs from then on (a lost GPU stays lost)."""
        if hook is None:
            if place is not None:  # nobody plays the machine: the pod runs where it ran before
                self._run_at(place, None)
            return
        with self._hooks:
            self._pending += 1

        def run() -> None:
            try:
                where = hook(argument)
                if place is not None:
                    self._run_at(place, where)
            except Exception as exc:  # a hook runs on a timer thread: keep its failure for the test
                self.hook_errors.append(f"{name}({place or argument}): {type(exc).__name__}: {exc}")
            finally:
                with self._hooks:
                    self._pending -= 1
                    self._hooks.notify_all()

        later.append(run)

    def _run_at(self, pod_id: str, where: Any) -> None:
        with self._lock:
            found = self.pod(pod_id)
            if found is None or found["status"] not in ("STARTING", "PROVISIONING"):
                return
            old = next((p for p in ((found.get("_last") or {}).get("ports") or []) if p["private"] == 22), None)
            ip, port = where if where else ((old["ip"], old["public"]) if old else (None, None))
            if ip is None:
                return
            pods.running(found, ip, port)
            if pod_id in self.gpu_lost:
                found["runtime"]["gpus"] = []

    def wait_for_hooks(self, timeout: float = 10.0) -> bool:
        """Wait until every hook scheduled so far has returned; False if one still runs after ``timeout``."""
        with self._hooks:
            return self._hooks.wait_for(lambda: self._pending == 0, timeout)

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
