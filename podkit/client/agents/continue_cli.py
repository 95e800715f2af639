"""Continue CLI (``cn``): ``~/.continue/config.yaml``, schema v1, one model.

The key is ``${{ secrets.PODKIT_API_KEY }}``, which ``cn`` resolves from its environment;
``defaultCompletionOptions`` carries the context and the output limit; ``capabilities:
[tool_use]`` tells it the model calls tools. A pinned CA goes in ``requestOptions.caBundlePath``.
The field names are those of ``@continuedev/config-yaml``'s schema (``schemas/models.ts``).
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import KEY_VAR, PROMPT, Agent, File, Setup, command, header, key_env, limits, yaml_str

PATH = "~/.continue/config.yaml"


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "Continue")
    lines = [
        f"name: {yaml_str(f'podkit {cs.host}')}",
        'version: "1.0.0"',
        'schema: "v1"',
        "models:",
        f"  - name: {yaml_str(f'{cs.model} on {cs.host}')}",
        '    provider: "openai"',
        f"    model: {yaml_str(cs.model)}",
        f"    apiBase: {yaml_str(cs.base_url)}",
        f"    apiKey: {yaml_str('${{ secrets.' + KEY_VAR + ' }}')}",
        "    roles: [chat, edit, apply]",
        "    capabilities: [tool_use]",
        "    defaultCompletionOptions:",
        f"      contextLength: {context}",
        f"      maxTokens: {output}",
    ]
    if cs.ca_file:
        lines += ["    requestOptions:", f"      caBundlePath: {yaml_str(cs.ca_file)}"]
    return Setup(
        host=cs.host,
        agent="continue",
        files=(File(PATH, header(cs, "Continue CLI", "continue") + "\n".join(lines) + "\n"),),
        env=key_env(cs),
        run=command("cn", "--config", PATH, "-p", PROMPT),
        notes=("cn -p has no turn limit: a model that keeps calling tools runs until you stop it",),
    )


AGENT = Agent(
    name="continue",
    title="Continue CLI",
    install="npm i -g @continuedev/cli@1.5.47",
    summary="Continue CLI's ~/.continue/config.yaml",
    render=render,
    short="Continue",
)
