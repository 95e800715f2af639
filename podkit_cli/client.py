"""``podkit client``: what a client needs to use each host's endpoint, written for that client."""

from __future__ import annotations

import shlex

import click

from podkit import project_path
from podkit.client.connect import CLIENTS, LLM_KEY_NAME, ClientSettings, ConnectError, notes, render, summary, warnings
from podkit.text import clean

from .hosts import Target, load_targets
from .output import dumps, host_option


class BadInput(click.ClickException):
    """Bad input (exit 2), said in one line like every other error (no usage block)."""

    exit_code = 2


def context_of(target: Target) -> tuple[int | None, str | None]:
    """The host's context length: the setting, or for "auto" the running server's
    ``--max-model-len`` (one command over SSH); else None and why, in one line."""
    setting = target.settings.max_model_len
    if isinstance(setting, int):
        return setting, None
    from podkit.client.serverinfo import describe

    info = describe(target.name, target.settings, target.run)
    flag = info.flag("--max-model-len")
    if flag and flag.isdigit():
        return int(flag), None
    why = info.error or "its command line has no --max-model-len"
    why = why.removeprefix(f"{target.name}: ")
    return None, (
        f'{target.name}: the context length is unknown: vllm_max_model_len is "auto" and the running '
        f"server's --max-model-len cannot be read ({why})"
    )


def client_settings(targets: list[Target]) -> list[tuple[ClientSettings, str | None]]:
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
    type=click.Choice(CLIENTS),
    help="Print only this client's settings: env (shell exports), hermes (Hermes Agent's config.yaml), "
    "llm (extra-openai-models.yaml), openai (Python for the openai and Agents SDKs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the settings as a JSON list.")
@click.option("--show-key", is_flag=True, help="Write the API key itself (env, the summary, JSON), not its file.")
def client(inventory, host_names, client, as_json, show_key):
    """Tell a client how to use each host's endpoint. Changes nothing.

    Prints each host's base URL (with /v1), served model, context length,
    the controller's API key file, the pinned CA certificate (TLS from the
    edge's own CA) and the way in. With --for, only that client's settings
    go to stdout (notes and warnings go to stderr), so they can be
    redirected into place. The key is written as "$(cat KEYFILE)" or
    ${PODKIT_API_KEY}, never itself unless --show-key. A context length of
    "auto" is read from the running server over SSH.

    --for env, hermes and openai take one host (pick it with --host);
    --for llm lists every selected host (llm -m podkit-HOST).

    \b
    Exit codes: 0 ok, 1 error (e.g. no API key yet, or Hermes needs a
    context length that cannot be read), 2 bad input.

    \b
    podkit client inventories/sandbox.py
    eval "$(podkit client inventories/runpod.py --host coder-1 --for env)"
    podkit client inventories/runpod.py --host coder-1 --for hermes > "$HERMES_HOME/config.yaml"
    podkit client inventories/baremetal.py --for llm > "$(dirname "$(llm logs path)")/extra-openai-models.yaml"
    """
    if as_json and client:
        raise BadInput("--json and --for print different things: choose one")
    targets = load_targets(inventory, host_names)
    if client and client != "llm" and len(targets) > 1:
        names = ", ".join(t.name for t in targets)
        raise BadInput(
            f"--for {client} writes one host's settings but {len(targets)} are selected ({names}): pick one with --host"
        )
    settings = client_settings(targets)
    emit_settings(settings, {t.name: t.key for t in targets}, client, as_json, show_key)


def emit_settings(
    settings: list[tuple[ClientSettings, str | None]],
    keys: dict[str, str],
    client: str | None,
    as_json: bool,
    show_key: bool,
) -> None:
    """Print ``settings`` (with why a context is unknown): JSON, ``client``'s snippet alone on
    stdout, or the summary; warnings and notes on stderr. The keys show only with ``show_key``."""
    if as_json:
        rows = []
        for cs, problem in settings:
            row = {**cs.as_dict(), "warnings": ([problem] if problem else []) + warnings(cs)}
            if show_key:
                row["api_key"] = keys[cs.host]
            rows.append(row)
        click.echo(dumps(rows))
        return

    if not client:
        for index, (cs, problem) in enumerate(settings):
            if index:
                click.echo("")
            click.echo(clean(summary(cs, keys[cs.host] if show_key else None), lines=True), nl=False)
            say([problem] if problem else [])
            say(line for line in warnings(cs) if not (cs.note and line == f"{cs.host}: {cs.note}"))
        return

    problems = [problem for _, problem in settings if problem]
    if client == "hermes" and problems:
        raise click.ClickException(problems[0] + "; Hermes needs it: set vllm_max_model_len to a number")
    chosen = [cs for cs, _ in settings]
    try:
        text = render(client, chosen, key=keys[chosen[0].host] if show_key and client == "env" else None)
    except ConnectError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(clean(text, lines=True), nl=False)
    say(problems)
    for cs in chosen:
        say(warnings(cs, client))
    say(_notes(client, chosen, keys if show_key else None))


def _notes(client: str, chosen: list[ClientSettings], keys: dict[str, str] | None) -> list[str]:
    """How to hand ``client`` the key and the CA; the key itself only when ``keys`` (--show-key)."""
    lines = []
    for cs in chosen:
        lines += [line for line in notes(cs, client) if line not in lines]
    if keys and client == "llm":
        lines = [f"give llm the key once: llm keys set {LLM_KEY_NAME} --value {shlex.quote(keys[chosen[0].host])}"] + [
            line for line in lines if not line.startswith("give llm the key once")
        ]
    if keys and client in ("hermes", "openai"):
        lines.append("--show-key leaves the key out of it: export PODKIT_API_KEY before you start the client")
    cas = sorted({cs.ca_file for cs in chosen if cs.ca_file})
    if len(cas) > 1:
        lines.append(
            "SSL_CERT_FILE names one file: put the CA certificates in one (cat "
            + " ".join(shlex.quote(ca) for ca in cas)
            + " > podkit-cas.crt) and point it there"
        )
    return lines
