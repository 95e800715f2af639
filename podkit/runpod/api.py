"""RunPod's REST API v2, as podkit asks it: one small client over the standard library.

RunPod is switching off what podkit spoke before: REST v1 (``rest.runpod.io/v1``) is gone since
mid-November 2026 and GraphQL goes in early 2027. The ``runpod`` package's move to v2 (2.0 release
candidates) lists the first page of pods only, renames every field and refuses a resume with a GPU
count, so podkit speaks v2 itself, in the few calls it needs (RunPod's OpenAPI document for v2,
``api-reference-v2/openapi.json`` in RunPod's docs repository, August 2026):

    GET  /v2/pods                     every pod (paged where the answer says so)
    GET  /v2/pods/{id}                one pod
    POST /v2/pods/{id}/action         {"action": "stop" | "start" | "terminate"}
    POST /v2/pods                     create a pod
    GET  /v2/network-volumes[/{id}]   network volumes; POST one to create it
    GET  /v2/catalog/gpus             GPU types, price and stock
    GET  /v2/account/ssh-keys         the keys a pod created with startSsh gets; PUT to set them
    GET  /v2/billing/pods             what a pod was billed

Paging: the August document lists pods in one answer; RunPod's newer clients page them with
``limit``, ``cursor`` and ``pagination.nextCursor``. :meth:`RunPodApi.pods` follows
``nextCursor`` whenever an answer carries one, takes an answer without it as the whole list, and
never assumes a page holds what it asked for.

Every failure is a :class:`RunPodError` with RunPod's own words, read from either error shape it
uses (``application/problem+json``: title, status, detail, errors; or ``{"error": "..."}``); a 429
is retried after its ``Retry-After``. The key goes in a header, never a URL; requests carry an
explicit User-Agent (Cloudflare answered Python's default one with 403 on one route).
"""

from __future__ import annotations

import email.utils
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from podkit import __version__
from podkit.text import clean

#: Where RunPod answers; ``RUNPOD_API_BASE_URL`` (also read by the ``runpod`` package) points elsewhere.
API_URL = "https://api.runpod.io"
USER_AGENT = f"podkit/{__version__} (Python urllib)"
#: How many times a rate-limited (429) or briefly unavailable (502-504) request is asked again.
RETRIES = 4
#: The longest wait honoured from a Retry-After; a longer one is an error to report, not to sit through.
MAX_RETRY_AFTER_S = 60.0
#: Pages followed at most: a cursor that never ends is an API fault, not a list.
MAX_PAGES = 1000
PAGE_SIZE = 100


class RunPodError(RuntimeError):
    """RunPod answered with an error (or not at all). ``status``: the HTTP status (None: no answer);
    ``said``: RunPod's own words on one line; ``what``: the request, e.g. ``POST /v2/pods/ID/action``."""

    def __init__(self, what: str, status: int | None, said: str) -> None:
        self.what, self.status, self.said = what, status, said
        super().__init__(f"{what}: {self.answer()}")

    def answer(self) -> str:
        return f"HTTP {self.status}: {self.said}" if self.status is not None else self.said

    def fix(self) -> str:
        """What the user can do about it, by kind of answer."""
        if self.status == 401:
            return "RunPod refused RUNPOD_API_KEY: make a new key under Settings > API Keys"
        if self.status == 403:
            return "the key may not do this: give it read and write access to pods (Settings > API Keys)"
        if self.status == 410:
            return "this RunPod API is switched off: update podkit"
        if self.status == 429:
            return "RunPod is rate-limiting this account: wait a minute and run it again"
        if self.status is None or self.status >= 500:
            return "RunPod did not answer properly: run it again in a minute (status.runpod.io)"
        return ""


def error_said(status: int, body: bytes) -> str:
    """RunPod's words in an error answer, on one line: problem+json's title, detail and errors, or
    the ``error`` of ``{"error": "..."}``, else the start of the body as text."""
    try:
        data = json.loads(body or b"null")
    except ValueError:
        data = None
    if isinstance(data, dict):
        if isinstance(data.get("error"), str):
            return clean(data["error"])[:400]
        parts = [data.get(name) for name in ("title", "detail")]
        words = [str(part) for part in parts if isinstance(part, (str, int)) and str(part)]
        errors = data.get("errors")
        if isinstance(errors, list):
            words += [str(item) for item in errors[:5] if isinstance(item, (str, int, float))]
        if words:
            return clean(": ".join(words))[:400]
    text = clean(body.decode("utf-8", "replace")).strip()
    return text[:200] or f"an empty {status} answer"


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds, or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class RunPodApi:
    """One account's (or one pod's) view of RunPod's REST API v2.

    + key: the API key (the user's, or a pod's own pod-scoped key)
    + base_url: default ``$RUNPOD_API_BASE_URL`` or https://api.runpod.io
    + sleep: how to wait before a retry (tests pass one that records)
    + timeout: seconds per request

    **Example:**

    .. code:: python

        api = RunPodApi(os.environ["RUNPOD_API_KEY"])
        for pod in api.pods():
            print(pod["id"], pod["status"])
    """

    def __init__(
        self,
        key: str,
        base_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timeout: float = 30.0,
    ) -> None:
        self.key = key
        self.base_url = (base_url or os.environ.get("RUNPOD_API_BASE_URL") or API_URL).rstrip("/")
        self.sleep = sleep
        self.timeout = timeout

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None) -> Any:
        """The JSON answer to ``method path`` (None for an empty one, e.g. 204), retrying 429 and
        502-504; any other failure is a :class:`RunPodError`."""
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        what = f"{method} {path}"
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(RETRIES + 1):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Authorization", f"Bearer {self.key}")
            request.add_header("Accept", "application/json")
            request.add_header("User-Agent", USER_AGENT)
            if data is not None:
                request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    raw = answer.read()
            except urllib.error.HTTPError as exc:
                raw = exc.read() or b""
                wait = self._wait(exc.code, exc.headers.get("Retry-After"), attempt)
                if wait is None:
                    raise RunPodError(what, exc.code, error_said(exc.code, raw)) from None
                self.sleep(wait)
                continue
            except (OSError, ValueError) as exc:  # refused, reset, timed out, a bad URL
                reason = getattr(exc, "reason", None) or exc
                raise RunPodError(what, None, f"no answer from {self.base_url} ({clean(reason)})") from None
            if not raw.strip():
                return None
            try:
                return json.loads(raw)
            except ValueError:
                said = clean(raw[:120].decode("utf-8", "replace"))
                raise RunPodError(what, 200, f"the answer is not JSON: {said}") from None
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _wait(self, status: int, header: str | None, attempt: int) -> float | None:
        """Seconds to wait before asking again, or None when this answer is final."""
        if attempt >= RETRIES or status not in (429, 502, 503, 504):
            return None
        wait = retry_after(header)
        if wait is None:
            wait = 2.0**attempt
        return wait if wait <= MAX_RETRY_AFTER_S else None

    # --- pods -----------------------------------------------------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        """Every pod of the account, following ``pagination.nextCursor`` while an answer carries one."""
        pods: list[dict[str, Any]] = []
        seen_ids: set[str] = set()
        cursors: set[str] = set()
        query: dict[str, Any] = {"limit": PAGE_SIZE}
        for _ in range(MAX_PAGES):
            answer = self.request("GET", "/v2/pods", query)
            if not isinstance(answer, dict) or not isinstance(answer.get("pods"), list):
                raise RunPodError("GET /v2/pods", 200, f"the answer holds no pod list: {_shape(answer)}")
            for pod in answer["pods"]:
                if not isinstance(pod, dict):
                    raise RunPodError("GET /v2/pods", 200, f"a pod in the list is not an object: {_shape(pod)}")
                pod_id = str(pod.get("id"))
                if pod_id not in seen_ids:  # a pod created while paging may show up on two pages
                    seen_ids.add(pod_id)
                    pods.append(pod)
            paging = answer.get("pagination")
            cursor = paging.get("nextCursor") if isinstance(paging, dict) else None
            if not cursor or (isinstance(paging, dict) and paging.get("hasNextPage") is False):
                return pods
            if not isinstance(cursor, str) or cursor in cursors:
                raise RunPodError(
                    "GET /v2/pods", 200, f"the next page's cursor repeats or is not text: {_shape(cursor)}"
                )
            cursors.add(cursor)
            query = {"limit": PAGE_SIZE, "cursor": cursor}
        raise RunPodError("GET /v2/pods", 200, f"more than {MAX_PAGES} pages of pods")

    def pod(self, pod_id: str) -> dict[str, Any]:
        return self._object("GET", f"/v2/pods/{_segment(pod_id)}")

    def action(self, pod_id: str, action: str) -> dict[str, Any] | None:
        """``stop``, ``start`` or ``restart``: the pod as RunPod answers it; ``terminate``: None (204)."""
        answer = self.request("POST", f"/v2/pods/{_segment(pod_id)}/action", body={"action": action})
        return answer if isinstance(answer, dict) else None

    def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._object("POST", "/v2/pods", body=body)

    # --- what a new pod needs -------------------------------------------------------------------------

    def network_volumes(self) -> list[dict[str, Any]]:
        answer = self.request("GET", "/v2/network-volumes")
        volumes = answer.get("networkVolumes") if isinstance(answer, dict) else None
        if not isinstance(volumes, list):
            raise RunPodError("GET /v2/network-volumes", 200, f"the answer holds no volume list: {_shape(answer)}")
        return [volume for volume in volumes if isinstance(volume, dict)]

    def network_volume(self, volume_id: str) -> dict[str, Any]:
        return self._object("GET", f"/v2/network-volumes/{_segment(volume_id)}")

    def create_network_volume(self, name: str, size_gb: int, data_center: str) -> dict[str, Any]:
        return self._object(
            "POST", "/v2/network-volumes", body={"name": name, "size": size_gb, "dataCenter": data_center}
        )

    def gpu_types(self, count: int = 1, cloud: str = "SECURE") -> list[dict[str, Any]]:
        """Every GPU type with its price, and its stock for pods of ``count`` GPUs in ``cloud``."""
        query = {"include": "AVAILABILITY", "product": "POD", "count": count, "cloud": cloud}
        answer = self.request("GET", "/v2/catalog/gpus", query)
        gpus = answer.get("gpus") if isinstance(answer, dict) else None
        if not isinstance(gpus, list):
            raise RunPodError("GET /v2/catalog/gpus", 200, f"the answer holds no GPU list: {_shape(answer)}")
        return [gpu for gpu in gpus if isinstance(gpu, dict)]

    def ssh_keys(self) -> list[str]:
        answer = self.request("GET", "/v2/account/ssh-keys")
        keys = answer.get("keys") if isinstance(answer, dict) else None
        if not isinstance(keys, list):
            raise RunPodError("GET /v2/account/ssh-keys", 200, f"the answer holds no key list: {_shape(answer)}")
        return [key for key in keys if isinstance(key, str)]

    def set_ssh_keys(self, keys: list[str]) -> list[str]:
        """Replace the account's SSH keys (RunPod's PUT replaces the whole set: pass the old ones too)."""
        answer = self.request("PUT", "/v2/account/ssh-keys", body={"keys": keys})
        return list(answer.get("keys") or []) if isinstance(answer, dict) else []

    def pod_billing(self, pod_id: str, days: int = 30) -> float | None:
        """What RunPod billed for the pod over the last ``days`` days (USD), or None when unreadable."""
        query = {"podId": pod_id, "bucketSize": "day", "lastN": days}
        answer = self.request("GET", "/v2/billing/pods", query)
        records = answer.get("records") if isinstance(answer, dict) else None
        if not isinstance(records, list):
            return None
        amounts = [record.get("totalAmount") for record in records if isinstance(record, dict)]
        numbers = [float(a) for a in amounts if isinstance(a, (int, float)) and not isinstance(a, bool)]
        return round(sum(numbers), 4) if len(numbers) == len(amounts) else None

    def _object(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        answer = self.request(method, path, body=body)
        if not isinstance(answer, dict):
            raise RunPodError(f"{method} {path}", 200, f"the answer is not an object: {_shape(answer)}")
        return answer


def _segment(value: str) -> str:
    """An id as one path segment: a pod id never carries a slash, a forged one cannot climb the path."""
    return urllib.parse.quote(str(value), safe="")


def _shape(value: Any) -> str:
    return clean(json.dumps(value, default=str))[:120]
