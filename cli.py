"""podkit's command line.

    python cli.py sandbox up            start the local sandbox pod (idempotent)
    python cli.py verify INVENTORY      prove an endpoint works for a coding agent
    python cli.py key rotate            make a new API key (then re-apply the deploy)

Every command takes --json where it reports something; messages go to stderr.
"""

from __future__ import annotations

import json
import sys

import click

from podkit import __version__


def emit(data, as_json: bool, human) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human(data)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podkit")
def cli():
    """podkit: turn an SSH-reachable GPU box into a verified vLLM endpoint."""


@cli.group()
def sandbox():
    """The local sandbox pod: a private sshd, a volume folder and a tiny model.

    \b
    python cli.py sandbox up
    pyinfra -y inventories/sandbox.py deploy.py
    python cli.py verify inventories/sandbox.py
    """


@sandbox.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the host data as JSON.")
def sandbox_up(as_json):
    """Start the sandbox (idempotent) and print the inventory to use."""
    from podkit.sandbox import Sandbox

    box = Sandbox()
    data = box.up()
    if as_json:
        emit(data, True, None)
        return
    click.echo(f"sandbox is up: ssh {data['ssh_user']}@{data['ssh_hostname']} -p {data['ssh_port']}", err=True)
    click.echo(f"volume: {data['podkit_volume']}   model: {data['vllm_model']}", err=True)
    click.echo("inventory: inventories/sandbox.py")
    click.echo("next: pyinfra -y inventories/sandbox.py deploy.py", err=True)


@sandbox.command("down")
def sandbox_down():
    """Stop the sandbox's vLLM and sshd. The volume (venv, model, caches) stays."""
    from podkit.sandbox import Sandbox

    result = Sandbox().down()
    click.echo(f"sandbox is down (runner: {result['runner']})", err=True)


@sandbox.command("status")
@click.option("--json", "as_json", is_flag=True)
def sandbox_status(as_json):
    """Say whether the sandbox's sshd and vLLM run."""
    from podkit.sandbox import Sandbox

    status = Sandbox().status()

    def human(s):
        sshd = s["sshd"]
        click.echo(f"sshd: {'running on port %s' % sshd.get('port') if sshd.get('running') else 'stopped'}")
        click.echo(f"vllm port: {s['vllm_port']}")
        click.echo(s["runner"])

    emit(status, as_json, human)
    sys.exit(0 if status["sshd"].get("running") else 3)


def load_hosts(inventory: str, host_names: tuple[str, ...] = ()):
    """(name, Settings, data) for each host of a pyinfra inventory, with group_data applied
    exactly as the deploy sees it."""
    from podkit import PROJECT_ROOT
    from podkit.config import Settings, SettingsError
    from podkit.inventory import InventoryError, load_inventory

    try:
        loaded = load_inventory(inventory, PROJECT_ROOT)
    except InventoryError as exc:
        raise click.ClickException(f"cannot load {exc}")
    hosts = []
    for host in loaded:
        if host_names and host.name not in host_names:
            continue
        try:
            settings = Settings.from_mapping(host.data)
        except SettingsError as exc:
            raise click.ClickException(f"{host.name}: {exc}")
        hosts.append((host.name, settings, host.data))
    if not hosts:
        wanted = f" named {', '.join(host_names)}" if host_names else ""
        raise click.BadParameter(f"no hosts{wanted} in {inventory}")
    return hosts


def endpoint_url(name: str, settings, data) -> str:
    if data.get("podkit_endpoint_url"):
        return data["podkit_endpoint_url"]
    address = data.get("ssh_hostname") or name
    if settings.host not in ("0.0.0.0", "::"):
        address = settings.host
    return f"http://{address}:{settings.port}"


@cli.command()
@click.argument("inventory")
@click.option("--host", "host_names", multiple=True, help="Only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds per request.")
def verify(inventory, host_names, as_json, timeout):
    """Prove each host's endpoint works for a coding agent. Changes nothing.

    Checks /health, that /v1/models refuses a request without the key and
    lists the served model with it, a chat completion, a tool call with
    tool_choice "auto", and a named tool call whose arguments must match a
    strict schema. The key is read from the same file the deploy used.

    \b
    Exit codes: 0 all pass, 1 other failure, 2 bad input,
    3 unreachable, 4 auth, 5 tool calling.

    \b
    python cli.py verify inventories/sandbox.py
    python cli.py verify inventories/runpod.py --host coder-1 --json
    """
    from podkit import project_path
    from podkit.secrets import ApiKeyError, read_key
    from podkit.verify import Verifier, worst

    reports = []
    for name, settings, data in load_hosts(inventory, host_names):
        try:
            key = read_key(project_path(settings.api_key_file))
        except ApiKeyError as exc:
            raise click.ClickException(str(exc))
        if key is None:
            raise click.ClickException(
                f"{name}: no API key at {settings.api_key_file}; apply the deploy first (it creates the key)"
            )
        report = Verifier(endpoint_url(name, settings, data), key, settings.served_model_name, timeout).run()
        reports.append((name, report))

    if as_json:
        click.echo(json.dumps({name: r.as_dict() for name, r in reports}, indent=2, sort_keys=True))
    else:
        for name, report in reports:
            click.echo(f"{name}  {report.endpoint}  model {report.model}")
            for check in report.checks:
                mark = click.style("PASS", fg="green") if check.ok else click.style("FAIL", fg="red")
                click.echo(f"  {mark}  {check.name:<26} {check.seconds:6.2f}s  {check.detail}")
    sys.exit(int(worst(report.outcome for _, report in reports)))


@cli.group()
def key():
    """The project's API key (one file, shared by the server and every client)."""


@key.command("rotate")
@click.option("--file", "key_file", default=".secrets/api_key", show_default=True,
              help="The controller's key file (podkit_api_key_file).")
def key_rotate(key_file):
    """Make a new key. Re-apply the deploy to give it to the servers."""
    from podkit import project_path
    from podkit.secrets import rotate_key

    rotate_key(project_path(key_file))
    click.echo(f"new key written to {key_file}; now run: pyinfra -y INVENTORY deploy.py", err=True)


if __name__ == "__main__":
    cli()
