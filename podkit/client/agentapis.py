"""verify's checks of the APIs coding agents speak beside Chat Completions, each with a tool call.

:data:`AGENT_APIS` is the table: per API, the path, the agents that speak it (named in every
failure: they are what breaks), whether every endpoint must serve it or only one whose vLLM
does, how the key is sent, and the probe that speaks to the endpoint the way those agents do:

- OpenAI Responses (``POST /v1/responses``, streamed, a function tool): Codex CLI speaks
  nothing else, and the OpenAI Agents SDK's default model uses it. The ``openai`` client
  parses the stream, as the Agents SDK does; the ``function_call`` item must come back
  with arguments that match the tool's strict schema.
- Anthropic Messages (``POST /v1/messages`` with ``tools``): Claude Code, which sends the key
  as ``x-api-key`` (so the probe does too: the edge must accept it, and vLLM reads only
  ``Authorization``). A ``tool_use`` block must come back. vLLM serves it in recent
  versions only: where the running server's own ``/openapi.json`` (read on the host by
  ``podctl describe``) does not list it, the check says so and passes.

Whether the running vLLM serves a path is decided once, from that route list
(:func:`unserved`), not by reading a 404: a 404 from an endpoint whose vLLM lists the
path means something between the client and vLLM (the edge, the router) does not forward it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.responses import (
    FunctionToolParam,
    ResponseCompletedEvent,
    ResponseFailedEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseOutputItemDoneEvent,
)

from podkit.client.api import VllmApi
from podkit.client.outcome import Outcome
from podkit.client.toolcalls import WEATHER_TOOL, schema_errors

Result = tuple[bool, str, Outcome]

PROMPT = "What is the weather in Paris, in celsius?"
FUNCTION = WEATHER_TOOL["function"]
#: the same tool in the Responses API's flat shape, and in Anthropic's (``input_schema``)
RESPONSES_TOOL: FunctionToolParam = {
    "type": "function",
    "name": FUNCTION["name"],
    "description": FUNCTION["description"],
    "parameters": FUNCTION["parameters"],
    "strict": False,
}
ANTHROPIC_TOOL = {
    "name": FUNCTION["name"],
    "description": FUNCTION["description"],
    "input_schema": FUNCTION["parameters"],
}
ANTHROPIC_VERSION = "2023-06-01"  # the header every Anthropic client sends


@dataclass(frozen=True)
class AgentApi:
    """One API agents speak, and how verify proves it."""

    check: str  # the check's name in the report
    path: str
    agents: tuple[str, ...]  # who breaks when it fails
    required: bool  # every endpoint must serve it; else only one whose vLLM lists it
    key_header: str  # how the probe (like those agents) sends the key
    probe: Callable[[AgentApi, VllmApi, bool], Result]  # (this, the endpoint, whether it is a router host)

    @property
    def breaks(self) -> str:
        return f"{' and '.join(self.agents)} would break"


def unserved(entry: AgentApi, routes: list[str] | None, version: str | None) -> Result | None:
    """The check's result when the running vLLM does not serve ``entry.path`` (its own route list
    says so), or None when the probe must run (the path is listed, or the list is unknown)."""
    if routes is None or entry.path in routes:
        return None
    vllm = f"vLLM {version}" if version else "the running vLLM"
    said = f"{vllm} does not serve {entry.path} (its /openapi.json lists no such route)"
    if entry.required:
        return False, f"{said}: {entry.breaks}; install a vLLM that serves it (vllm_version)", Outcome.ERROR
    return True, f"not checked: {said}, so {' and '.join(entry.agents)} cannot connect", Outcome.OK


def refusal(entry: AgentApi, status: int, text: str, router: bool) -> Result:
    """What an HTTP error from ``entry.path`` means, naming the agents that would break."""
    if status in (404, 405):
        where = "the router does not forward it" if router else "the edge or the server does not serve it: re-apply"
        return False, f"{entry.path} answered {status}, {where}: {entry.breaks}", Outcome.ERROR
    if status in (401, 403):
        if router:  # /v1/models passed with the same key: the router lost it on the way
            why = f"the router forwards {entry.path} without the client's key, so each replica's edge refuses it"
            return False, f"{entry.path} answered {status}: {why}: {entry.breaks}", Outcome.AUTH
        return (
            False,
            f"{entry.path} refuses the key sent as {entry.key_header} ({status}): re-apply so the edge accepts "
            f"it: {entry.breaks}",
            Outcome.AUTH,
        )
    return False, f"{entry.path} answered {status}: {text[:200]}: {entry.breaks}", Outcome.ERROR


def call_result(entry: AgentApi, name: str | None, arguments: Any, said: str) -> Result:
    """A tool call that came back (``name`` with ``arguments``, a JSON text or an object) judged
    against the tool's strict schema; ``said`` describes the answer."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return False, f"{name} arguments are not JSON: {arguments[:120]!r}: {entry.breaks}", Outcome.TOOL_CALLING
    errors = schema_errors(arguments, FUNCTION["parameters"])
    if name != FUNCTION["name"] or errors:
        broken = "; ".join(errors) or f"not {FUNCTION['name']}"
        return (
            False,
            f"{name}({json.dumps(arguments)}) breaks the schema: {broken}: {entry.breaks}",
            Outcome.TOOL_CALLING,
        )
    return True, f"{said} {name}({json.dumps(arguments, sort_keys=True)})", Outcome.OK


def responses_probe(entry: AgentApi, api: VllmApi, router: bool) -> Result:
    """A streamed ``/v1/responses`` with a function tool, parsed by the ``openai`` client."""
    try:
        stream = api.openai.responses.create(
            model=api.model,
            input=PROMPT,
            tools=[RESPONSES_TOOL],
            tool_choice="auto",
            max_output_tokens=128,
            temperature=0,
            stream=True,
        )
        events, status, text = 0, None, ""
        calls: list[ResponseFunctionToolCall] = []
        for event in stream:
            events += 1
            if isinstance(event, ResponseOutputItemDoneEvent) and isinstance(event.item, ResponseFunctionToolCall):
                calls.append(event.item)
            elif isinstance(event, (ResponseCompletedEvent, ResponseIncompleteEvent, ResponseFailedEvent)):
                status = event.response.status
                calls = calls or [i for i in event.response.output or [] if isinstance(i, ResponseFunctionToolCall)]
                text = getattr(event.response, "output_text", "") or ""
    except openai.APIStatusError as exc:
        return refusal(entry, exc.status_code, str(exc.body or exc.message), router)
    if status is None:
        return (
            False,
            f"the stream ended after {events} events without response.completed: {entry.breaks}",
            Outcome.ERROR,
        )
    if not calls:
        return (
            False,
            f"no function_call item in the streamed response ({events} events, status {status}, text "
            f"{text[:80]!r}): {entry.breaks}",
            Outcome.TOOL_CALLING,
        )
    return call_result(entry, calls[0].name, calls[0].arguments, f"{events} events streamed, function_call")


def messages_probe(entry: AgentApi, api: VllmApi, router: bool) -> Result:
    """``/v1/messages`` with ``tools``, the key sent as ``x-api-key`` only, as Claude Code sends it."""
    body = {
        "model": api.model,
        "max_tokens": 128,
        "temperature": 0,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [ANTHROPIC_TOOL],
    }
    headers = {"x-api-key": api.api_key, "anthropic-version": ANTHROPIC_VERSION}
    answer = api.fetch(entry.path, body, key=False, headers=headers)
    if answer.status is None:
        return False, f"no answer from {api.base_url}{entry.path}: {answer.error}", Outcome.UNREACHABLE
    if answer.status != 200:
        return refusal(entry, answer.status, answer.body.decode(errors="replace"), router)
    try:
        reply = json.loads(answer.body)
        blocks = [b for b in reply.get("content") or [] if isinstance(b, dict)]
    except (ValueError, AttributeError):
        return False, f"{entry.path} answered 200 with no Messages JSON: {answer.body[:120]!r}", Outcome.ERROR
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    if not uses:
        kinds = ", ".join(str(b.get("type")) for b in blocks) or "none"
        return (
            False,
            f"no tool_use block (stop_reason {reply.get('stop_reason')}, blocks: {kinds}): {entry.breaks}",
            Outcome.TOOL_CALLING,
        )
    said = f"x-api-key accepted, stop_reason {reply.get('stop_reason')}, tool_use"
    return call_result(entry, uses[0].get("name"), uses[0].get("input"), said)


AGENT_APIS = (
    AgentApi(
        "responses (tool call, streamed)",
        "/v1/responses",
        ("Codex CLI", "the OpenAI Agents SDK"),
        True,
        "Authorization: Bearer",
        responses_probe,
    ),
    AgentApi(
        "messages (tool_use, x-api-key)",
        "/v1/messages",
        ("Claude Code",),
        False,
        "x-api-key",
        messages_probe,
    ),
)
