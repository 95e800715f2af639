"""A local server that answers the RunPod GraphQL API from recorded answers.

The ``runpod`` package posts every call to ``$RUNPOD_API_BASE_URL/graphql``
with ``Authorization: Bearer <key>``. Tests point that variable here and
change :attr:`RunPodReplay.pods` between calls to play a pod's life: running,
stopped, back at a new address and port, migrated to a new pod id.

Answered queries (the two the package's ``get_pods``/``get_pod`` send):

- ``query myPods { myself { pods { ... } } }`` -> every pod;
- ``query pod { pod(input: {podId: "ID"}) { ... } }`` -> one pod, or null.

A wrong key gets HTTP 401 (the package raises ``AuthenticationError``); any
other query gets a GraphQL ``errors`` answer (``QueryError``). Requests are
logged in :attr:`RunPodReplay.requests` without their Authorization header.

    with RunPodReplay(api_key="rp-test", pods=load_pods("pods.json")) as api:
        os.environ["RUNPOD_API_BASE_URL"] = api.url
        ...
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


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
    def __init__(self, api_key: str, pods: list[dict[str, Any]] | None = None, host: str = "127.0.0.1") -> None:
        self.api_key = api_key
        self.pods = pods or []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: tests read .requests instead
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, answer = replay.answer(self.path, self.headers.get("Authorization", ""), body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def answer(self, path: str, authorization: str, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            query = json.loads(body or b"{}").get("query", "")
        except ValueError:
            query = None
        with self._lock:
            self.requests.append({"path": path, "query": query})
            pods = copy.deepcopy(self.pods)
        if path.rstrip("/") != "/graphql":
            return 404, {"errors": [{"message": f"no such path {path}"}]}
        if authorization != f"Bearer {self.api_key}":
            return 401, {"error": "Unauthorized"}
        if not isinstance(query, str):
            return 400, {"errors": [{"message": "body must be JSON with a 'query'"}]}
        if re.search(r"\bmyself\s*\{\s*pods\b", query):
            return 200, {"data": {"myself": {"pods": pods}}}
        match = re.search(r'\bpod\s*\(\s*input\s*:\s*\{\s*podId\s*:\s*"([^"]+)"', query)
        if match:
            found = next((pod for pod in pods if pod.get("id") == match.group(1)), None)
            return 200, {"data": {"pod": found}}
        return 200, {"errors": [{"message": "this replay server answers only the pod queries"}]}

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
