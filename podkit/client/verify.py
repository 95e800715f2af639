"""Read-only checks of what a coding agent depends on: health, auth, models, chat, tool calls,
the other APIs agents speak (Responses, Anthropic Messages: :mod:`podkit.client.agentapis`),
and that the API key has not leaked on the host.

Each check returns a :class:`~podkit.client.hostchecks.Check` (pass/fail, a reason
that names the fix, and its time); the checks of the host's own answer are in
:mod:`podkit.client.hostchecks`. Nothing here changes the server. The checks speak HTTP to the
endpoint the way a client does, through :class:`podkit.client.api.VllmApi`:
plain requests for /health and the 401 check, the ``openai`` client for
completions and tool calls. The host is read with one ``podctl describe`` over
SSH (:func:`podkit.client.serverinfo.describe`), beside the checks that carry
no key: who listens on the served port, the running server's flags (to name a
wrong tool parser) and where the key shows outside its file (process argv, the
server log and its rotated copies, the managed scripts), reported as pids,
programs, files and line numbers, never the key. The first check that carries
the key waits for that read: the key goes only to the server podkit started on
the port, never to a process that took the port, nor when the host cannot be read.

Exit codes: :class:`podkit.client.outcome.Outcome` (imported here too), whose
:data:`~podkit.client.outcome.MEANINGS` say what each means.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from podkit.client.agentapis import AGENT_APIS, AgentApi, unserved
from podkit.client.api import VllmApi
from podkit.client.edgecheck import edge_refusals
from podkit.client.hostchecks import (
    Check,
    Report,
    key_checks,
    orphan_check,
    program_check,
    refusal_check,
    self_stop_check,
)
from podkit.client.outcome import Outcome, worst
from podkit.client.serverinfo import ServerInfo, key_refusal
from podkit.client.toolcalls import WEATHER_TOOL, schema_errors, silent_failure, wrong_parser

__all__ = [  # the tool-call helpers are re-exported: verify is where callers look for them
    "WEATHER_TOOL",
    "Check",
    "Report",
    "Verifier",
    "key_checks",
    "schema_errors",
    "silent_failure",
    "worst",
    "wrong_parser",
]


class Verifier:
    """Runs the checks against ``base_url`` (``http://host:port``) for ``model``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 60.0,
        server: Callable[[], ServerInfo] | None = None,
        ca_file: str | None = None,
        router: bool = False,
    ) -> None:
        """``server`` reads the host (``podkit.client.serverinfo.describe``): who holds the port (the
        key is sent only to podkit's server), the key checks and the running parser; without it
        only the HTTP checks run, and nothing vets the port before the key is sent. ``router``: the
        host is a router host (its replicas are checked instead of vLLM's /metrics)."""
        self.api = VllmApi(base_url, api_key, model, timeout, ca_file=ca_file)
        self.router = router
        self.base_url, self.model, self.client = self.api.base_url, model, self.api.openai
        self.server = server
        self._host: Future[tuple[ServerInfo, float]] | None = None

    def _timed(self, name: str, func: Callable[[], tuple[bool, str, Outcome]]) -> Check:
        start = time.monotonic()
        try:
            ok, detail, outcome = func()
        except openai.APIConnectionError as exc:
            ok, detail, outcome = False, f"no answer from {self.base_url}: {exc}", Outcome.UNREACHABLE
        except openai.AuthenticationError:
            ok, detail, outcome = False, "the server rejects the key (HTTP 401): re-apply the deploy", Outcome.AUTH
        except openai.APIStatusError as exc:
            ok, detail, outcome = False, f"HTTP {exc.status_code}: {_error_text(exc)}", Outcome.ERROR
        return Check(name, ok, detail, round(time.monotonic() - start, 3), Outcome.OK if ok else outcome)

    def health(self) -> tuple[bool, str, Outcome]:
        answer = self.api.fetch("/health", key=False)
        if answer.status is None:
            return False, f"no answer from {self.base_url}: {answer.error}", Outcome.UNREACHABLE
        return answer.status == 200, f"/health answered {answer.status}", Outcome.ERROR

    def auth_required(self) -> tuple[bool, str, Outcome]:
        answer = self.api.fetch("/v1/models", key=False)
        if answer.status is None:
            return False, f"no answer: {answer.error}", Outcome.UNREACHABLE
        if answer.status == 401:
            return True, "/v1/models refuses a request without the key (401)", Outcome.OK
        return False, f"/v1/models answered {answer.status} without a key: the server runs without auth", Outcome.AUTH

    def models(self) -> tuple[bool, str, Outcome]:
        answer = self.api.fetch("/v1/models")
        if answer.status is None:
            return False, f"no answer: {answer.error}", Outcome.UNREACHABLE
        if answer.status == 401:
            return (
                False,
                "the server rejects our key (401): re-apply the deploy so both use the same key file",
                Outcome.AUTH,
            )
        if answer.status != 200:
            return False, f"/v1/models answered {answer.status}", Outcome.ERROR
        ids = [m.get("id") for m in json.loads(answer.body).get("data", [])]
        if self.model not in ids:
            return False, f"/v1/models lists {ids}, not {self.model!r}", Outcome.ERROR
        return True, f"lists {self.model!r}", Outcome.OK

    def chat(self) -> tuple[bool, str, Outcome]:
        reply = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16
        )
        choice = reply.choices[0]
        tokens = reply.usage.completion_tokens if reply.usage else "?"
        return True, f"{tokens} tokens, finish_reason={choice.finish_reason}", Outcome.OK

    def stream(self) -> tuple[bool, str, Outcome]:
        start = time.monotonic()
        first = None
        finish = None
        chunks = 0
        for chunk in self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, stream=True
        ):
            chunks += 1
            if first is None:
                first = time.monotonic() - start
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        if first is None:
            return False, "the stream ended without a chunk", Outcome.ERROR
        if finish is None:
            return False, f"{chunks} chunks but no finish_reason: the stream was cut", Outcome.ERROR
        return True, f"first chunk after {first * 1000:.0f} ms, {chunks} chunks, finish_reason={finish}", Outcome.OK

    def metrics(self) -> tuple[bool, str, Outcome]:
        answer = self.api.fetch("/metrics")
        if answer.status is None:
            return False, f"no answer: {answer.error}", Outcome.UNREACHABLE
        if answer.status != 200:
            return False, f"/metrics answered {answer.status}", Outcome.ERROR
        for line in answer.body.decode(errors="replace").splitlines():
            if line.startswith("vllm:kv_cache_usage_perc"):
                return True, f"vllm:kv_cache_usage_perc {float(line.rsplit(' ', 1)[1]):.3f}", Outcome.OK
        return False, "/metrics has no vllm:kv_cache_usage_perc", Outcome.ERROR

    def replicas(self) -> tuple[bool, str, Outcome]:
        """A router host: its router has at least one replica in (its own health checks), and
        names each replica that is out."""
        info = self.host_info()
        router = (info.router if info else None) or {}
        if router.get("error") or not router.get("workers"):
            return False, router.get("error") or "the router lists no replica", Outcome.ERROR
        workers = router["workers"]
        inside = [w["name"] for w in workers if w["healthy"]]
        out = [w["name"] for w in workers if not w["healthy"]]
        detail = f"{len(inside)} of {len(workers)} replicas in ({router.get('policy')})"
        if out:
            detail += f"; out: {', '.join(out)} (its /health fails: see podkit verify INVENTORY --host NAME)"
        if not inside:
            return False, detail, Outcome.UNREACHABLE
        return True, detail, Outcome.OK

    def tool_auto(self) -> tuple[bool, str, Outcome]:
        try:
            reply = self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
                tools=[WEATHER_TOOL],
                tool_choice="auto",
                max_tokens=64,
                temperature=0,  # a probe, not a conversation: the same answer every time
            )
        except openai.BadRequestError as exc:
            text = _error_text(exc)
            if "enable-auto-tool-choice" in text or "tool-call-parser" in text or "tool_choice" in text:
                return (
                    False,
                    (
                        "the server was started without --enable-auto-tool-choice --tool-call-parser: "
                        "set vllm_tool_call_parser for this model family and re-apply"
                    ),
                    Outcome.TOOL_CALLING,
                )
            return False, f"HTTP 400: {text}", Outcome.TOOL_CALLING
        message = reply.choices[0].message
        if message.tool_calls:
            first = message.tool_calls[0]
            if not isinstance(first, ChatCompletionMessageFunctionToolCall):  # a custom tool: not what was offered
                return False, f"a {first.type} tool call, not a call of the function offered", Outcome.TOOL_CALLING
            return True, f"called {first.function.name}({first.function.arguments})", Outcome.OK
        extra = message.model_extra or {}
        problem = silent_failure(
            message.content,
            reply.choices[0].finish_reason,
            reply.usage.completion_tokens if reply.usage else None,
            reasoning=bool(extra.get("reasoning_content") or extra.get("reasoning")),
        )
        if problem:
            return False, f"{problem}: {wrong_parser(self.host_info(), message.content or '')}", Outcome.TOOL_CALLING
        return True, "accepted (the model chose to answer in text)", Outcome.OK

    def tool_named(self) -> tuple[bool, str, Outcome]:
        name = WEATHER_TOOL["function"]["name"]
        try:
            reply = self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": "What is the weather in Paris, in celsius?"}],
                tools=[WEATHER_TOOL],
                tool_choice={"type": "function", "function": {"name": name}},
                max_tokens=128,
                temperature=0,
            )
        except openai.BadRequestError as exc:
            return False, f"HTTP 400 for a named tool call: {_error_text(exc)}", Outcome.TOOL_CALLING
        calls = reply.choices[0].message.tool_calls or []
        if not calls:
            return False, "no tool_calls in the answer to a named tool_choice", Outcome.TOOL_CALLING
        if not isinstance(calls[0], ChatCompletionMessageFunctionToolCall):
            return False, f"a {calls[0].type} tool call, not a call of the function named", Outcome.TOOL_CALLING
        call = calls[0].function
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return False, f"arguments are not JSON: {call.arguments[:120]!r}", Outcome.TOOL_CALLING
        errors = schema_errors(arguments, WEATHER_TOOL["function"]["parameters"])
        if call.name != name or errors:
            return False, f"{call.name}({call.arguments}) breaks the schema: {'; '.join(errors)}", Outcome.TOOL_CALLING
        return True, f"{call.name}({json.dumps(arguments, sort_keys=True)}) matches the schema", Outcome.OK

    def agent_api(self, entry: AgentApi) -> tuple[bool, str, Outcome]:
        """One API of :data:`AGENT_APIS`, probed where the running vLLM serves it (its route list,
        read once on the host; a router host has none: its replicas' answer decides)."""
        info = self.host_info()
        skipped = unserved(entry, info.routes if info else None, info.vllm_version if info else None)
        return skipped or entry.probe(entry, self.api, self.router)

    def _read_host(self) -> tuple[ServerInfo, float]:
        start = time.monotonic()
        assert self.server is not None, "read only when run() was given a server"
        info = self.server()
        return info, round(time.monotonic() - start, 3)

    def host_info(self) -> ServerInfo | None:
        """What ``podctl describe`` said about the host (waits for it), or None without ``server``."""
        return self._host.result()[0] if self._host is not None else None

    def steps(self) -> list[tuple[str, Callable[[], tuple[bool, str, Outcome]], bool]]:
        """(name, check, whether it sends the key), in the order they run."""
        return [
            ("health", self.health, False),
            ("auth required", self.auth_required, False),
            ("models", self.models, True),
            ("chat", self.chat, True),
            ("stream", self.stream, True),
            ("replicas", self.replicas, True) if self.router else ("metrics", self.metrics, True),
            ("tool call (auto)", self.tool_auto, True),
            ("tool call (named, strict)", self.tool_named, True),
            *((entry.check, partial(self.agent_api, entry), True) for entry in AGENT_APIS),
        ]

    def run(self) -> Report:
        """Every check. The host is read over SSH beside the checks that carry no key; the first
        check that carries it waits for that read and runs only if podkit's server holds the port
        (a stranger there ends the report with one line). Without ``server`` nothing is vetted."""
        started, start = datetime.now(UTC), time.monotonic()
        report = Report(self.base_url, self.model)
        with ThreadPoolExecutor(max_workers=1) as pool:
            self._host = pool.submit(self._read_host) if self.server else None
            send = vetted = self._host is None
            for name, func, keyed in self.steps():
                if keyed and not vetted:
                    vetted, send = True, self._vet(report)
                    if report.outcome == Outcome.PORT_TAKEN:
                        break
                if keyed and not send:
                    continue
                check = self._timed(name, func)
                report.checks.append(check)
                if check.outcome == Outcome.UNREACHABLE:
                    break
            if self._host is not None:
                if not vetted:  # the endpoint did not answer: still say who holds the port
                    self._vet(report)
                info, seconds = self._host.result()
                found = key_checks(info, seconds)
                if info.listener is None:  # describe could not run: nothing vouched for the port
                    found[0].detail += "; the key was not sent, so the checks that need it did not run"
                report.checks += found
                if info.leaks is not None:
                    report.checks.append(orphan_check(info, seconds))
                    report.checks.append(program_check(info, seconds))
                    report.checks += [check for check in [self_stop_check(info, seconds)] if check]
                    report.checks.append(self._timed("edge refuses the rest", lambda: edge_refusals(self.api, info)))
                    refused = refusal_check(info, seconds)
                    report.checks += [refused] if refused else []
        report.started = started.isoformat(timespec="milliseconds")
        report.seconds = round(time.monotonic() - start, 3)
        return report

    def _vet(self, report: Report) -> bool:
        """Whether the key may go to the port (waits for the host read), with a check saying who
        holds it; a stranger replaces the checks made so far, which spoke to it, not to podkit."""
        assert self._host is not None, "vetted only when the host is read"
        info, seconds = self._host.result()
        refusal = key_refusal(info)
        where = info.listener
        if where is None:  # the key checks say why the host could not be read
            return False
        name = "port held by podkit"
        if refusal is None:
            holder = f"pid {where.get('pid')} ({where.get('program') or '?'})"
            report.checks.append(Check(name, True, f"{holder} on port {where.get('port')}", seconds))
            return True
        if where.get("held") and not where.get("error"):
            report.checks[:] = [Check(name, False, refusal, seconds, Outcome.PORT_TAKEN)]
        else:
            outcome = Outcome.ERROR if where.get("error") else Outcome.UNREACHABLE
            report.checks.append(Check(name, False, refusal, seconds, outcome))
        return False


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        body = body.get("message") or body.get("error") or body
    return str(body or exc.message)[:300]
