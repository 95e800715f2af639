"""verify's checks of the APIs agents speak beside Chat Completions (podkit/client/agentapis.py),
against a stand-in endpoint (testing/agent_endpoint.py) that serves them, lacks them, answers
without a tool call, refuses x-api-key, or (as vllm-router 0.1.17 does) loses the key on the way:
each check fails naming the agents that would break, and passes where the API works."""

from concurrent.futures import Future
from functools import partial

import pytest

from podkit.client import verify
from podkit.client.agentapis import AGENT_APIS
from podkit.client.outcome import Outcome
from podkit.client.serverinfo import ServerInfo
from testing.agent_endpoint import KEY, MODEL, Behaviour, serve

RESPONSES, MESSAGES = AGENT_APIS
ALL = {"/v1/models", "/v1/responses", "/v1/messages"}
VLLM_ROUTES = ["/health", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"]
CODEX = "Codex CLI and the OpenAI Agents SDK would break"
CLAUDE = "Claude Code would break"


def host(routes=VLLM_ROUTES, version="0.32.0"):
    return ServerInfo("pod", running=True, routes=routes, vllm_version=version)


def check(url, entry, info=None, router=False):
    """One API check as verify runs it, the host read as ``info`` says (None: not read)."""
    checker = verify.Verifier(url, KEY, MODEL, timeout=10, router=router)
    if info is not None:
        checker._host = Future()
        checker._host.set_result((info, 0.0))
    return checker._timed(entry.check, partial(checker.agent_api, entry))


# (behaviour, host read, router host, entry, ok, outcome, what the detail says)
CASES = {
    "responses works": (Behaviour(), host(), False, RESPONSES, True, Outcome.OK,
                        'events streamed, function_call get_weather({"city": "Paris", "unit": "celsius"})'),
    "messages works": (Behaviour(), host(), False, MESSAGES, True, Outcome.OK,
                       "x-api-key accepted, stop_reason tool_use, tool_use get_weather("),
    "the host unread: the probe decides": (Behaviour(), None, False, MESSAGES, True, Outcome.OK, "tool_use get_weather"),
    "no /v1/responses at the endpoint": (
        Behaviour(serves=ALL - {"/v1/responses"}), host(), False, RESPONSES, False, Outcome.ERROR,
        f"/v1/responses answered 404, the edge or the server does not serve it: re-apply: {CODEX}"),
    "no /v1/messages at the endpoint, though vLLM lists it": (
        Behaviour(serves=ALL - {"/v1/messages"}), host(), False, MESSAGES, False, Outcome.ERROR,
        f"/v1/messages answered 404, the edge or the server does not serve it: re-apply: {CLAUDE}"),
    "a vLLM without /v1/responses": (
        Behaviour(), host(routes=["/v1/chat/completions"], version="0.8.5"), False, RESPONSES, False,
        Outcome.ERROR, "vLLM 0.8.5 does not serve /v1/responses (its /openapi.json lists no such route): "
        f"{CODEX}; install a vLLM that serves it (vllm_version)"),
    "a vLLM without /v1/messages: said, not failed": (
        Behaviour(serves=ALL - {"/v1/messages"}), host(routes=["/v1/responses"], version="0.10.0"), False,
        MESSAGES, True, Outcome.OK, "not checked: vLLM 0.10.0 does not serve /v1/messages (its /openapi.json "
        "lists no such route), so Claude Code cannot connect"),
    "responses without a function call": (
        Behaviour(tool_call=False), host(), False, RESPONSES, False, Outcome.TOOL_CALLING,
        f"no function_call item in the streamed response (4 events, status completed, text 'It is sunny.'): {CODEX}"),
    "messages without a tool_use block": (
        Behaviour(tool_call=False), host(), False, MESSAGES, False, Outcome.TOOL_CALLING,
        f"no tool_use block (stop_reason end_turn, blocks: text): {CLAUDE}"),
    "a call that breaks the schema": (
        Behaviour(arguments={"city": "Rome", "unit": "celsius"}), host(), False, RESPONSES, False,
        Outcome.TOOL_CALLING, "arguments.city='Rome' is not one of ['Paris', 'Berlin', 'Tokyo']: " + CODEX),
    "an input that breaks the schema": (
        Behaviour(arguments={"city": "Paris"}), host(), False, MESSAGES, False, Outcome.TOOL_CALLING,
        f"arguments lacks required 'unit': {CLAUDE}"),
    "an edge that refuses x-api-key": (
        Behaviour(xkey=False), host(), False, MESSAGES, False, Outcome.AUTH,
        f"/v1/messages refuses the key sent as x-api-key (401): re-apply so the edge accepts it: {CLAUDE}"),
    "a router that loses the key on /v1/responses": (
        Behaviour(keyless={"/v1/responses"}), None, True, RESPONSES, False, Outcome.AUTH,
        "/v1/responses answered 401: the router forwards /v1/responses without the client's key, so each "
        f"replica's edge refuses it: {CODEX}"),
    "a router that loses the key on /v1/messages": (
        Behaviour(keyless={"/v1/messages"}), None, True, MESSAGES, False, Outcome.AUTH,
        f"the router forwards /v1/messages without the client's key, so each replica's edge refuses it: {CLAUDE}"),
    "a router that does not forward /v1/messages": (
        Behaviour(serves=ALL - {"/v1/messages"}), None, True, MESSAGES, False, Outcome.ERROR,
        f"/v1/messages answered 404, the router does not forward it: {CLAUDE}"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_agent_api_check_fails_naming_the_agents_and_passes_where_the_api_works(case):
    behaviour, info, router, entry, ok, outcome, said = case
    with serve(behaviour) as url:
        found = check(url, entry, info, router)
    assert (found.ok, found.outcome) == (ok, outcome), found.detail
    assert said in found.detail, found.detail
    assert found.name == entry.check


def test_the_key_goes_as_each_agent_sends_it():
    """Responses with the bearer key (the openai client), Messages with x-api-key alone (Claude Code)."""
    behaviour = Behaviour()
    with serve(behaviour) as url:
        for entry in AGENT_APIS:
            assert check(url, entry, host()).ok
    assert behaviour.seen == [("/v1/responses", f"Bearer {KEY}", None), ("/v1/messages", None, KEY)]


def test_a_path_the_running_vllm_does_not_list_is_not_asked():
    """Whether vLLM serves a path is read from its route list, not guessed from a request."""
    behaviour = Behaviour()
    with serve(behaviour) as url:
        for entry in AGENT_APIS:
            check(url, entry, host(routes=["/v1/chat/completions"]))
    assert behaviour.seen == []


def test_verify_runs_the_agent_api_checks_after_the_chat_checks_and_exits_with_the_worst():
    behaviour = Behaviour(serves=ALL - {"/v1/responses"}, tool_call=False)
    with serve(behaviour) as url:
        report = verify.Verifier(url, KEY, MODEL, timeout=10).run()
    names = [c.name for c in report.checks]
    assert names[-2:] == [RESPONSES.check, MESSAGES.check] and names.index("tool call (auto)") < len(names) - 2
    found = {c.name: c for c in report.checks}
    assert (found[RESPONSES.check].outcome, found[MESSAGES.check].outcome) == (Outcome.ERROR, Outcome.TOOL_CALLING)
    assert report.as_dict()["checks"][-1]["outcome"] == "tool_calling"
