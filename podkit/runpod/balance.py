"""The account's balance: the one thing podkit asks of RunPod that REST v2 does not answer.

It is read through the ``runpod`` package's GraphQL call (pinned to 1.x, which speaks GraphQL;
podkit speaks v2 itself for everything else, see ``podkit.runpod.api``), and it is optional:
RunPod switches GraphQL off in early 2027, and from then on this says nothing rather than fail
anything. Nothing else in podkit imports the package.
"""

from __future__ import annotations

import math
import sys
import types

QUERY = "query balance { myself { clientBalance currentSpendPerHr } }"


def _quiet_cpuinfo() -> None:
    """``import runpod`` loads its serverless worker, whose debugger asks py-cpuinfo for the CPU's
    brand at import time: a subprocess that costs about 1.1 s of a 1.6 s import. The balance never
    uses it, so when nothing has imported cpuinfo yet, give that one module a cpuinfo that answers at once."""
    if "cpuinfo" not in sys.modules:
        stub = types.ModuleType("cpuinfo")
        setattr(stub, "get_cpu_info", lambda: {"brand_raw": "unknown (not probed by podkit)"})  # noqa: B010
        sys.modules["cpuinfo"] = stub


def balance(api_key: str | None) -> float | None:
    """The account's balance in USD, or None when it cannot be read (no key, GraphQL gone or refusing,
    an answer without a finite number)."""
    if not api_key:
        return None
    try:
        _quiet_cpuinfo()
        from runpod.api.graphql import run_graphql_query

        answer = run_graphql_query(QUERY, api_key=api_key)
        value = answer["data"]["myself"]["clientBalance"]
    except Exception:  # 410 once GraphQL is off (not JSON), refusals, anything: optional, say nothing
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), 2)
