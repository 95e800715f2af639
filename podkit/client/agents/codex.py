"""Codex CLI: ``~/.codex/config.toml`` with a ``podkit`` model provider.

Codex ignores ``OPENAI_BASE_URL`` and speaks only the Responses API (``wire_api = "chat"`` is
refused), so it needs its own provider block; the key is named by ``env_key``. Its config has no
output limit (config.schema.json of Codex lists none): the server bounds each answer by the
context. ``model_auto_compact_token_limit`` keeps room for one answer.
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import KEY_VAR, PROMPT, Agent, File, Setup, ca_env, command, header, key_env, limits, toml_str

#: The provider id in ``model_providers``.
PROVIDER = "podkit"
PATH = "~/.codex/config.toml"


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "Codex")
    rows = [
        ("model", toml_str(cs.model)),
        ("model_provider", toml_str(PROVIDER)),
        ("model_context_window", str(context)),
        ("model_auto_compact_token_limit", str(max(1, context - output))),
    ]
    provider = [
        ("name", toml_str(f"podkit {cs.host}")),
        ("base_url", toml_str(cs.base_url)),
        ("env_key", toml_str(KEY_VAR)),
        ("wire_api", toml_str("responses")),
    ]
    text = header(cs, "Codex CLI", "codex")
    text += "".join(f"{key} = {value}\n" for key, value in rows)
    text += f"\n[model_providers.{PROVIDER}]\n"
    text += "".join(f"{key} = {value}\n" for key, value in provider)
    return Setup(
        host=cs.host,
        agent="codex",
        files=(File(PATH, text),),
        env=key_env(cs) | ca_env(cs, "CODEX_CA_CERTIFICATE"),
        run=command("codex", "exec", "--skip-git-repo-check", PROMPT),
        notes=(
            '"Model metadata for ... not found" is harmless: Codex does not know the served model',
            "Codex's config has no output limit: the server bounds each answer by the context",
        ),
    )


AGENT = Agent(
    name="codex",
    title="Codex CLI",
    install="npm i -g @openai/codex@0.171.0",
    summary="Codex CLI's ~/.codex/config.toml (a Responses API provider)",
    render=render,
    ignores_base_url=True,
    short="Codex",
)
