"""Comparing two eval records, and the text a person reads: one host's scores and a comparison."""

from __future__ import annotations

from typing import Any

from podkit.client.eval.scoring import NOISE_SHARE, is_noise


def flag_tokens(args: list[str]) -> list[str]:
    """``--flag value`` pairs of a launch command line (the model path, first, left out)."""
    tokens, index = [], 1
    while index < len(args):
        token = args[index]
        if (
            token.startswith("--")
            and "=" not in token
            and index + 1 < len(args)
            and not args[index + 1].startswith("--")
        ):
            token, index = f"{token} {args[index + 1]}", index + 1
        tokens.append(token)
        index += 1
    return tokens


def _row(a: dict | None, b: dict | None) -> dict[str, Any]:
    row: dict[str, Any] = {"a": a, "b": b}
    if a and b:
        possible = max(a.get("possible", 4), b.get("possible", 4))
        row.update(
            difference=round(b["score"] - a["score"], 2),
            possible=possible,
            noise=is_noise(a["score"], b["score"], possible),
        )
    return row


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per profile and task, both records' scores and their difference, noise or real."""
    pick = ("correctness", "stability", "score", "possible")
    servers = {}
    for side, record in (("a", a), ("b", b)):
        server = record.get("server") or {}
        servers[side] = {
            "host": record["host"],
            "started": record.get("started"),
            "model": server.get("model"),
            "revision": server.get("revision"),
            "vllm_version": server.get("vllm_version"),
            "runs": record["settings"]["runs"],
        }
    flags_a, flags_b = (flag_tokens((r.get("server") or {}).get("serve_args") or []) for r in (a, b))
    profiles = {}
    for profile in dict.fromkeys([*a["results"], *b["results"]]):
        ra, rb = a["results"].get(profile, {}), b["results"].get(profile, {})
        tasks = {
            task: _row(
                {k: ra[task][k] for k in pick} if task in ra else None,
                {k: rb[task][k] for k in pick} if task in rb else None,
            )
            for task in dict.fromkeys([*ra, *rb])
        }
        ta, tb = a["totals"].get(profile), b["totals"].get(profile)
        params = [r["profiles"][profile]["params"] for r in (a, b) if profile in r["profiles"]]
        profiles[profile] = {
            "tasks": tasks,
            "total": _row(ta, tb),
            "same_sampling": params[0] == params[1] if len(params) == 2 else None,
        }
    return {
        "a": servers["a"],
        "b": servers["b"],
        "flags_only_in_a": [f for f in flags_a if f not in flags_b],
        "flags_only_in_b": [f for f in flags_b if f not in flags_a],
        "profiles": profiles,
    }


def _num(value, width: int = 5) -> str:
    return (
        f"{'-':>{width}}"
        if value is None
        else f"{value:>{width}.2f}"
        if isinstance(value, float)
        else f"{value:>{width}}"
    )


def table(result: dict[str, Any]) -> list[str]:
    """Lines for one host's summary (what :func:`.harness.run_host` returns) or its error."""
    if result.get("error"):
        return [f"{result['host']}  {result.get('endpoint')}  FAILED: {result['error']}"]
    lines = [
        f"{result['host']}  {result['endpoint']}  model {result['model']}"
        + (f"@{result['revision'][:12]}" if result.get("revision") else "")
        + f"  vLLM {result['vllm_version']}  {result['runs']} run(s) per task"
    ]
    for profile, chosen in result["profiles"].items():
        params = " ".join(f"{k} {v}" for k, v in chosen["params"].items())
        lines.append(f"  {profile}: {params}  ({chosen['source']})")
    lines.append(f"  {'profile':<8} {'task':<9} {'correct':>7} {'stable':>6} {'similar':>7}  per run")
    for profile, tasks in result["scores"].items():
        for task, score in tasks.items():
            lines.append(
                f"  {profile:<8} {task:<9} {_num(score['correctness'], 7)} {_num(score['stability'], 6)}"
                f" {_num(score['similarity'], 7)}  {' '.join(str(c) for c in score['per_run'])}"
            )
        total = result["totals"][profile]
        stab = "-" if total["stability"] is None else total["stability"]
        lines.append(
            f"  {profile:<8} {'total':<9} {_num(total['correctness'], 7)} {stab:>6}"
            f"          score {total['score']:.2f} of {total['possible']}"
        )
    for row in result["profile_differences"]:
        verdict = "noise" if row["noise"] else "a real difference"
        lines.append(
            f"  {row['b']} vs {row['a']}: {row['difference']:+.2f} of {row['possible']}: {verdict}"
            f" (noise is under {NOISE_SHARE * row['possible']:.1f})"
        )
    if result.get("record"):
        lines.append(f"  record: {result['record']}")
    return lines


def compare_table(comparison: dict[str, Any]) -> list[str]:
    """Lines for :func:`compare`'s result."""
    lines = []
    for side in ("a", "b"):
        s = comparison[side]
        lines.append(
            f"{side.upper()}: {s['host']}  {s['started']}  {s['model']}"
            + (f"@{s['revision'][:12]}" if s.get("revision") else "")
            + f"  vLLM {s['vllm_version']}  {s['runs']} run(s)"
        )
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
