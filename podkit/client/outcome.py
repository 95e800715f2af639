"""The exit codes every client command shares (verify, bench, eval), and which of several failures
explains the others.

Codes (:class:`Outcome`, after httpie's): 0 all pass, 1 other failure, 2 bad input (click),
3 unreachable (the endpoint, or the host over SSH), 4 auth, 5 tool calling,
6 secret exposed (the key is in a process's argv, a log or a script on the host),
7 port taken (a process podkit did not start holds the served port; the key was not sent to it),
8 exposed (a route other than ``/v1/*`` and ``/health`` answers without the key, or vLLM listens
beyond loopback: the edge is bypassed).
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
