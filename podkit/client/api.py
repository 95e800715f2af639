"""One vLLM endpoint as a client speaks to it: its base URL, the API key, the served model and a timeout.

verify, bench and eval all reach the endpoint through :class:`VllmApi`: the
``openai`` client on ``/v1`` for completions and model listings, and plain
requests to the server's root for what only vLLM has (``/health``,
``/metrics``, ``/tokenize``, ``/version``). Plain requests come two ways,
because callers want different things from a failure:

- :meth:`VllmApi.fetch` never raises: it returns the status (or why there was
  none), so a check can see the 401 it expects. It ignores proxy settings: it
  speaks to the endpoint directly.
- :meth:`VllmApi.call` goes through the ``openai`` client and raises its
  errors, so a run stops on the same errors as its completions;
  :func:`outcome_of` turns one into an exit code.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import openai

from podkit.client.outcome import Outcome


@dataclass
class Answer:
    """What a plain request got: the status and body, or (status None) why nothing came back."""

    status: int | None
    body: bytes = b""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """What an HTTPS request trusts: exactly the CA in ``ca_file`` (the host's edge CA, pinned by
    the deploy), else the system's store. A missing ``ca_file`` trusts nothing, so a request
    fails rather than falling back to the system's CAs."""
    if ca_file is None:
        return ssl.create_default_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if os.path.exists(ca_file):
        context.load_verify_locations(cafile=ca_file)
    return context


class VllmApi:
    """The endpoint at ``base_url`` (``http://host:port``, no ``/v1``) serving ``model``; over
    HTTPS with ``ca_file``, trusting that CA alone."""

    def __init__(
        self, base_url: str, api_key: str, model: str, timeout: float = 60.0, ca_file: str | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        self.ca_file = ca_file

    @cached_property
    def tls(self) -> ssl.SSLContext:
        return tls_context(self.ca_file)

    @cached_property
    def openai(self) -> openai.OpenAI:
        """The ``openai`` client on ``<base_url>/v1``: no retries, so a failure shows as it happened."""
        http_client = openai.DefaultHttpxClient(verify=self.tls, timeout=self.timeout)
        return openai.OpenAI(
            base_url=f"{self.base_url}/v1",
            api_key=self.api_key,
            max_retries=0,
            timeout=self.timeout,
            http_client=http_client,
        )

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def fetch(
        self,
        path: str,
        body: Any = None,
        key: bool = True,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """GET ``path`` (or POST ``body`` as JSON), with the bearer key unless ``key`` is False,
        and ``headers`` besides.

        Never raises: an HTTP error is its status, no answer is status None with the reason.
        """
        request = urllib.request.Request(self.url(path), headers=headers or {})
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        if key and self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self.tls)
        )
        try:
            with opener.open(request, timeout=self.timeout if timeout is None else timeout) as response:
                return Answer(response.status, response.read())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read())
        except (OSError, ValueError) as exc:
            return Answer(None, b"", str(getattr(exc, "reason", exc)))

    def call(self, path: str, body: Any = None) -> Any:
        """GET ``path`` (or POST ``body``) through the ``openai`` client: the decoded JSON; raises its errors."""
        if body is None:
            return self.openai.get(self.url(path), cast_to=object)
        return self.openai.post(self.url(path), body=body, cast_to=object)

    def count_tokens(self, prompt: str) -> int:
        """Tokens in ``prompt`` as the served model counts them (``/tokenize``); raises openai's errors."""
        return int(self.call("/tokenize", {"model": self.model, "prompt": prompt})["count"])

    def count_chat_tokens(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, timeout: float = 30.0
    ) -> tuple[int, int | None] | None:
        """(prompt tokens, the server's context) of a chat as the template renders it, or None when
        ``/tokenize`` cannot say."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        answer = self.fetch("/tokenize", body, timeout=timeout)
        if not answer.ok:
            return None
        try:
            counted = json.loads(answer.body)
            return int(counted["count"]), counted.get("max_model_len")
        except (ValueError, KeyError, TypeError):
            return None

    def max_model_len(self) -> int | None:
        """The served model's context as ``GET /v1/models`` lists it, None when it does not; raises openai's errors."""
        for entry in self.openai.models.list().data:
            extra = entry.model_extra or {}
            if entry.id == self.model and extra.get("max_model_len"):
                return int(extra["max_model_len"])
        return None

    def version(self) -> str | None:
        """What the server's ``/version`` says, None when it answers with an error status."""
        try:
            answer = self.call("/version")
        except openai.APIStatusError:
            return None
        return answer.get("version") if isinstance(answer, dict) else None


def outcome_of(exc: Exception) -> Outcome:
    """The exit code an ``openai`` error stands for: no connection (a timeout too) 3, a refused key 4, else 1."""
    if isinstance(exc, openai.APIConnectionError):
        return Outcome.UNREACHABLE
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return Outcome.AUTH
    return Outcome.ERROR
