"""A stdio MCP server with one tool, ``get_weather``, that records every call: the tool an agent
that takes MCP servers (Continue CLI) is given, so the tiny model's call is executed, not only parsed.

Standard library only (the agents run it with the system's python3): newline-delimited JSON-RPC 2.0
on stdin/stdout, as the MCP stdio transport is. Calls are appended, one JSON object a line, to the
file named by the first argument.
"""

import json
import sys

TOOL = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}


def answer(request: dict, calls_file: str) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if "id" not in request:  # a notification (notifications/initialized): nothing to say
        return None
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2024-11-05"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "podkit-weather", "version": "0.1.0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        with open(calls_file, "a") as f:
            f.write(json.dumps({"name": params.get("name"), "arguments": params.get("arguments")}) + "\n")
        text = json.dumps({"city": (params.get("arguments") or {}).get("city"), "forecast": "sunny", "temp": 21})
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), sys.argv[1])
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
