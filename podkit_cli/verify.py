"""``podkit verify``: prove each host's endpoint works for a coding agent. Changes nothing."""

from __future__ import annotations

import sys

import click

from podkit.text import clean

from .hosts import load_targets
from .output import dumps, host_option


@click.command()
@click.argument("inventory")
@host_option
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds per request.")
def verify(inventory, host_names, as_json, timeout):
    """Prove each host's endpoint works for a coding agent. Changes nothing.

    Checks /health, that /v1/models refuses a request without the key and
    lists the served model with it, a chat completion, a streamed one (first
    chunk, clean end), /metrics with vllm:kv_cache_usage_perc, a tool call
    with tool_choice "auto" (a call left as text names the wrong parser and
    the right one), and a named tool call whose arguments must match a strict
    schema; then each API other agents speak, with a tool call: Responses
    (streamed, a function_call item: Codex CLI, the OpenAI Agents SDK) and
    Anthropic Messages (a tool_use block, the key sent as x-api-key: Claude
    Code), the latter where the running vLLM serves it (its own
    /openapi.json). A failure names the agents that would break.
    Meanwhile one command over SSH reads who listens on the served
    port and checks that the API key is in no process's argv, the server log
    (and its rotated copies) or the scripts on the host. The key is read from
    the same file the deploy used, and sent only once that command says the
    edge podkit started holds the port: never to another process there,
    nor when the host cannot be read over SSH.

    \b
    Exit codes: 0 all pass, 1 other failure,
    2 bad input (a missing inventory file or host),
    3 unreachable (the endpoint, or the host over SSH), 4 auth,
    5 tool calling, 6 secret exposed (the key leaked on the host),
    7 port taken (a process podkit did not start holds the port;
    the key was not sent), 8 exposed (a route beside /v1 and /health
    answers without the key, or vLLM listens beyond loopback).

    \b
    podkit verify inventories/sandbox.py
    podkit verify inventories/runpod.py --host coder-1 --json
    """
    from podkit.client.serverinfo import describe
    from podkit.client.targets import each_host
    from podkit.client.verify import Verifier, worst

    def check(t):
        server = lambda: describe(t.name, t.settings, t.run, leaks=True)  # noqa: E731
        router = t.settings.role == "router"
        return Verifier(t.url, t.key, t.model, timeout, server=server, ca_file=t.ca_file, router=router).run()

    targets = load_targets(inventory, host_names)
    reports = list(zip([t.name for t in targets], each_host(check, targets)))

    if as_json:
        click.echo(dumps({name: r.as_dict() for name, r in reports}))
    else:
        for name, report in reports:
            click.echo(clean(f"{name}  {report.endpoint}/v1  model {report.model}"))
            for item in report.checks:
                mark = click.style("PASS", fg="green") if item.ok else click.style("FAIL", fg="red")
                click.echo(f"  {mark}  {item.name:<26} {item.seconds:6.2f}s  {clean(item.detail)}")
    sys.exit(int(worst(report.outcome for _, report in reports)))
