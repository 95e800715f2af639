"""``podkit key``: the project's API key (one file, shared by the server and every client)."""

from __future__ import annotations

import click


@click.group()
def key():
    """The project's API key (one file, shared by the server and every client)."""


@key.command("rotate")
@click.option(
    "--file",
    "key_file",
    default=".secrets/api_key",
    show_default=True,
    help="The controller's key file (podkit_api_key_file).",
)
def key_rotate(key_file):
    """Make a new key. Re-apply the deploy to give it to the servers."""
    from podkit import project_path
    from podkit.keys import rotate_key

    rotate_key(project_path(key_file))
    click.echo(f"new key written to {key_file}; now run: pyinfra -y INVENTORY deploy.py", err=True)
