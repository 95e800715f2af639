"""Sampling profiles for the battery: podkit's coding profile and the served model's own chat defaults."""

from __future__ import annotations

from typing import Any

from podkit.plan import modelfiles
from podkit.text import clean

#: Sampling profiles. top_k 0 means "off" in vLLM 0.32 and 0.33; top_k and
#: repetition_penalty travel in ``extra_body`` (they are not OpenAI parameters).
PROFILES: dict[str, dict[str, float]] = {
    # podkit's coding profile (also the deploy's server default, group_data vllm_generation_config)
    "coding": {"temperature": 0.15, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0},
    # the served model's chat defaults: at run time its generation_config.json replaces these
    # common Qwen values when the host can show it (the record says which was used)
    "chat": {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
}
MODEL_DEFAULTS_PROFILE = "chat"
#: what vLLM uses for a sampling key that generation_config.json leaves out
VLLM_NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}


def resolve_profiles(names, generation_config: dict[str, Any] | None, origin: str) -> dict[str, dict[str, Any]]:
    """``{name: {"params": {...}, "source": "..."}}`` for the chosen profile names.

    ``generation_config`` is the served model's generation_config.json (None when
    unreadable; ``origin`` says where it came from or why it is missing).
    """
    profiles = {}
    for name in names:
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; the profiles are {', '.join(PROFILES)}")
        params, source = dict(PROFILES[name]), "podkit's coding profile"
        if name == MODEL_DEFAULTS_PROFILE:
            given = generation_config or {}
            sampling = {k: given[k] for k in VLLM_NEUTRAL if k in given}
            if sampling:
                params, source = {**VLLM_NEUTRAL, **sampling}, f"the model's generation_config.json: {origin}"
            else:
                source = f"common Qwen chat defaults (no sampling values in generation_config.json: {origin})"
        profiles[name] = {"params": params, "source": source}
    return profiles


def generation_config_of(info) -> tuple[dict[str, Any] | None, str]:
    """(the served model's generation_config.json or None, where it came from or why not), from
    the host's ``podctl describe`` answer (a ServerInfo): no remote command of its own."""
    found = info.generation_config
    if found is None:
        return None, info.error or "the served model is not a folder on the host"
    path = clean(found.get("path") or "generation_config.json")
    if "error" in found:
        return None, f"{path}: {clean(found['error'])}"
    try:  # the model's own file is data: a value vLLM would refuse is not sent as a profile
        return modelfiles.generation(path, found.get("config")), path
    except modelfiles.ModelError as exc:
        return None, str(exc)
