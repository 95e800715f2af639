"""``podkit sandbox``: the local sandbox pod (a private sshd, a volume folder and a tiny model)."""

from __future__ import annotations

import sys

import click

from .output import emit


@click.group()
def sandbox():
    """The local sandbox pod: a private sshd, a volume folder and a tiny model.

    \b
    podkit sandbox up
    pyinfra -y inventories/sandbox.py deploy.py
    podkit verify inventories/sandbox.py
    """


@sandbox.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the host data as JSON.")
def sandbox_up(as_json):
    """Start the sandbox (idempotent) and print the inventory to use."""
    from podkit.sandbox.box import Sandbox, SandboxError
    from podkit.sandbox.sshd import SshdError

    box = Sandbox()
    try:
        data = box.up()
    except (SandboxError, SshdError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise click.ClickException(f"sandbox up: {first}") from None
    if as_json:
        emit(data, True, None)
        return
    click.echo(f"sandbox is up: ssh {data['ssh_user']}@{data['ssh_hostname']} -p {data['ssh_port']}", err=True)
    click.echo(f"volume: {data['podkit_volume']}   model: {data['vllm_model']}", err=True)
    click.echo(f"endpoint (after the deploy): http://{data['ssh_hostname']}:{data['podkit_edge_port']}/v1", err=True)
    click.echo("inventory: inventories/sandbox.py")
    click.echo("next: pyinfra -y inventories/sandbox.py deploy.py", err=True)


@sandbox.command("down")
def sandbox_down():
    """Stop the sandbox's vLLM and sshd. The volume (venv, model, caches) stays."""
    from podkit.sandbox.box import Sandbox

    result = Sandbox().down()
    click.echo(f"sandbox is down (supervisord: {result['supervisord']})", err=True)
    click.echo("inventories/sandbox.py refuses to load until: podkit sandbox up", err=True)


@sandbox.command("status")
@click.option("--json", "as_json", is_flag=True)
def sandbox_status(as_json):
    """Say whether the sandbox's sshd and vLLM run."""
    from podkit.sandbox.box import Sandbox

    status = Sandbox().status()

    def human(s):
        sshd = s["sshd"]
        click.echo(f"sshd: {'running on port %s' % sshd.get('port') if sshd.get('running') else 'stopped'}")
        click.echo(f"base URL: {s['base_url']}  (vLLM itself: 127.0.0.1:{s['vllm_port']})")
        click.echo(s["supervisord"])

    emit(status, as_json, human)
    sys.exit(0 if status["sshd"].get("running") else 3)
