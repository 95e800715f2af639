"""The LiteLLM proxy, a bridge on the user's machine, and Gemini CLI through it.

vLLM serves the OpenAI API (and Anthropic's Messages); a client that speaks another (Gemini CLI
speaks only the Gemini API) goes through a LiteLLM proxy run on the user's own machine, on
loopback, in front of the endpoint: LiteLLM serves chat, Messages, Responses and the Gemini routes
to any client and asks the endpoint's chat completions. Its config names the key by reference
(``os.environ/PODKIT_API_KEY``), gives the model its context and output limit (``model_info``,
and ``max_tokens`` as the default of each call), and makes the same key the proxy's master key:
LiteLLM 1.108.7 refuses to start without one, and then a client of the proxy sends that key, to
the proxy on loopback only. A wrong key is answered 400 "No connected db." (LiteLLM looks it up
among virtual keys, and has no database).

Gemini CLI reads the proxy's address from ``GOOGLE_GEMINI_BASE_URL`` and the key from
``GEMINI_API_KEY``; ``~/.gemini/settings.json`` selects that key as its way in (0.61.0 stops at
"Invalid auth method selected" without it, whatever the environment says) and turns its usage
statistics off.
"""

from __future__ import annotations

import shlex

from podkit.client.connect import ClientSettings

from .base import KEY_REF, KEY_VAR, PROMPT, Agent, File, Setup, ca_env, command, header, json_text, key_env, limits
from .base import yaml_str as q

LITELLM_PATH = "~/.config/litellm/podkit.yaml"
GEMINI_PATH = "~/.gemini/settings.json"
#: Where the proxy listens: loopback on the user's machine, LiteLLM's own default port.
PROXY = "http://127.0.0.1:4000"


def litellm(cs: ClientSettings) -> Setup:
    context, output = limits(cs, "LiteLLM")
    key = q(f"os.environ/{KEY_VAR}")
    lines = [
        "model_list:",
        f"  - model_name: {q(cs.model)}",
        "    litellm_params:",
        f"      model: {q('openai/' + cs.model)}",
        f"      api_base: {q(cs.base_url)}",
        f"      api_key: {key}",
        f"      max_tokens: {output}",
        "    model_info:",
        f"      max_input_tokens: {context}",
        f"      max_output_tokens: {output}",
        "general_settings:",
        f"  master_key: {key}",
    ]
    run = command("litellm", "--config", LITELLM_PATH, "--host", "127.0.0.1", "--port", PROXY.rsplit(":", 1)[1])
    return Setup(
        host=cs.host,
        agent="litellm",
        files=(File(LITELLM_PATH, header(cs, "LiteLLM proxy", "litellm") + "\n".join(lines) + "\n"),),
        env=key_env(cs) | ca_env(cs, "SSL_CERT_FILE") | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        run=run,
        notes=(
            "LiteLLM runs on your machine, not on the host: it serves " + PROXY + " on loopback",
            "Its clients send the podkit key as the proxy's master key, to the proxy only",
            'A wrong key is answered 400 "No connected db." (LiteLLM looks it up among virtual keys)',
        ),
    )


def gemini(cs: ClientSettings) -> Setup:
    limits(cs, "Gemini CLI")
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": False}}
    env = key_env(cs) | {"GOOGLE_GEMINI_BASE_URL": shlex.quote(PROXY), "GEMINI_API_KEY": KEY_REF}
    return Setup(
        host=cs.host,
        agent="gemini",
        files=(File(GEMINI_PATH, json_text(settings)),),
        env=env,
        run=command("gemini", "--skip-trust", "-m", cs.model, "-p", PROMPT),
        notes=(
            "Gemini CLI speaks only the Gemini API, which vLLM does not serve: start the LiteLLM proxy first "
            "(--for litellm), on this machine",
            "The settings file replaces ~/.gemini/settings.json: merge it by hand into one you keep",
            "--skip-trust runs it in a folder it has not been told to trust; leave it out to be asked",
        ),
    )


LITELLM = Agent(
    name="litellm",
    title="LiteLLM proxy (the bridge)",
    install="pip install 'litellm[proxy]==1.108.7'",
    summary="a LiteLLM proxy config: the bridge for clients of APIs vLLM does not serve",
    render=litellm,
    short="LiteLLM",
)
GEMINI = Agent(
    name="gemini",
    title="Gemini CLI (through the LiteLLM proxy)",
    install="npm i -g @google/gemini-cli@0.61.0",
    summary="Gemini CLI's variables and settings.json, pointed at the LiteLLM proxy",
    render=gemini,
    short="Gemini CLI",
    ignores_base_url=True,
)
