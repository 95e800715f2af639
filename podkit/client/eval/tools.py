"""The tool task: the model reads and writes workspace files through ``read_file`` / ``write_file``
tool calls, in a loop with a turn limit, and the task's tests judge what it wrote."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from podkit.client.eval.answers import answer_text
from podkit.client.eval.catalog import SYSTEM_PROMPT, Task
from podkit.client.eval.endpoint import Endpoint
from podkit.client.eval.scoring import cheated, judged, run_tests

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Replace a file of the workspace with new content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]


def workspace_file(work: Path, path: str) -> Path | None:
    """The file of the workspace ``path`` names (relative, or absolute inside it, links followed),
    or None when it leads anywhere else (``..``, another absolute path, a link out, a folder) or the
    system refuses the name (a NUL byte, too long)."""
    root = work.resolve()
    try:
        target = (root / path).resolve()
        return target if target.parent == root and not target.is_dir() else None
    except (OSError, ValueError):
        return None


def execute_tool(work: Path, name: str, arguments: str, protected: list[str]) -> str:
    """Run one tool call against the workspace; the answer the model sees (errors included)."""
    try:
        args = json.loads(arguments or "{}")
        path = str(args["path"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: arguments must be a JSON object with a 'path' ({type(exc).__name__}: {exc})"
    target = workspace_file(work, path)
    if target is None:
        return f"error: {path!r} is not a file of the workspace ({', '.join(sorted(p.name for p in work.iterdir()))})"
    try:
        if name == "read_file":
            return target.read_text(errors="replace") if target.is_file() else f"error: no file {path!r}"
        if name == "write_file":
            if target.name in protected:
                return f"error: {path!r} holds the tests, which must not change"
            if not isinstance(args.get("content"), str):
                return "error: write_file needs a 'content' string"
            target.write_text(args["content"])
            return f"wrote {len(args['content'])} characters to {target.name}"
    except (OSError, UnicodeError) as exc:
        return f"error: {path!r}: {type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) else exc}"
    return f"error: no tool named {name!r}; the tools are read_file and write_file"


def run_tool_task(endpoint: Endpoint, task: Task, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Offer the tools, execute the model's calls against a temporary workspace until it answers
    without calls (or the turn limit), then run the tests."""
    files = task.files()
    protected = task.tests()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{task.prompt}\n\nFiles: {', '.join(task.spec['files'])}"},
    ]
    transcript: list[dict[str, Any]] = []
    stop = "turn limit"
    with tempfile.TemporaryDirectory(prefix="podkit-eval-") as tmp:
        work = task.copy_workspace(Path(tmp))
        for _ in range(int(task.spec.get("max_turns", 8))):
            turn = endpoint.chat(messages, params, tools=TOOLS)
            step = turn.as_dict()
            transcript.append(step)
            if turn.error or not turn.tool_calls:
                stop = "error" if turn.error else "answered"
                break
            messages.append(
                {
                    "role": "assistant",
                    "content": turn.content or "",
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in turn.tool_calls
                    ],
                }
            )
            step["results"] = []
            for call in turn.tool_calls:
                result = execute_tool(work, call["name"], call["arguments"], protected)
                step["results"].append(result)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        for name in protected:  # the tests are the task's, whatever happened
            (work / name).write_text(files[name])
        changed = {
            p.name: p.read_text()
            for p in sorted(work.iterdir())
            if p.is_file() and p.name in files and p.read_text() != files[p.name]
        }
        tests = run_tests(task, work) if changed else None
    info = {
        "transcript": transcript,
        "stop": stop,
        "turns": len(transcript),
        "changed": changed,
        "tests": tests,
        "extracted": "\n".join(f"# {n}\n{t}" for n, t in changed.items()) or answer_text(transcript[-1]["content"]),
    }
    if not changed or tests is None:  # the tests run whenever a file changed
        return 0, {**info, "detail": f"no file changed ({stop} after {len(transcript)} turn(s))"}
    if cheated(tests):
        return 0, {**info, "detail": cheated(tests)}
    return (2 if tests["passed"] else 1), {**info, "detail": f"changed {', '.join(changed)}: {judged(tests)}"}
