"""The eval battery: five small coding tasks, run N times per sampling profile, scored automatically.

Each task is a folder of data in ``podkit/eval_tasks/<task>/``: ``task.json``
(kind, which files the prompt shows, the rubric), ``prompt.md`` and a
``workspace/`` of files, with the task's own unittest tests where it has them.

=========  ==========================================  ==========================================
task       the model is asked to                       correctness (0-2)
=========  ==========================================  ==========================================
explain    explain a module                            keyword rubric: 2 when it names most of the
                                                       module's key functions and behaviour, 1 some
bugfix     fix a described bug (whole file or diff)    tests pass 2, applies but fails 1, nothing
                                                       usable 0
feature    implement a narrow feature                  the same, through the task's tests
refactor   refactor a long function for readability    tests pass and the longest function shrank
                                                       to <= 75% 2, one of the two 1
tools      change two related files with read_file /   tests pass 2, files written but failing 1,
           write_file tools, in a loop (turn limit)    nothing written 0
=========  ==========================================  ==========================================

Stability (0-2) compares a task's N runs: 2 when every run scored the same and
their outputs are alike (mean pairwise difflib ratio of the normalised code or
answer >= 0.8), 1 when only one of the two holds, else 0. Totals are per
profile; two totals that differ by less than 10% of the possible score are
reported as noise.

Model-written code runs on the controller, with its Python, in a temporary
copy of the workspace, under a time limit: it is not sandboxed further.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import openai

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
TASK_ORDER = ("explain", "bugfix", "feature", "refactor", "tools")
RECORD_FORMAT = "podkit-eval/1"

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

SYSTEM_PROMPT = "You are a careful senior Python engineer."
NOISE_SHARE = 0.10  # differences under this share of the possible score are noise
SIMILAR = 0.8  # mean pairwise similarity at which runs count as alike
TEST_TIMEOUT = 60.0


# ---------------------------------------------------------------- tasks

@dataclass
class Task:
    name: str
    spec: dict[str, Any]
    prompt: str
    workspace: Path

    @property
    def kind(self) -> str:
        return self.spec["kind"]

    def files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.workspace.iterdir()) if p.is_file()}

    def tests(self) -> list[str]:
        return [name for name in self.files() if name.startswith("test_")]


def load_tasks(names: tuple[str, ...] | list[str] = TASK_ORDER, root: Path = TASKS_DIR) -> list[Task]:
    tasks = []
    for name in names:
        folder = root / name
        if not (folder / "task.json").is_file():
            raise ValueError(f"unknown eval task {name!r}; the tasks are {', '.join(TASK_ORDER)}")
        spec = json.loads((folder / "task.json").read_text())
        tasks.append(Task(name, spec, (folder / "prompt.md").read_text().strip(), folder / "workspace"))
    return tasks


def task_messages(task: Task) -> list[dict[str, Any]]:
    """The chat for a one-answer task: the prompt, then each file it shows in a fenced block."""
    files = task.files()
    shown = "\n\n".join(f"`{name}`:\n```python\n{files[name].rstrip()}\n```" for name in task.spec.get("show", []))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"{task.prompt}\n\n{shown}"}]


# ---------------------------------------------------------------- profiles

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
            sampling = {k: generation_config[k] for k in VLLM_NEUTRAL if k in (generation_config or {})}
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
    if "error" in found:
        return None, f"{found['path']}: {found['error']}"
    return found["config"], found["path"]


# ---------------------------------------------------------------- talking to the endpoint

@dataclass
class Turn:
    """One chat completion: what came back (raw), or why nothing did."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    max_tokens: int | None = None
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Unreachable(RuntimeError):
    """The endpoint cannot be reached (or, with ``auth``, refuses the key): the host's eval stops."""

    def __init__(self, message: str, auth: bool = False):
        super().__init__(message)
        self.auth = auth


def tokenizer_counter(base_url: str, api_key: str, model: str, timeout: float = 30.0):
    """A function (messages, tools) -> (prompt tokens, server context) from vLLM's /tokenize, or None."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def count(messages, tools):
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        request = urllib.request.Request(
            f"{base_url.rstrip('/')}/tokenize", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
        )
        try:
            with opener.open(request, timeout=timeout) as response:
                answer = json.loads(response.read())
            return int(answer["count"]), answer.get("max_model_len")
        except (OSError, ValueError, KeyError, TypeError):
            return None

    return count


class Endpoint:
    """Sends chats to ``model`` with a sampling profile; ``max_tokens`` is trimmed to what the context leaves."""

    def __init__(self, client, model: str, max_tokens: int, count_tokens: Callable | None = None):
        self.client, self.model, self.max_tokens, self.count_tokens = client, model, max_tokens, count_tokens

    def chat(self, messages, params: dict[str, Any], tools=None) -> Turn:
        turn = Turn(max_tokens=self.max_tokens)
        counted = self.count_tokens(messages, tools) if self.count_tokens else None
        if counted:
            turn.prompt_tokens, context = counted
            if context:
                room = int(context) - turn.prompt_tokens
                if room < 1:
                    turn.error = f"the prompt is {turn.prompt_tokens} tokens; the server's context is {context}"
                    return turn
                turn.max_tokens = min(self.max_tokens, room)
        kwargs: dict[str, Any] = {
            "model": self.model, "messages": messages, "max_tokens": turn.max_tokens,
            "temperature": params["temperature"], "top_p": params["top_p"],
            "extra_body": {"top_k": params["top_k"], "repetition_penalty": params["repetition_penalty"]},
        }
        if tools:
            kwargs.update(tools=tools, tool_choice="auto")
        started = time.monotonic()
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.APIError as exc:
            # a timeout fails this run only; a refused connection or key stops the host's eval
            if isinstance(exc, (openai.APIConnectionError, openai.AuthenticationError)) and not isinstance(
                    exc, openai.APITimeoutError):
                raise Unreachable(f"{type(exc).__name__}: {exc}", isinstance(exc, openai.AuthenticationError)) from None
            turn.error, turn.seconds = f"{type(exc).__name__}: {exc}", time.monotonic() - started
            return turn
        turn.seconds = time.monotonic() - started
        choice = response.choices[0]
        message = choice.message
        turn.content, turn.finish_reason = message.content, choice.finish_reason
        turn.reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        turn.tool_calls = [
            {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
            for call in (message.tool_calls or [])
        ]
        usage = getattr(response, "usage", None)
        if usage is not None:
            turn.prompt_tokens, turn.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        return turn


# ---------------------------------------------------------------- reading answers

FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchError(ValueError):
    """A unified diff that does not apply."""


def answer_text(content: str | None) -> str:
    """The answer without a reasoning trace left inline."""
    return THINK.sub("", content or "").strip()


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, in order."""
    return [(lang.lower(), body) for lang, body in FENCE.findall(text)]


def looks_like_diff(text: str) -> bool:
    return any(HUNK.match(line) for line in text.splitlines())


def _diff_sections(diff: str, target: str) -> list[str]:
    """The hunk lines for ``target``: the sections whose ``+++`` names it, else every section."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    lines = diff.splitlines()
    for index, line in enumerate(lines):
        header = line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ ")
        if header or line.startswith("diff --git"):
            sections.append(("", []))
        elif line.startswith("+++ ") and not sections[-1][1]:
            sections[-1] = (line[4:].split("\t")[0].strip(), [])
        elif not line.startswith("index "):
            sections[-1][1].append(line)
    named = [body for name, body in sections if name and Path(name).name == target]
    return [line for body in (named or [body for _, body in sections]) for line in body]


def _find_block(lines: list[str], block: list[str], near: int) -> int | None:
    if not block:
        return max(0, min(near, len(lines)))
    for same in (lambda a, b: a.rstrip() == b.rstrip(), lambda a, b: a.strip() == b.strip()):
        starts = sorted(range(len(lines) - len(block) + 1), key=lambda i: abs(i - near))
        for start in starts:
            if all(same(lines[start + i], block[i]) for i in range(len(block))):
                return start
    return None


def apply_unified_diff(original: str, diff: str, target: str = "") -> str:
    """``original`` with the hunks of ``diff`` applied. Context is matched by content near the stated
    line (models miscount lines), trailing whitespace ignored; raises :class:`PatchError`."""
    hunks: list[tuple[int, list[str], list[str]]] = []
    for line in _diff_sections(diff, target):
        match = HUNK.match(line)
        if match:
            hunks.append((int(match.group(1)), [], []))
        elif hunks and not line.startswith("\\"):
            tag, text = (line[0], line[1:]) if line[:1] in (" ", "-", "+") else (" ", line)
            if tag != "+":
                hunks[-1][1].append(text)
            if tag != "-":
                hunks[-1][2].append(text)
    if not hunks:
        raise PatchError("the diff has no hunk")
    lines, offset = original.splitlines(), 0
    for number, (start, old, new) in enumerate(hunks, 1):
        at = _find_block(lines, old, start - 1 + offset)
        if at is None:
            raise PatchError(f"hunk {number} does not match the file")
        lines[at:at + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + "\n"


def _top_level(tree: ast.Module) -> dict[str, ast.stmt]:
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first - 1, node.end_lineno


def splice(original: str, fragment: str) -> str:
    """``original`` with ``fragment``'s top-level functions and classes in place of the ones of the same
    name (new ones appended) and its new imports and module-level statements added after the imports:
    for an answer that shows only the changed function."""
    tree, part = ast.parse(original), ast.parse(fragment)
    lines, piece = original.splitlines(), fragment.splitlines()
    old_defs, new_defs = _top_level(tree), _top_level(part)
    extra = [node for node in part.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
             and not (isinstance(node, ast.If) and "__name__" in ast.unparse(node.test))]
    appended = []
    for name, node in new_defs.items():
        start, end = _span(node)
        if name not in old_defs:
            appended += ["", ""] + piece[start:end]
    for node in sorted((old_defs[n] for n in new_defs if n in old_defs), key=lambda n: -n.lineno):
        start, end = _span(node)
        new_start, new_end = _span(new_defs[node.name])
        lines[start:end] = piece[new_start:new_end]
    missing = [line for node in extra for line in piece[node.lineno - 1:node.end_lineno] if line not in lines]
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    docstring = tree.body[:1] if tree.body and isinstance(tree.body[0], ast.Expr) else []
    after = (imports or docstring)
    at = after[-1].end_lineno if after else 0
    lines[at:at] = missing
    return "\n".join(lines + appended) + "\n"


@dataclass
class Extracted:
    code: str | None
    how: str


def extract_code(answer: str, original: str, defines: list[str], target: str) -> Extracted:
    """The new ``target`` file from an answer: a diff that applies, or Python that defines ``defines``
    (spliced into the original when it shows only part of the file). The last usable block wins."""
    text = answer_text(answer)
    blocks = [body for _, body in code_blocks(text)] or [text]
    found, why = None, "no code block"
    for body in blocks:
        if looks_like_diff(body):
            try:
                found = Extracted(apply_unified_diff(original, body, target), "diff")
            except PatchError as exc:
                why = f"a diff that does not apply: {exc}"
            continue
        try:
            tree = ast.parse(body)
        except SyntaxError as exc:
            why = f"a code block that is not valid Python (line {exc.lineno}: {exc.msg})"
            continue
        names = _top_level(tree)
        if not all(name in names for name in defines):
            why = f"no code block defines {', '.join(defines)}"
            continue
        if set(_top_level(ast.parse(original))) <= set(names):
            found = Extracted(body.rstrip() + "\n", "file")
        else:
            found = Extracted(splice(original, body), "part of the file, spliced into it")
    return found or Extracted(None, why)


# ---------------------------------------------------------------- measuring

def normalise(text: str) -> str:
    """Text for similarity: no blank lines, no trailing spaces, runs of spaces collapsed."""
    return "\n".join(" ".join(line.split()) for line in (text or "").splitlines() if line.strip())


def similarity(texts: list[str]) -> float | None:
    """Mean pairwise difflib ratio of the normalised texts (1.0 identical); None for fewer than two."""
    if len(texts) < 2:
        return None
    norm = [normalise(text)[:20000] for text in texts]
    ratios = [difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() for a, b in itertools.combinations(norm, 2)]
    return round(sum(ratios) / len(ratios), 3)


def stability(correctness: list[int], outputs: list[str]) -> tuple[int | None, float | None]:
    """(0-2, similarity): 2 when every run scored the same and the outputs are alike, 1 when one of the
    two holds, 0 when neither; (None, None) for a single run."""
    ratio = similarity(outputs)
    if ratio is None:
        return None, None
    return int(len(set(correctness)) == 1) + int(ratio >= SIMILAR), ratio


def longest_function(code: str) -> int:
    """Lines of code (no blanks, comments or docstrings) in the longest function or method."""
    tree, lines = ast.parse(code), code.splitlines()
    longest = 0
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        skip = set()
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            skip = set(range(first.lineno, first.end_lineno + 1))
        count = sum(1 for n in range(node.lineno, node.end_lineno + 1)
                    if n not in skip and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"))
        longest = max(longest, count)
    return longest


def run_tests(folder: Path, timeout: float = TEST_TIMEOUT) -> dict[str, Any]:
    """The folder's unittest tests, run with the controller's Python in a subprocess."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(folder)}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-m", "unittest", "discover", "-s", ".", "-t", ".", "-p", "test_*.py"],
            cwd=folder, env=env, capture_output=True, text=True, timeout=timeout,
        )
        output, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired:
        output, ok = f"the tests did not finish in {timeout:.0f} s", False
    ran = re.search(r"Ran (\d+) tests?", output)
    return {"passed": ok and bool(ran) and ran.group(1) != "0", "output": output[-2000:],
            "seconds": round(time.monotonic() - started, 2)}


def _copy_workspace(task: Task, into: Path) -> Path:
    work = into / task.name
    shutil.copytree(task.workspace, work, ignore=shutil.ignore_patterns("__pycache__"))
    return work


# ---------------------------------------------------------------- scoring one run

def score_explain(answer: str, rubric: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    text = answer_text(answer).lower()
    hits = [label for label, pattern in rubric["keywords"].items() if re.search(pattern, text, re.I)]
    missed = [label for label in rubric["keywords"] if label not in hits]
    score = 2 if len(hits) >= rubric["full"] else 1 if len(hits) >= rubric["partial"] else 0
    return score, {"detail": f"{len(hits)}/{len(rubric['keywords'])} rubric points", "hits": hits, "missed": missed}


def score_code(task: Task, answer: str) -> tuple[int, dict[str, Any]]:
    """Correctness of a bugfix, feature or refactor answer, and how it was judged."""
    original = task.files()[task.spec["target"]]
    extracted = extract_code(answer, original, task.spec.get("defines", []), task.spec["target"])
    info: dict[str, Any] = {"extracted": extracted.code, "how": extracted.how}
    if extracted.code is None:
        return 0, {**info, "detail": f"nothing usable: {extracted.how}"}
    with tempfile.TemporaryDirectory(prefix="podkit-eval-") as tmp:
        work = _copy_workspace(task, Path(tmp))
        (work / task.spec["target"]).write_text(extracted.code)
        tests = run_tests(work)
    info["tests"] = tests
    passed = "tests pass" if tests["passed"] else "tests fail"
    if task.kind != "refactor":
        return (2 if tests["passed"] else 1), {**info, "detail": f"{extracted.how}: {passed}"}
    if normalise(extracted.code) == normalise(original):
        return 0, {**info, "detail": "the file came back unchanged"}
    before, after = longest_function(original), longest_function(extracted.code)
    shorter = after <= task.spec["readability"]["longest_function_at_most"] * before
    info["longest_function"] = {"before": before, "after": after}
    score = int(tests["passed"]) + int(shorter)
    return score, {**info, "detail": f"{passed}; longest function {before} -> {after} lines"}


# ---------------------------------------------------------------- the tool task

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Replace a file of the workspace with new content.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"]}}},
]


def execute_tool(work: Path, name: str, arguments: str, protected: list[str]) -> str:
    """Run one tool call against the workspace; the answer the model sees (errors included)."""
    try:
        args = json.loads(arguments or "{}")
        path = str(args["path"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: arguments must be a JSON object with a 'path' ({type(exc).__name__}: {exc})"
    target = (work / path).resolve()
    if target.parent != work.resolve():
        return f"error: {path!r} is not a file of the workspace ({', '.join(sorted(p.name for p in work.iterdir()))})"
    if name == "read_file":
        return target.read_text() if target.is_file() else f"error: no file {path!r}"
    if name == "write_file":
        if target.name in protected:
            return f"error: {path!r} holds the tests, which must not change"
        if not isinstance(args.get("content"), str):
            return "error: write_file needs a 'content' string"
        target.write_text(args["content"])
        return f"wrote {len(args['content'])} characters to {target.name}"
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
        work = _copy_workspace(task, Path(tmp))
        for _ in range(int(task.spec.get("max_turns", 8))):
            turn = endpoint.chat(messages, params, tools=TOOLS)
            step = turn.as_dict()
            transcript.append(step)
            if turn.error or not turn.tool_calls:
                stop = "error" if turn.error else "answered"
                break
            messages.append({"role": "assistant", "content": turn.content or "", "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in turn.tool_calls]})
            step["results"] = []
            for call in turn.tool_calls:
                result = execute_tool(work, call["name"], call["arguments"], protected)
                step["results"].append(result)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        for name in protected:  # the tests are the task's, whatever happened
            (work / name).write_text(files[name])
        changed = {p.name: p.read_text() for p in sorted(work.iterdir())
                   if p.is_file() and p.name in files and p.read_text() != files[p.name]}
        tests = run_tests(work) if changed else None
    info = {"transcript": transcript, "stop": stop, "turns": len(transcript), "changed": changed, "tests": tests,
            "extracted": "\n".join(f"# {n}\n{t}" for n, t in changed.items()) or answer_text(transcript[-1]["content"])}
    if not changed:
        return 0, {**info, "detail": f"no file changed ({stop} after {len(transcript)} turn(s))"}
    passed = tests["passed"]
    return (2 if passed else 1), {**info, "detail": f"changed {', '.join(changed)}: tests {'pass' if passed else 'fail'}"}


# ---------------------------------------------------------------- a whole battery

def run_once(endpoint: Endpoint, task: Task, params: dict[str, Any]) -> dict[str, Any]:
    """One run of one task: its correctness, the raw output and how it was judged."""
    started = time.monotonic()
    if task.kind == "tools":
        correctness, info = run_tool_task(endpoint, task, params)
    else:
        turn = endpoint.chat(task_messages(task), params)
        info = {"response": turn.as_dict()}
        if turn.error:
            correctness, more = 0, {"detail": f"no answer: {turn.error}", "extracted": ""}
        elif task.kind == "explain":
            correctness, more = score_explain(turn.content or "", task.spec["rubric"])
            more["extracted"] = answer_text(turn.content)
        else:
            correctness, more = score_code(task, turn.content or "")
            more["extracted"] = more["extracted"] if more["extracted"] is not None else answer_text(turn.content)
        info.update(more)
    return {"correctness": correctness, **info, "seconds": round(time.monotonic() - started, 2)}


def score_task(runs: list[dict[str, Any]]) -> dict[str, Any]:
    correctness = [run["correctness"] for run in runs]
    stable, ratio = stability(correctness, [run.get("extracted") or "" for run in runs])
    mean = round(sum(correctness) / len(correctness), 2)
    return {"correctness": mean, "stability": stable, "similarity": ratio,
            "score": round(mean + (stable or 0), 2), "possible": 2 if stable is None else 4}


def evaluate(endpoint: Endpoint, profiles: dict[str, dict[str, Any]], tasks: list[Task], runs: int,
             progress: Callable[[str], None] = lambda message: None) -> dict[str, dict[str, Any]]:
    """``{profile: {task: scores and raw runs}}``: every task ``runs`` times under every profile."""
    results: dict[str, dict[str, Any]] = {}
    for profile, chosen in profiles.items():
        results[profile] = {}
        for task in tasks:
            done = []
            for index in range(runs):
                run = run_once(endpoint, task, chosen["params"])
                done.append(run)
                progress(f"{profile:<7} {task.name:<9} run {index + 1}/{runs}: {run['correctness']}  {run['detail']}  ({run['seconds']:.1f}s)")
            results[profile][task.name] = {**score_task(done), "runs": done}
    return results


def totals(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for profile, tasks in results.items():
        stab = [t["stability"] for t in tasks.values()]
        total = {
            "correctness": round(sum(t["correctness"] for t in tasks.values()), 2),
            "stability": None if None in stab else sum(stab),
            "score": round(sum(t["score"] for t in tasks.values()), 2),
            "possible": sum(t["possible"] for t in tasks.values()),
        }
        out[profile] = total
    return out


def is_noise(a: float, b: float, possible: float) -> bool:
    """Whether two scores differ by less than 10% of the possible score."""
    return abs(b - a) < NOISE_SHARE * possible


def profile_differences(total: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for a, b in itertools.combinations(total, 2):
        possible = max(total[a]["possible"], total[b]["possible"])
        rows.append({"a": a, "b": b, "difference": round(total[b]["score"] - total[a]["score"], 2),
                     "possible": possible, "noise": is_noise(total[a]["score"], total[b]["score"], possible)})
    return rows


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def run_host(target, profile_names, runs: int, max_tokens: int, timeout: float, out_dir: Path,
             tasks: list[Task] | None = None, progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """The battery against one host (a cli.Target: .name .settings .data .url .key .model), recorded in
    ``out_dir/<UTC timestamp>-<host>.json``. Returns a summary with the record's path, or with
    ``error`` (and no record) when the endpoint cannot be reached."""
    from podkit.client.serverinfo import describe

    started = utc_now()
    tasks = tasks if tasks is not None else load_tasks()
    info = describe(target.name, target.settings, target.data)
    generation_config, origin = generation_config_of(info)
    profiles = resolve_profiles(profile_names, generation_config, origin)
    client = openai.OpenAI(base_url=f"{target.url}/v1", api_key=target.key, max_retries=0, timeout=timeout)
    endpoint = Endpoint(client, target.model, max_tokens, tokenizer_counter(target.url, target.key, target.model))
    try:
        results = evaluate(endpoint, profiles, tasks, runs, progress)
    except Unreachable as exc:
        return {"host": target.name, "endpoint": target.url, "error": str(exc),
                "outcome": "auth" if exc.auth else "unreachable"}
    record = build_record(target.name, target.url, info.as_dict(), profiles, tasks, results, started,
                          {"runs": runs, "max_tokens": max_tokens, "timeout": timeout, "model": target.model})
    path = write_record(record, out_dir, started)
    return {**summary(record), "record": str(path)}


def build_record(host: str, url: str, server: dict[str, Any], profiles: dict[str, Any], tasks: list[Task],
                 results: dict[str, Any], started: datetime, settings: dict[str, Any]) -> dict[str, Any]:
    """Everything a later ``eval compare`` needs: the server as described, the sampling, every raw output."""
    total = totals(results)
    return {
        "format": RECORD_FORMAT,
        "host": host,
        "endpoint": url,
        "started": started.isoformat(timespec="seconds"),
        "finished": utc_now().isoformat(timespec="seconds"),
        "server": server,
        "settings": {**settings, "tasks": [t.name for t in tasks]},
        "profiles": profiles,
        "tasks": {t.name: {"kind": t.kind, "title": t.spec["title"]} for t in tasks},
        "results": results,
        "totals": total,
        "profile_differences": profile_differences(total),
    }


def write_record(record: dict[str, Any], out_dir: Path, when: datetime) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    host = re.sub(r"[^A-Za-z0-9._-]+", "_", record["host"])
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"{stamp}-{host}.json"
    suffix = 1
    while path.exists():
        suffix += 1
        path = out_dir / f"{stamp}-{host}-{suffix}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")  # in battery order
    return path


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """A record without its raw outputs: what a person reads."""
    server = record.get("server") or {}
    return {
        "host": record["host"],
        "endpoint": record.get("endpoint"),
        "started": record.get("started"),
        "model": server.get("model") or record["settings"].get("model"),
        "revision": server.get("revision"),
        "vllm_version": server.get("vllm_version"),
        "serve_args": server.get("serve_args"),
        "runs": record["settings"]["runs"],
        "profiles": record["profiles"],
        "scores": {p: {t: {k: v for k, v in r.items() if k != "runs"} | {"per_run": [x["correctness"] for x in r["runs"]]}
                       for t, r in tasks.items()} for p, tasks in record["results"].items()},
        "totals": record["totals"],
        "profile_differences": record["profile_differences"],
    }


# ---------------------------------------------------------------- comparing two records

def load_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable eval record ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{path}: not an eval record (format {RECORD_FORMAT!r} expected)")
    return record


def flag_tokens(args: list[str]) -> list[str]:
    """``--flag value`` pairs of a launch command line (the model path, first, left out)."""
    tokens, index = [], 1
    while index < len(args):
        token = args[index]
        if token.startswith("--") and "=" not in token and index + 1 < len(args) and not args[index + 1].startswith("--"):
            token, index = f"{token} {args[index + 1]}", index + 1
        tokens.append(token)
        index += 1
    return tokens


def _row(a: dict | None, b: dict | None) -> dict[str, Any]:
    row: dict[str, Any] = {"a": a, "b": b}
    if a and b:
        possible = max(a.get("possible", 4), b.get("possible", 4))
        row.update(difference=round(b["score"] - a["score"], 2), possible=possible,
                   noise=is_noise(a["score"], b["score"], possible))
    return row


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per profile and task, both records' scores and their difference, noise or real."""
    pick = ("correctness", "stability", "score", "possible")
    servers = {}
    for side, record in (("a", a), ("b", b)):
        server = record.get("server") or {}
        servers[side] = {"host": record["host"], "started": record.get("started"), "model": server.get("model"),
                         "revision": server.get("revision"), "vllm_version": server.get("vllm_version"),
                         "runs": record["settings"]["runs"]}
    flags_a, flags_b = (flag_tokens((r.get("server") or {}).get("serve_args") or []) for r in (a, b))
    profiles = {}
    for profile in dict.fromkeys([*a["results"], *b["results"]]):
        ra, rb = a["results"].get(profile, {}), b["results"].get(profile, {})
        tasks = {task: _row({k: ra[task][k] for k in pick} if task in ra else None,
                            {k: rb[task][k] for k in pick} if task in rb else None)
                 for task in dict.fromkeys([*ra, *rb])}
        ta, tb = a["totals"].get(profile), b["totals"].get(profile)
        params = [r["profiles"][profile]["params"] for r in (a, b) if profile in r["profiles"]]
        profiles[profile] = {"tasks": tasks, "total": _row(ta, tb),
                             "same_sampling": params[0] == params[1] if len(params) == 2 else None}
    return {
        "a": servers["a"], "b": servers["b"],
        "flags_only_in_a": [f for f in flags_a if f not in flags_b],
        "flags_only_in_b": [f for f in flags_b if f not in flags_a],
        "profiles": profiles,
    }


# ---------------------------------------------------------------- text for people

def _num(value, width: int = 5) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}" if isinstance(value, float) else f"{value:>{width}}"


def table(result: dict[str, Any]) -> list[str]:
    """Lines for one host's summary (see :func:`summary`) or its error."""
    if result.get("error"):
        return [f"{result['host']}  {result.get('endpoint')}  FAILED: {result['error']}"]
    lines = [f"{result['host']}  {result['endpoint']}  model {result['model']}"
             + (f"@{result['revision'][:12]}" if result.get("revision") else "")
             + f"  vLLM {result['vllm_version']}  {result['runs']} run(s) per task"]
    for profile, chosen in result["profiles"].items():
        params = " ".join(f"{k} {v}" for k, v in chosen["params"].items())
        lines.append(f"  {profile}: {params}  ({chosen['source']})")
    lines.append(f"  {'profile':<8} {'task':<9} {'correct':>7} {'stable':>6} {'similar':>7}  per run")
    for profile, tasks in result["scores"].items():
        for task, score in tasks.items():
            lines.append(f"  {profile:<8} {task:<9} {_num(score['correctness'], 7)} {_num(score['stability'], 6)}"
                         f" {_num(score['similarity'], 7)}  {' '.join(str(c) for c in score['per_run'])}")
        total = result["totals"][profile]
        stab = "-" if total["stability"] is None else total["stability"]
        lines.append(f"  {profile:<8} {'total':<9} {_num(total['correctness'], 7)} {stab:>6}"
                     f"          score {total['score']:.2f} of {total['possible']}")
    for row in result["profile_differences"]:
        verdict = "noise" if row["noise"] else "a real difference"
        lines.append(f"  {row['b']} vs {row['a']}: {row['difference']:+.2f} of {row['possible']}: {verdict}"
                     f" (noise is under {NOISE_SHARE * row['possible']:.1f})")
    if result.get("record"):
        lines.append(f"  record: {result['record']}")
    return lines


def compare_table(comparison: dict[str, Any]) -> list[str]:
    """Lines for :func:`compare`'s result."""
    lines = []
    for side in ("a", "b"):
        s = comparison[side]
        lines.append(f"{side.upper()}: {s['host']}  {s['started']}  {s['model']}"
                     + (f"@{s['revision'][:12]}" if s.get("revision") else "")
                     + f"  vLLM {s['vllm_version']}  {s['runs']} run(s)")
    for side in ("a", "b"):
        if comparison[f"flags_only_in_{side}"]:
            lines.append(f"launch flags only in {side.upper()}: {' '.join(comparison[f'flags_only_in_{side}'])}")

    def cell(scores):
        return f"{'-':>11}" if scores is None else f"{scores['score']:>5.2f} of {scores['possible']:<2}"

    for profile, data in comparison["profiles"].items():
        note = "  (sampling differs between the records)" if data["same_sampling"] is False else ""
        lines.append(f"{profile}{note}")
        lines.append(f"  {'task':<9} {'A':>11} {'B':>11} {'B-A':>6}")
        for task, row in [*data["tasks"].items(), ("total", data["total"])]:
            if "difference" in row:
                verdict = "noise" if row["noise"] else "REAL"
                tail = f"{row['difference']:>+6.2f}  {verdict}"
            else:
                tail = f"{'-':>6}  only in {'A' if row['a'] else 'B'}"
            lines.append(f"  {task:<9} {cell(row['a'])} {cell(row['b'])} {tail}")
    return lines
