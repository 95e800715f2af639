"""Reading a model's answer: the text without its reasoning, fenced code, unified diffs applied
by content, and a partial file spliced into the original."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

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
        lines[at : at + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + "\n"


_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _top_level(tree: ast.Module) -> dict[str, _Definition]:
    return {
        node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first - 1, node.end_lineno or node.lineno


def splice(original: str, fragment: str) -> str:
    """``original`` with ``fragment``'s top-level functions and classes in place of the ones of the same
    name (new ones appended) and its new imports and module-level statements added after the imports:
    for an answer that shows only the changed function."""
    tree, part = ast.parse(original), ast.parse(fragment)
    lines, piece = original.splitlines(), fragment.splitlines()
    old_defs, new_defs = _top_level(tree), _top_level(part)
    extra = [
        node
        for node in part.body
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        and not (isinstance(node, ast.If) and "__name__" in ast.unparse(node.test))
    ]
    appended = []
    for name, node in new_defs.items():
        start, end = _span(node)
        if name not in old_defs:
            appended += ["", ""] + piece[start:end]
    for node in sorted((old_defs[n] for n in new_defs if n in old_defs), key=lambda n: -n.lineno):
        start, end = _span(node)
        new_start, new_end = _span(new_defs[node.name])
        lines[start:end] = piece[new_start:new_end]
    missing = [line for node in extra for line in piece[node.lineno - 1 : node.end_lineno] if line not in lines]
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    docstring = tree.body[:1] if tree.body and isinstance(tree.body[0], ast.Expr) else []
    after = imports or docstring
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
        except ValueError as exc:  # a NUL byte: Python 3.11 before 3.11.4 raises ValueError, not SyntaxError
            why = f"a code block that is not valid Python ({exc})"
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
