"""podkit's command line: one module per command group, installed as the ``podkit`` command.

    podkit sandbox up            start the local sandbox pod (idempotent)
    podkit verify INVENTORY      prove an endpoint works for a coding agent
    podkit plan MODEL --gpu H100 will the model and its context fit
    podkit key rotate            make a new API key (then re-apply the deploy)
    podkit status INVENTORY      up or stopped, idle minutes, spend, per host
    podkit down INVENTORY        stop the pods (RunPod) or the servers (bare metal)
    podkit up INVENTORY          resume (or move), deploy and print the client settings
    podkit create INVENTORY M    a RunPod pod from the plan, deployed and verified

``podkit ...`` in a checkout is the same command. Every command takes
--json where it reports something; messages go to stderr.
"""

from __future__ import annotations

import os
import signal


def _interrupted_at_start(_signum, _frame):  # no Python code of podkit's has run: say so, no traceback
    os.write(2, b"interrupted (Ctrl-C) as podkit started: nothing ran\n")
    os._exit(130)


try:  # a Ctrl-C during the imports below (click, the command modules) ends quietly; restored after them
    _SIGINT_BEFORE = signal.signal(signal.SIGINT, _interrupted_at_start)
except ValueError:  # imported outside the main thread: it cannot take the signal, nor needs to
    _SIGINT_BEFORE = None

import click  # noqa: E402

from podkit import __version__  # noqa: E402
from podkit.text import clean  # noqa: E402


class Podkit(click.Group):
    """The command group: an error's message (often the host's own words) is printed as data."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            exc.message = clean(exc.message)  # type: ignore[misc]  # Final in click's types; click's own subclasses set it
            raise


@click.group(cls=Podkit, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="podkit")
def cli():
    """podkit: turn an SSH-reachable GPU box into a verified vLLM endpoint."""


def _register() -> None:
    from . import bench, cache, create, evaluate, key, lifecycle, plan, sandbox, verify
    from .client import client as client_command
    from .tunnel import tunnel as tunnel_command

    cli.add_command(sandbox.sandbox)
    cli.add_command(verify.verify)
    cli.add_command(plan.plan)
    cli.add_command(cache.cache)
    cli.add_command(bench.bench)
    cli.add_command(evaluate.eval_group)
    cli.add_command(key.key)
    cli.add_command(client_command)
    cli.add_command(tunnel_command)
    cli.add_command(lifecycle.up)
    cli.add_command(lifecycle.down)
    cli.add_command(lifecycle.status)
    cli.add_command(create.create)


_register()
if _SIGINT_BEFORE is not None:  # each command's own Ctrl-C: click's "Aborted!" (podkit up: its own line)
    signal.signal(signal.SIGINT, _SIGINT_BEFORE)


def main() -> None:
    """The ``podkit`` console script."""
    cli()
