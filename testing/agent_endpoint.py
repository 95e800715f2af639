"""A stand-in for an endpoint as agents see it through podkit's edge: the OpenAI Responses API
(streamed) and the Anthropic Messages API, with a tool call, behind a key; each can be taken
away or made to misbehave, so verify's checks of them can be shown failing (and passing).

Served on loopback by :func:`serve` (a context manager yielding its URL). Its :class:`Behaviour`
says what it does:

- ``serves``: the paths it answers (the others 404, as vLLM or a router that lacks them does);
- ``tool_call``: whether a request with tools gets a call back (else text, as a model that
  answers in prose or a swallowed call leaves it);
- ``xkey``: whether the key is accepted as ``x-api-key`` (an edge that checks only the bearer
  key refuses it);
- ``keyless``: paths whose requests arrive without the key (vllm-router 0.1.17 forwards
  ``/v1/responses`` and ``/v1/messages`` without the client's headers: the replica refuses them).

Every request is kept in ``seen`` as (path, Authorization, x-api-key).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY, MODEL = "k", "m"
CALL = {"city": "Paris", "unit": "celsius"}


@dataclass
class Behaviour:
    serves: set[str] = field(default_factory=lambda: {"/v1/models", "/v1/responses", "/v1/messages"})
    tool_call: bool = True
    xkey: bool = True
    keyless: set[str] = field(default_factory=set)
    arguments: dict = field(default_factory=lambda: dict(CALL))
    seen: list[tuple[str, str | None, str | None]] = field(default_factory=list)


def responses_events(behaviour: Behaviour) -> list[dict]:
    """The events of a streamed Responses answer: a function_call item, or a text message."""
    if behaviour.tool_call:
        item = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": json.dumps(behaviour.arguments),
            "status": "completed",
        }
    else:
        text = {"type": "output_text", "text": "It is sunny.", "annotations": []}
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [text]}
    response = {"id": "resp_1", "object": "response", "created_at": 0, "model": MODEL, "output": [], "tools": []}
    events = [
        {"type": "response.created", "response": {**response, "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress"}},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {**response, "status": "completed", "output": [item]}},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def messages_answer(behaviour: Behaviour) -> dict:
    if behaviour.tool_call:
        content = [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": behaviour.arguments}]
    else:
        content = [{"type": "text", "text": "It is sunny."}]
    stop = "tool_use" if behaviour.tool_call else "end_turn"
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": content,
            "stop_reason": stop, "usage": {"input_tokens": 9, "output_tokens": 5}}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, *args):
        pass

    def keyed(self, path: str) -> bool:
        if path in self.behaviour.keyless:
            return False
        bearer = self.headers.get("Authorization") == f"Bearer {KEY}"
        return bearer or (self.behaviour.xkey and self.headers.get("X-Api-Key") == KEY)

    def reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        self.behaviour.seen.append((path, self.headers.get("Authorization"), self.headers.get("X-Api-Key")))
        if path not in self.behaviour.serves:
            return self.reply(404, b'{"detail": "Not Found"}')
        if not self.keyed(path):
            return self.reply(401, b'{"error": {"message": "missing or wrong API key", "code": 401}}')
        if path == "/v1/models":
            return self.reply(200, json.dumps({"data": [{"id": MODEL}]}).encode())
        if path == "/v1/messages":
            return self.reply(200, json.dumps(messages_answer(self.behaviour)).encode())
        assert request.get("stream"), "verify streams its Responses request"
        stream = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in responses_events(self.behaviour))
        self.reply(200, stream.encode(), "text/event-stream")

    do_GET = do_POST = answer


@contextmanager
def serve(behaviour: Behaviour) -> Iterator[str]:
    """The stand-in on a free loopback port, behaving as ``behaviour`` says: yields its URL."""
    handler = type("BoundHandler", (Handler,), {"behaviour": behaviour})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
