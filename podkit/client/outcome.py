"""The exit codes every client command shares (verify, bench, eval), and which of several failures
explains the others.

The codes are :class:`Outcome` (after httpie's); what each means is :data:`MEANINGS`, the one
place it is written: the docs' exit-code table is generated from it (:func:`exit_codes_table`)
and a unit test checks that ``podkit verify --help`` says the same.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Outcome(enum.IntEnum):
    """Exit codes, so scripts can tell failure classes apart (after httpie's)."""

    OK = 0
    ERROR = 1  # anything not classified below
    # 2 is click's code for bad input
    UNREACHABLE = 3
    AUTH = 4
    TOOL_CALLING = 5
    SECRET_EXPOSED = 6  # the API key is in a process's argv, the server log or a script on the host
    PORT_TAKEN = 7  # a process podkit did not start holds the served port: the key is not sent to it
    EXPOSED = 8  # a route beside /v1 and /health answers without the key, or vLLM listens beyond loopback


#: What each exit code means, 2 included (click's code for bad input, not an Outcome).
MEANINGS: dict[int, str] = {
    Outcome.OK: "all pass",
    Outcome.ERROR: "other failure",
    2: "bad input (a missing inventory file or host, a malformed option)",
    Outcome.UNREACHABLE: "unreachable (the endpoint, or the host over SSH)",
    Outcome.AUTH: "auth (the endpoint refuses the key, or answers without it)",
    Outcome.TOOL_CALLING: "tool calling (an error, a call left as text, or arguments that break the schema)",
    Outcome.SECRET_EXPOSED: "secret exposed (the key is in a process's argv, a log or a script on the host)",
    Outcome.PORT_TAKEN: "port taken (a process podkit did not start holds the served port; the key was not sent)",
    Outcome.EXPOSED: "exposed (a route beside /v1/* and /health answers without the key, "
    "or vLLM listens beyond loopback: the edge is bypassed)",
}


def exit_codes_table() -> str:
    """The docs' exit-code table (markdown): code, meaning, and its rank when several hosts or
    checks fail (1 = reported first)."""
    ranks: dict[int, str] = {int(outcome): str(severity(outcome) + 1) for outcome in Outcome if outcome != Outcome.OK}
    rows = ["| code | meaning | rank |", "|---|---|---|"]
    for code, meaning in sorted(MEANINGS.items()):
        rows.append(f"| {int(code)} | {meaning} | {ranks.get(code, '')} |")
    return "\n".join(rows) + "\n"


def worst(outcomes: Iterable[Outcome]) -> Outcome:
    """The outcome that explains the others (see :func:`severity`); OK when there is none."""
    failed = [outcome for outcome in outcomes if outcome != Outcome.OK]
    return min(failed, key=severity) if failed else Outcome.OK


def severity(outcome: Outcome) -> int:
    """The first cause wins: unreachable explains auth failures, auth explains tool failures.

    An exposed key comes before all of them: it needs action (rotate the key)
    whatever else fails, and nothing else explains it. An exposed route comes
    next (anyone can use the GPU), then a stranger on the served port: it
    explains why the endpoint answers oddly or not at all.
    """
    order = [
        Outcome.SECRET_EXPOSED,
        Outcome.EXPOSED,
        Outcome.PORT_TAKEN,
        Outcome.UNREACHABLE,
        Outcome.AUTH,
        Outcome.TOOL_CALLING,
        Outcome.ERROR,
    ]
    return order.index(outcome)
