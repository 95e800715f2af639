"""Talking to the endpoint for the battery: one chat completion with a sampling profile, as a :class:`Turn`.

A refused connection or key stops the host's eval (:class:`Unreachable`); any other error,
a timeout included, fails that one run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from podkit.client.api import VllmApi


@dataclass
class Turn:
    """One chat completion: what came back (raw), or why nothing did."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    max_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Unreachable(RuntimeError):
    """The endpoint cannot be reached (or, with ``auth``, refuses the key): the host's eval stops."""

    def __init__(self, message: str, auth: bool = False):
        super().__init__(message)
        self.auth = auth


class Endpoint:
    """Sends chats to ``model`` with a sampling profile; ``max_tokens`` is trimmed to what the context leaves."""

    def __init__(self, client, model: str, max_tokens: int, count_tokens: Callable | None = None):
        """``client`` is an ``openai`` client; ``count_tokens(messages, tools)`` gives (prompt tokens,
        the server's context) or None."""
        self.client, self.model, self.max_tokens, self.count_tokens = client, model, max_tokens, count_tokens

    @classmethod
    def of(cls, api: VllmApi, max_tokens: int) -> Endpoint:
        """The endpoint ``api`` reaches: its ``openai`` client, and its ``/tokenize`` to trim ``max_tokens``."""
        return cls(api.openai, api.model, max_tokens, api.count_chat_tokens)

    def chat(self, messages, params: dict[str, Any], tools=None) -> Turn:
        turn = Turn(max_tokens=self.max_tokens)
        counted = self.count_tokens(messages, tools) if self.count_tokens else None
        if counted:
            turn.prompt_tokens, context = counted
            if context:
                room = int(context) - turn.prompt_tokens
                if room < 1:
                    turn.error = f"the prompt is {turn.prompt_tokens} tokens; the server's context is {context}"
                    return turn
                turn.max_tokens = min(self.max_tokens, room)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": turn.max_tokens,
            "temperature": params["temperature"],
            "top_p": params["top_p"],
            "extra_body": {"top_k": params["top_k"], "repetition_penalty": params["repetition_penalty"]},
        }
        if tools:
            kwargs.update(tools=tools, tool_choice="auto")
        started = time.monotonic()
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            # a timeout fails this run only; a refused connection or key stops the host's eval
            if isinstance(exc, (openai.APIConnectionError, openai.AuthenticationError)) and not isinstance(
                exc, openai.APITimeoutError
            ):
                raise Unreachable(f"{type(exc).__name__}: {exc}", isinstance(exc, openai.AuthenticationError)) from None
            turn.error, turn.seconds = f"{type(exc).__name__}: {exc}", time.monotonic() - started
            return turn
        turn.seconds = time.monotonic() - started
        choice = response.choices[0]
        message = choice.message
        turn.content, turn.finish_reason = message.content, choice.finish_reason
        turn.reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        turn.tool_calls = [
            {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
            for call in (message.tool_calls or [])
        ]
        usage = getattr(response, "usage", None)
        if usage is not None:
            turn.prompt_tokens, turn.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        return turn
