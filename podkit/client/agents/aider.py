"""aider: ``.aider.model.metadata.json`` and ``.aider.model.settings.yml`` in the project folder,
``--model openai/<name>`` and the ``OPENAI_*`` variables.

aider reads both files from the folder it runs in (and the git root, and ``~``). The metadata, in
litellm's model-registry format with zero costs, gives it the context (else "Unknown context
window size and costs"); litellm's ``max_output_tokens`` there is not sent, so the settings file
bounds each answer with ``extra_params: {max_tokens}`` (aider otherwise sends none, and one answer
can run to the end of the context).
"""

from __future__ import annotations

from podkit.client.connect import ClientSettings

from .base import PROMPT, Agent, File, Setup, command, json_text, limits, openai_env, yaml_str

METADATA = ".aider.model.metadata.json"
SETTINGS = ".aider.model.settings.yml"


def render(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "aider")
    model = f"openai/{cs.model}"
    metadata = {
        model: {
            "max_input_tokens": context,
            "max_output_tokens": output,
            "max_tokens": output,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }
    settings = f"- name: {yaml_str(model)}\n  extra_params:\n    max_tokens: {output}\n"
    args = ("--model", model)
    return Setup(
        host=cs.host,
        agent="aider",
        files=(File(METADATA, json_text(metadata)), File(SETTINGS, settings)),
        env=openai_env(cs),
        args=args,
        run=command("aider", *args, "--message", PROMPT, "--yes-always", "--no-check-update"),
        notes=("aider edits files as text: it sends the model no tools",),
    )


AGENT = Agent(
    name="aider",
    title="aider",
    install="pip install aider-chat==0.86.2",
    summary="aider's .aider.model.metadata.json and .aider.model.settings.yml, with --model openai/NAME",
    render=render,
)
