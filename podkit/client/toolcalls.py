"""What a tool call looks like when it goes wrong, and which parser fixes it: verify's tool checks.

A coding agent depends on ``tool_calls``. vLLM fails them in two quiet ways
when the server's ``--tool-call-parser`` does not match the model: the call is
left as text in ``content`` (HTTP 200), or the parser swallows it and the reply
holds neither. :func:`silent_failure` tells those from a fair text answer, and
:func:`wrong_parser` names the parser the server runs (from its argv, read by
``podctl describe``), the one the model's family needs, and the fix.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletionFunctionToolParam

from podkit.client.serverinfo import ServerInfo
from podkit.plan.families import UnknownFamily, family_for
from podkit.settings import FLAGS

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Berlin", "Tokyo"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def schema_errors(value: Any, schema: dict[str, Any], where: str = "arguments") -> list[str]:
    """The ways ``value`` breaks ``schema`` (the JSON-schema subset tool definitions use)."""
    errors: list[str] = []
    kind = schema.get("type")
    types: dict[str, type | tuple[type, ...]] = {
        "object": dict,
        "string": str,
        "array": list,
        "boolean": bool,
        "integer": int,
        "number": (int, float),
    }
    if kind in types and (
        not isinstance(value, types[kind]) or (kind in ("integer", "number") and isinstance(value, bool))
    ):
        return [f"{where} should be {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}={value!r} is not one of {schema['enum']}")
    if kind == "object":
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{where} lacks required {name!r}")
        for name, item in value.items():
            if name in props:
                errors += schema_errors(item, props[name], f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where} has unexpected {name!r}")
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{where}[{index}]")
    return errors


#: Tool-call markup a model writes -> the parser that reads it (the first match wins).
MARKUPS = (
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
)


def silent_failure(
    content: str | None, finish_reason: str | None, tokens: int | None, reasoning: bool = False
) -> str | None:
    """Why an HTTP 200 answer to ``tool_choice="auto"`` without ``tool_calls`` hides a
    failed call, or None when plain text is a fair answer."""
    text = content or ""
    if any(markup in text for markup, _ in MARKUPS) or '"arguments"' in text:
        return (
            f"the model wrote a tool call as plain text (HTTP 200, finish_reason {finish_reason}, "
            f"content {text[:80]!r})"
        )
    if not text and not reasoning and finish_reason == "stop" and (tokens or 0) > 1:
        return (
            f"the model answered {tokens} tokens but the reply holds neither text nor a tool call "
            "(HTTP 200, finish_reason stop), so the tool parser swallowed the call"
        )
    return None


def expected_parser(info: ServerInfo | None, content: str = "") -> tuple[str, str] | None:
    """(who needs it, parser): the served model's family in podkit's registry, else the markup it wrote."""
    if info is not None and (info.model_type or info.text_model_type):
        config = {"model_type": info.model_type or "", "text_config": {"model_type": info.text_model_type or ""}}
        try:
            name, family = family_for(info.model or "", config)
        except UnknownFamily:
            pass
        else:
            arch = f" ({info.architectures[0]})" if info.architectures else ""
            return f"{name} models{arch}", family.tool_call_parser
    for markup, parser in MARKUPS:
        if markup in content:
            return f"{markup} calls", parser
    return None


def wrong_parser(info: ServerInfo | None, content: str = "") -> str:
    """The parser the server runs, the one the model needs, and the fix."""
    running = info.flag(FLAGS["tool_call_parser"]) if info is not None else None
    expected = expected_parser(info, content)
    if expected is None:
        running_text = f"the server runs --tool-call-parser {running}, which" if running else "vllm_tool_call_parser"
        return f"{running_text} does not match the model; set vllm_tool_call_parser for its family and re-apply"
    who, parser = expected
    if running == parser:
        return (
            f"the server runs --tool-call-parser {running}, the parser {who} need, yet the call stayed "
            "text: the model's chat template does not write the markup that parser reads"
        )
    if running:
        return (
            f"the server runs --tool-call-parser {running} but {who} need {parser}: "
            f"set vllm_tool_call_parser = '{parser}' (or 'auto') and re-apply"
        )
    unknown = f" (the server's flags are unknown: {info.error})" if info is not None and info.error else ""
    return f"vllm_tool_call_parser does not match the model: {who} need {parser}{unknown}"
