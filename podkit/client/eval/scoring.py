"""Scoring: one answer's correctness (a keyword rubric, or the task's tests on the model's code),
the stability of a task's runs, and the rule that calls a difference noise.

Model-written code runs in a copy of the workspace, in its own cage, with limits; the task's
tests run from their pristine files in another cage and call into it (:mod:`.cage`): no network,
no controller environment, secrets, home or files outside that copy. An answer that cheats (adds
its own tests, changes the task's, loads the test framework) scores 0 with the reason.
"""

from __future__ import annotations

import ast
import difflib
import itertools
import re
import tempfile
from pathlib import Path
from typing import Any

from podkit.client.eval import cage
from podkit.client.eval.answers import answer_text, extract_code
from podkit.client.eval.catalog import Task

NOISE_SHARE = 0.10  # differences under this share of the possible score are noise
SIMILAR = 0.8  # mean pairwise similarity at which runs count as alike
LIMITS = cage.Limits()  # what one run of a task's tests may use


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
        skip: set[int] = set()
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            skip = set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
        count = sum(
            1
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if n not in skip and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#")
        )
        longest = max(longest, count)
    return longest


def run_tests(task: Task, work: Path, limits: cage.Limits | None = None) -> dict[str, Any]:
    """The task's tests, from its own pristine files, against the answer's workspace ``work``, in
    the cages (:func:`.cage.run_tests`); CageUnavailable, with nothing run, when they cannot start."""
    tests = task.tests()
    pristine = {name: (task.workspace / name).read_bytes() for name in tests}
    answer = {p.name: p.read_bytes() for p in sorted(work.iterdir()) if p.is_file() and not p.is_symlink()}
    modules = [Path(name).stem for name in task.files() if name.endswith(".py") and name not in tests]
    return cage.run_tests(answer, pristine, modules, list(task.files()), limits or LIMITS)


def judged(tests: dict[str, Any]) -> str:
    """What the tests' run says in a record's detail: pass or fail, and each limit hit."""
    said = "tests pass" if tests["passed"] else "tests fail"
    return said + "".join(f"; {line}" for line in tests["limits"])


def cheated(tests: dict[str, Any]) -> str | None:
    """The detail of an answer that cheated (it scores 0), or None."""
    return "cheating: " + "; ".join(tests["cheats"]) if tests["cheats"] else None


def score_explain(answer: str, rubric: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Correctness of an explanation: how many of the rubric's points (regular expressions) it names."""
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
        work = task.copy_workspace(Path(tmp))
        (work / task.spec["target"]).write_text(extracted.code)
        tests = run_tests(task, work)
    info["tests"] = tests
    if cheated(tests):
        return 0, {**info, "detail": cheated(tests)}
    passed = judged(tests)
    if task.kind != "refactor":
        return (2 if tests["passed"] else 1), {**info, "detail": f"{extracted.how}: {passed}"}
    if normalise(extracted.code) == normalise(original):
        return 0, {**info, "detail": "the file came back unchanged"}
    before, after = longest_function(original), longest_function(extracted.code)
    shorter = after <= task.spec["readability"]["longest_function_at_most"] * before
    info["longest_function"] = {"before": before, "after": after}
    score = int(tests["passed"]) + int(shorter)
    return score, {**info, "detail": f"{passed}; longest function {before} -> {after} lines"}


def score_task(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A task's scores over its runs: mean correctness, stability, and their sum out of the possible."""
    correctness = [run["correctness"] for run in runs]
    stable, ratio = stability(correctness, [run.get("extracted") or "" for run in runs])
    mean = round(sum(correctness) / len(correctness), 2)
    return {
        "correctness": mean,
        "stability": stable,
        "similarity": ratio,
        "score": round(mean + (stable or 0), 2),
        "possible": 2 if stable is None else 4,
    }


def is_noise(a: float, b: float, possible: float) -> bool:
    """Whether two scores differ by less than 10% of the possible score."""
    return abs(b - a) < NOISE_SHARE * possible
