"""verify's check that the edge is the only way in: through the address a client uses and without
the key, every route the server serves beside ``/v1`` is refused (only ``/health`` answers), and
vLLM (or the router) listens on loopback only."""

from __future__ import annotations

from podkit.client.api import VllmApi
from podkit.client.outcome import Outcome
from podkit.client.serverinfo import ServerInfo
from podkit.wayin import is_loopback

# FastAPI's own pages, which its /openapi.json does not list
FASTAPI_ROUTES = {"/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"}
# vLLM's sleep mode routes (VLLM_SERVER_DEV_MODE=1, set where the idle stop is a sleep): the idle
# watcher calls them on loopback; asked through the edge always, listed by /openapi.json or not
SLEEP_ROUTES = {"/sleep", "/wake_up", "/is_sleeping"}
# vLLM's router (vllm-router 0.1.17) serves these beside /v1 and lists them nowhere: read from its
# binary's route table (strings of vllm_router_rs.abi3.so); its admin routes change the worker list
ROUTER_ROUTES = {
    "/add_worker",
    "/remove_worker",
    "/list_workers",
    "/workers",
    "/flush_cache",
    "/get_server_info",
    "/get_model_info",
    "/generate",
    "/health_generate",
    "/invocations",
    "/rerank",
    "/pooling",
    "/tokenize",
    "/detokenize",
    "/version",
    "/metrics",
}


def edge_refusals(api: VllmApi, info: ServerInfo) -> tuple[bool, str, Outcome]:
    """Through the address a client uses and without the key, every route the running vLLM
    serves beside ``/v1`` (its own ``/openapi.json``, read on the host) is refused, only
    ``/health`` answers; and vLLM's processes listen on loopback only."""
    if info.router is not None:  # vLLM's router publishes no route list: its own, from its binary
        routes = sorted(ROUTER_ROUTES)
    elif info.routes is None:
        return False, "could not read the running vLLM's /openapi.json on the host", Outcome.ERROR
    else:
        routes = sorted({r for r in info.routes if not r.startswith("/v1/")} | FASTAPI_ROUTES | SLEEP_ROUTES)
    # a cluster's head: vLLM's store takes the meeting port on every address (vLLM offers no way to
    # bind it to one) and the ranks' own ports take the private address; nothing else may be wide
    master = (info.flag("--master-addr"), info.flag("--master-port")) if info.flag("--nnodes") else None
    ranks = [
        a
        for a in info.vllm_listens or []
        if master and (a["address"] == master[0] or str(a["port"]) == master[1]) and not is_loopback(a["address"])
    ]
    wide = [
        f"{a['address']}:{a['port']}"
        for a in info.vllm_listens or []
        if not is_loopback(a["address"]) and a not in ranks
    ]
    if wide:
        what = "the router" if info.router is not None else "vLLM"
        return False, f"{what} listens on {', '.join(wide)}: clients can bypass the edge", Outcome.EXPOSED
    answered = []
    for route in routes:
        if route == "/health":
            continue
        answer = api.fetch(route.split("{", 1)[0], key=False, timeout=15)
        if answer.status is None:
            return False, f"no answer from {api.base_url}{route}: {answer.error}", Outcome.UNREACHABLE
        if answer.status not in (401, 403, 404):
            answered.append(f"{route} ({answer.status})")
    if answered:
        return (
            False,
            f"answer without the key: {', '.join(answered)}; only /v1/* with the key and /health may: "
            "re-apply so the edge owns the port",
            Outcome.EXPOSED,
        )
    refused = f"{len(routes) - ('/health' in routes)} routes beside /v1 refused without the key"
    if ranks and master:  # ranks are found only beside a master
        refused += (
            f"; the cluster's ranks listen on {len(ranks)} port{'s' if len(ranks) != 1 else ''} of {master[0]} "
            f"and port {master[1]} (keep them off the internet)"
        )
    return True, refused, Outcome.OK
