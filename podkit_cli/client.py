"""``podkit client``: what a client needs to use each host's endpoint, written for that client."""

from __future__ import annotations

import click

from podkit import project_path
from podkit.client.agents import AGENTS
from podkit.client.agents.printout import PartError, printout, rows, summary_warnings
from podkit.client.connect import ClientSettings, ConnectError, summary
from podkit.settings import FLAGS
from podkit.text import clean

from .hosts import Host, Target, load_targets
from .output import dumps, host_option


class BadInput(click.ClickException):
    """Bad input (exit 2), said in one line like every other error (no usage block)."""

    exit_code = 2


def context_of(target: Target[Host]) -> tuple[int | None, str | None]:
    """The host's context length: the setting, or for "auto" the running server's
    ``--max-model-len`` (one command over SSH); else None and why, in one line."""
    setting = target.settings.max_model_len
    if isinstance(setting, int):
        return setting, None
    from podkit.client.serverinfo import describe

    info = describe(target.name, target.settings, target.run)
    flag = info.flag(FLAGS["max_model_len"])
    if flag and flag.isdigit():
        return int(flag), None
    why = info.error or "its command line has no --max-model-len"
    why = why.removeprefix(f"{target.name}: ")
    return None, (
        f'{target.name}: the context length is unknown: vllm_max_model_len is "auto" and the running '
        f"server's --max-model-len cannot be read ({why})"
    )


def client_settings(targets: list[Target[Host]]) -> list[tuple[ClientSettings, str | None]]:
    """Each target's :class:`ClientSettings`, with why its context length is unknown (else None).
    Hosts whose context is "auto" are read over SSH in parallel."""
    from podkit.client.targets import each_host

    contexts = each_host(context_of, targets)
    found = []
    for target, (context, problem) in zip(targets, contexts):
        key_file = project_path(target.settings.api_key_file)
        cs = ClientSettings.of(target.name, target.way, target.model, context, key_file, target.ca_file)
        found.append((cs, problem))
    return found


def say(lines) -> None:
    for line in lines:
        click.echo(clean(line), err=True)


@click.command("client")
@click.argument("inventory")
@host_option
@click.option(
    "--for",
    "client",
    type=click.Choice(list(AGENTS)),
    help="Print only this agent's settings. " + "; ".join(f"{name}: {agent.summary}" for name, agent in AGENTS.items()),
)
@click.option("--json", "as_json", is_flag=True, help="Print the settings (with --for: the agent's setup) as JSON.")
@click.option("--file", "file_path", metavar="PATH", help="With --for: print this one of the agent's files.")
@click.option("--exports", is_flag=True, help="With --for: print the agent's variables as export lines.")
@click.option("--show-key", is_flag=True, help="Write the API key itself (env, the summary, JSON), not its file.")
def client(inventory, host_names, client, as_json, file_path, exports, show_key):
    """Tell a client how to use each host's endpoint. Changes nothing.

    Prints each host's base URL (with /v1), served model, context length,
    the controller's API key file, the pinned CA certificate (TLS from the
    edge's own CA) and the way in. With --for, only that agent's config
    file (or, for an agent without one, its export lines) goes to stdout,
    so it can be redirected into place; where it goes, the variables and
    the command to run go to stderr. --for with --json prints each host's
    setup: files, env, args, run, notes. The key is written as
    "$(cat KEYFILE)" or a reference to $PODKIT_API_KEY, never itself unless
    --show-key (env only). A context length of "auto" is read from the
    running server over SSH.

    --for takes one host (pick it with --host), but llm lists every
    selected host (llm -m podkit-HOST) and --json takes them all.

    \b
    Exit codes: 0 ok, 1 error (e.g. no API key yet, or an agent needs a
    context length that cannot be read), 2 bad input.

    \b
    podkit client inventories/sandbox.py
    eval "$(podkit client inventories/runpod.py --host coder-1 --for env)"
    podkit client inventories/runpod.py --host coder-1 --for hermes > "$HERMES_HOME/config.yaml"
    podkit client inventories/baremetal.py --for llm > "$(dirname "$(llm logs path)")/extra-openai-models.yaml"
    podkit client inventories/sandbox.py --for codex > ~/.codex/config.toml
    eval "$(podkit client inventories/sandbox.py --for goose)"
    """
    check_parts(client, as_json, file_path, exports)
    targets = load_targets(inventory, host_names)
    if client and not as_json and not AGENTS[client].multi_host and len(targets) > 1:
        names = ", ".join(t.name for t in targets)
        raise BadInput(
            f"--for {client} writes one host's settings but {len(targets)} are selected ({names}): pick one with --host"
        )
    settings = client_settings(targets)
    emit_settings(settings, {t.name: t.key for t in targets}, client, as_json, show_key, file_path, exports)


def check_parts(client: str | None, as_json: bool, file_path: str | None, exports: bool) -> None:
    """--file and --exports pick a part of one agent's setup: refused without --for, with --json,
    or together."""
    for flag, given in (("--file", file_path is not None), ("--exports", exports)):
        if given and not client:
            raise BadInput(f"{flag} picks a part of an agent's setup: add --for AGENT")
        if given and as_json:
            raise BadInput(f"--json prints the whole setup: leave out {flag}")
    if file_path is not None and exports:
        raise BadInput("--file and --exports print different things: choose one")


def emit_settings(
    settings: list[tuple[ClientSettings, str | None]],
    keys: dict[str, str],
    client: str | None,
    as_json: bool,
    show_key: bool,
    file_path: str | None = None,
    exports: bool = False,
) -> None:
    """Print ``settings`` (with why a context is unknown): JSON, ``client``'s setup (its file or
    exports on stdout, the rest on stderr), or the summary; warnings and notes on stderr. The keys
    show only with ``show_key``."""
    if client:
        emit_agent(settings, keys, client, as_json, show_key, file_path, exports)
        return
    if as_json:
        found = []
        for cs, problem in settings:
            row = {**cs.as_dict(), "warnings": ([problem] if problem else []) + summary_warnings(cs)}
            if show_key:
                row["api_key"] = keys[cs.host]
            found.append(row)
        click.echo(dumps(found))
        return
    for index, (cs, problem) in enumerate(settings):
        if index:
            click.echo("")
        click.echo(clean(summary(cs, keys[cs.host] if show_key else None), lines=True), nl=False)
        say([problem] if problem else [])
        say(line for line in summary_warnings(cs) if not (cs.note and line == f"{cs.host}: {cs.note}"))


def emit_agent(
    settings: list[tuple[ClientSettings, str | None]],
    keys: dict[str, str],
    client: str,
    as_json: bool,
    show_key: bool,
    file_path: str | None,
    exports: bool,
) -> None:
    """``client``'s setup for each host, as :mod:`podkit.client.agents.printout` builds it: JSON,
    or one host's file or exports on stdout and the rest on stderr."""
    try:
        if as_json:
            click.echo(dumps(rows(client, settings)))
            return
        key = keys[settings[0][0].host] if show_key else None
        printed = printout(client, settings, file_path, exports, key)
    except PartError as exc:
        raise BadInput(str(exc)) from None
    except ConnectError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(printed.stdout, nl=False)
    for line in printed.stderr:
        click.echo(line, err=True)
