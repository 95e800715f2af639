"""The eval battery: five small coding tasks, run N times per sampling profile, scored automatically,
and the record each host's battery leaves.

Each task is a folder of data in ``tasks/<task>/`` (:mod:`.catalog`); its
``kind`` picks what one run does (:data:`RUNNERS`).

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
reported as noise (:mod:`.scoring`).

Model-written code runs in a temporary copy of the workspace, under a time
limit, in bubblewrap's cage (:mod:`.cage`). Without a cage that starts, a host
whose battery runs model code is refused before its first request, and a run
that meets a cage gone missing is recorded as not scored (``"scored": false``).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podkit.client.api import VllmApi
from podkit.client.eval import cage
from podkit.client.eval.answers import answer_text
from podkit.client.eval.catalog import Task, load_tasks, task_messages
from podkit.client.eval.endpoint import Endpoint, Unreachable
from podkit.client.eval.profiles import generation_config_of, resolve_profiles
from podkit.client.eval.scoring import is_noise, score_code, score_explain, score_task
from podkit.client.eval.tools import run_tool_task
from podkit.client.targets import Target

RECORD_FORMAT = "podkit-eval/1"

Runner = Callable[[Endpoint, Task, dict[str, Any]], tuple[int, dict[str, Any]]]


def one_answer(score: Callable[[Task, str], tuple[int, dict[str, Any]]]) -> Runner:
    """A run of a one-answer task: one chat, its answer judged by ``score(task, answer)``."""

    def run(endpoint: Endpoint, task: Task, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        turn = endpoint.chat(task_messages(task), params)
        info: dict[str, Any] = {"response": turn.as_dict()}
        if turn.error:
            return 0, {**info, "detail": f"no answer: {turn.error}", "extracted": ""}
        correctness, more = score(task, turn.content or "")
        if more.get("extracted") is None:
            more["extracted"] = answer_text(turn.content)
        return correctness, {**info, **more}

    return run


#: A task's ``kind`` (task.json) -> what one run of it does: (correctness, how it was judged).
RUNNERS: dict[str, Runner] = {
    "explain": one_answer(lambda task, answer: score_explain(answer, task.spec["rubric"])),
    "patch": one_answer(score_code),
    "feature": one_answer(score_code),
    "refactor": one_answer(score_code),
    "tools": run_tool_task,
}
#: The kinds whose runs execute model-written code (in the cage).
RUNS_MODEL_CODE = frozenset({"patch", "feature", "refactor", "tools"})


def run_once(endpoint: Endpoint, task: Task, params: dict[str, Any]) -> dict[str, Any]:
    """One run of one task: its correctness, the raw output and how it was judged."""
    runner = RUNNERS.get(task.kind)
    if runner is None:
        raise ValueError(f"eval task {task.name!r} has kind {task.kind!r}; the kinds are {', '.join(RUNNERS)}")
    started = time.monotonic()
    try:
        correctness, info = runner(endpoint, task, params)
    except cage.CageUnavailable as exc:  # never run uncaged: the run says it could not be scored
        correctness, info = 0, {"scored": False, "detail": f"not scored: {exc}", "extracted": ""}
    except (OSError, ValueError, UnicodeError) as exc:  # every run leaves a record, whatever the answer was
        correctness, info = 0, {"scored": False, "detail": f"not scored: {type(exc).__name__}: {exc}", "extracted": ""}
    return {"correctness": correctness, **info, "seconds": round(time.monotonic() - started, 2)}


def evaluate(
    endpoint: Endpoint,
    profiles: dict[str, dict[str, Any]],
    tasks: list[Task],
    runs: int,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, dict[str, Any]]:
    """``{profile: {task: scores and raw runs}}``: every task ``runs`` times under every profile."""
    results: dict[str, dict[str, Any]] = {}
    for profile, chosen in profiles.items():
        results[profile] = {}
        for task in tasks:
            done = []
            for index in range(runs):
                run = run_once(endpoint, task, chosen["params"])
                done.append(run)
                progress(
                    f"{profile:<7} {task.name:<9} run {index + 1}/{runs}: {run['correctness']}  {run['detail']}  ({run['seconds']:.1f}s)"
                )
            results[profile][task.name] = {**score_task(done), "runs": done}
    return results


def totals(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per profile, the sums of its tasks' scores."""
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


def profile_differences(total: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair of profiles' totals: the difference, and whether it is noise."""
    rows = []
    for a, b in itertools.combinations(total, 2):
        possible = max(total[a]["possible"], total[b]["possible"])
        rows.append(
            {
                "a": a,
                "b": b,
                "difference": round(total[b]["score"] - total[a]["score"], 2),
                "possible": possible,
                "noise": is_noise(total[a]["score"], total[b]["score"], possible),
            }
        )
    return rows


def utc_now() -> datetime:
    return datetime.now(UTC)


def run_host(
    target: Target,
    profile_names,
    runs: int,
    max_tokens: int,
    timeout: float,
    out_dir: Path,
    tasks: list[Task] | None = None,
    progress: Callable[[str], None] = lambda m: None,
) -> dict[str, Any]:
    """The battery against one host (its endpoint, key and model, and its one command), recorded in
    ``out_dir/<UTC timestamp>-<host>.json``. Returns a summary with the record's path, or with
    ``error`` (and no record) when the endpoint cannot be reached or model code cannot be caged."""
    from podkit.client.serverinfo import describe

    started = utc_now()
    tasks = tasks if tasks is not None else load_tasks()
    refused = cage.problem() if any(t.kind in RUNS_MODEL_CODE for t in tasks) else None
    if refused:
        return {"host": target.name, "endpoint": target.url, "error": refused, "outcome": "cage"}
    info = describe(target.name, target.settings, target.run)
    generation_config, origin = generation_config_of(info)
    profiles = resolve_profiles(profile_names, generation_config, origin)
    endpoint = Endpoint.of(VllmApi(target.url, target.key, target.model, timeout, ca_file=target.ca_file), max_tokens)
    try:
        results = evaluate(endpoint, profiles, tasks, runs, progress)
    except Unreachable as exc:
        return {
            "host": target.name,
            "endpoint": target.url,
            "error": str(exc),
            "outcome": "auth" if exc.auth else "unreachable",
        }
    record = build_record(
        target.name,
        target.url,
        info.as_dict(),
        profiles,
        tasks,
        results,
        started,
        {"runs": runs, "max_tokens": max_tokens, "timeout": timeout, "model": target.model},
    )
    path = write_record(record, out_dir, started)
    done = {**summary(record), "record": str(path)}
    every_run = [run for by_task in results.values() for result in by_task.values() for run in result["runs"]]
    unscored = [run["detail"] for run in every_run if run.get("scored") is False]
    return {**done, "error": unscored[0], "outcome": "cage"} if unscored else done


def build_record(
    host: str,
    url: str,
    server: dict[str, Any],
    profiles: dict[str, Any],
    tasks: list[Task],
    results: dict[str, Any],
    started: datetime,
    settings: dict[str, Any],
) -> dict[str, Any]:
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
    """``out_dir/<UTC timestamp>-<host>.json``, numbered when that name is taken."""
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


def load_record(path: Path) -> dict[str, Any]:
    """A record :func:`write_record` wrote; ValueError for any other file."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable eval record ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{path}: not an eval record (format {RECORD_FORMAT!r} expected)")
    return record


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
        "scores": {
            p: {
                t: {k: v for k, v in r.items() if k != "runs"} | {"per_run": [x["correctness"] for x in r["runs"]]}
                for t, r in tasks.items()
            }
            for p, tasks in record["results"].items()
        },
        "totals": record["totals"],
        "profile_differences": record["profile_differences"],
    }
