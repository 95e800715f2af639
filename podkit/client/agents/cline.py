"""Cline CLI: ``cline auth`` once, then ``cline PROMPT``.

Cline 3.0.65 keeps a provider's key only in its own settings file, in plain text
(``~/.cline/data/settings/providers.json``, mode 0600): ``cline auth -p openai -k KEY -m MODEL -b
URL`` writes it there ("Provider configured: openai-compatible"). It reads the key from no
variable and from no other file, and takes it only as an argument: ``cline auth`` refuses to run
without ``-k`` (piped in, it is not read), and the per-run ``-k`` of ``cline`` itself saves the key
to the same file too, dropping the base URL. So podkit prints the ``auth`` line with the key as
``"$PODKIT_API_KEY"``, for the shell to fill in once, and says where the key then is. Cline's
settings hold no context or output limit for an OpenAI-compatible provider.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import KEY_REF, PROMPT, Agent, Setup, ca_env, command, key_env, limits

SETTINGS = "~/.cline/data/settings/providers.json"


def render(cs: ClientSettings) -> Setup:
    limits(cs, "Cline")
    auth = command("cline", "auth", "-p", "openai", "-m", cs.model, "-b", cs.base_url)
    return Setup(
        host=cs.host,
        agent="cline",
        env=key_env(cs) | ca_env(cs, "NODE_EXTRA_CA_CERTS"),
        once=(f"{auth} -k {KEY_REF}",),
        run=command("cline", PROMPT),
        notes=(
            f"Cline keeps the key only in its own file, in plain text: {SETTINGS} (mode 0600); "
            "cline auth takes it as an argument, so it shows in the process list while that command runs",
            "Cline's per-run -k saves the key to the same file and drops the base URL: run cline auth instead",
            "Cline's settings take no context or output limit for this provider: the server bounds each answer",
            "Cline can leave its hub daemon (cline --cline-hub-daemon) running after it exits (seen after a refused "
            "key), with the environment it started with, PODKIT_API_KEY included: end it when done "
            "(pkill -f cline-hub-daemon)",
        ),
    )


AGENT = Agent(
    name="cline",
    title="Cline CLI",
    install="npm i -g cline@3.0.65",
    summary="Cline's cline auth line (the key kept in Cline's own file)",
    render=render,
    short="Cline",
    ignores_base_url=True,
)
