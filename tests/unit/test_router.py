"""A router host's pure parts: its replicas, what stops it, its command line and its files."""

import pytest

from podkit.checks import SettingsError
from podkit.host.render import router_files
from podkit.host.router import replicas_of, router_argv, router_problems
from podkit.wayin import way_in
from tests.helpers import default_data, settings

ROUTER = {"podkit_role": "router", "podkit_router_group": "replicas", "vllm_served_model_name": "coder"}


def router(**overrides):
    return settings(**{**ROUTER, "podkit_volume": "/workspace", "vllm_port": 8001, **overrides})


def member(name, **data):
    return name, default_data(**{"vllm_served_model_name": "coder", **data})


# How the router reaches each kind of replica: as a client does.
REPLICA_CASES = [
    {
        "id": "bare metal on a private address: its edge's TLS, checked against its pinned CA",
        "data": {"ssh_hostname": "10.0.0.5"},
        "upstream": "https://10.0.0.5:8000",
        "ca": "/workspace/podkit/replicas/gpu-1.crt",
    },
    {
        "id": "a RunPod pod without a public port: RunPod's HTTPS proxy, public certificate",
        "data": {"runpod_pod_id": "abc123", "ssh_hostname": "1.2.3.4"},
        "upstream": "https://abc123-8000.proxy.runpod.net",
        "ca": None,
    },
    {
        "id": "a RunPod pod with its edge on a public TCP port: TLS to that port",
        "data": {
            "runpod_pod_id": "abc123",
            "runpod_public_ip": "10.203.0.7",
            "runpod_tcp_ports": {"8000": 40123},
        },
        "upstream": "https://10.203.0.7:40123",
        "ca": "/workspace/podkit/replicas/gpu-1.crt",
    },
    {
        "id": "a URL of the user's own (a proxy): plain HTTP unless podkit_tls says",
        "data": {"podkit_endpoint_url": "http://gpu-1.internal:9000"},
        "upstream": "http://gpu-1.internal:9000",
        "ca": None,
    },
]


@pytest.mark.parametrize("case", REPLICA_CASES, ids=[c["id"] for c in REPLICA_CASES])
def test_a_replica_is_reached_the_way_a_client_reaches_it(case):
    replica = replicas_of(router(), [member("gpu-1", **case["data"])])[0]
    files = router_files(router(), replicas=[replica], way=way_in("router", {"ssh_hostname": "127.0.0.1"}))
    caddyfile = files["caddyfile"].content
    assert f"reverse_proxy {case['upstream']} {{" in caddyfile
    assert replica.ca == case["ca"]
    assert (f"tls_trust_pool file {case['ca']}" in caddyfile) == bool(case["ca"])
    assert "header_up Host {upstream_hostport}" in caddyfile  # the replica's edge matches its own site
    # vllm-router 0.1.17 forwards /v1/responses and /v1/messages without the client's headers: the hop
    # (loopback only) sets the key again, from the edge's environment, never written here
    hop = caddyfile.split(f"http://127.0.0.1:{replica.hop_port} {{", 1)[1]
    assert (
        '@keyless not header Authorization *\n\trequest_header @keyless Authorization "Bearer {env.PODKIT_API_KEY}"'
        in hop
    )


def test_each_replica_gets_a_loopback_hop_port_that_is_neither_the_router_nor_the_edge():
    replicas = replicas_of(
        router(vllm_port=8001, podkit_edge_port=8003),
        [member(f"gpu-{i}", ssh_hostname=f"10.0.0.{i}") for i in range(1, 4)],
    )
    assert [r.hop_port for r in replicas] == [8002, 8004, 8005]
    argv = router_argv(router(vllm_port=8001, podkit_edge_port=8003), replicas, "/v/bin/vllm-router")
    workers = argv[argv.index("--worker-urls") + 1 : argv.index("--policy")]
    assert workers == ["http://127.0.0.1:8002", "http://127.0.0.1:8004", "http://127.0.0.1:8005"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--api-key" not in argv  # the client's header passes through; the router holds no key
    assert int(argv[argv.index("--prometheus-port") + 1]) not in (8001, 8002, 8003, 8004, 8005)


PROBLEM_CASES = [
    {"id": "a group the inventory lacks", "members": None, "want": "not a group of this inventory"},
    {"id": "an empty group", "members": [], "want": "has no hosts"},
    {
        "id": "replicas serving different names",
        "members": [member("a"), member("b", vllm_served_model_name="other")],
        "want": "serve different names (coder, other)",
    },
    {
        "id": "a router naming another model than its replicas",
        "members": [member("a", vllm_served_model_name="qwen")],
        "want": "set vllm_served_model_name = 'qwen' for the router",
    },
    {
        "id": "a replica with a key of its own",
        "members": [member("a"), member("b", podkit_api_key_file=".secrets/other_key")],
        "want": "replica b uses another API key file than the router",
    },
    {
        "id": "systemd on a router",
        "members": [member("a")],
        "data": {"podkit_supervisor": "systemd"},
        "want": "supervisord only",
    },
    {"id": "all well", "members": [member("a"), member("b")], "want": None},
]


@pytest.mark.parametrize("case", PROBLEM_CASES, ids=[c["id"] for c in PROBLEM_CASES])
def test_what_stops_a_router_is_said_with_its_fix(case):
    s = router(**case.get("data", {}))
    members = case["members"]
    problems = router_problems(s, "replicas", replicas_of(s, members or []), found=members is not None)
    if case["want"] is None:
        assert problems == []
    else:
        assert len(problems) == 1 and case["want"] in problems[0], problems


def test_a_router_without_its_group_is_refused_before_anything():
    with pytest.raises(SettingsError, match="podkit_router_group is not set"):
        settings(podkit_role="router")
    with pytest.raises(SettingsError, match="must name an inventory group"):
        settings(podkit_role="router", podkit_router_group="replicas; rm -rf /")


def test_the_router_gets_no_key_and_runs_under_supervisord_with_the_edge():
    replicas = replicas_of(router(), [member("gpu-1", ssh_hostname="10.0.0.5")])
    files = router_files(router(), replicas=replicas, way=way_in("router", {"ssh_hostname": "127.0.0.1"}))
    launch = files["launch"].content
    assert "VLLM_API_KEY" not in launch and "api_key" not in launch.split("set -u", 1)[1].split("sha256sum")[0]
    assert "/workspace/podkit/venv/bin/vllm-router \\\n" in launch
    assert "--policy cache_aware" in launch
    conf = files["supervisord"].content
    assert "[program:router]" in conf and "[program:edge]" in conf and "[program:vllm]" not in conf
    assert "idle" not in conf


def test_a_replica_url_with_a_path_is_refused_with_its_fix():
    replicas = replicas_of(router(), [member("gpu-1", podkit_endpoint_url="https://gw.example.com/team/llm")])
    with pytest.raises(ValueError, match="has a path"):
        router_files(router(), replicas=replicas, way=way_in("router", {"ssh_hostname": "127.0.0.1"}))


# verify through a router: what its router says of each replica (podctl describe reads /workers)
REPLICAS_CASES = [
    {"id": "all in", "workers": [("a", True), ("b", True)], "ok": True, "detail": "2 of 2 replicas in (cache_aware)"},
    {
        "id": "one out: the endpoint still serves, and says which",
        "workers": [("a", True), ("b", False)],
        "ok": True,
        "detail": "1 of 2 replicas in (cache_aware); out: b",
    },
    {"id": "all out", "workers": [("a", False), ("b", False)], "ok": False, "detail": "0 of 2 replicas in"},
    {"id": "the router lists none", "workers": [], "ok": False, "detail": "the router lists no replica"},
]


@pytest.mark.parametrize("case", REPLICAS_CASES, ids=[c["id"] for c in REPLICAS_CASES])
def test_verify_through_a_router_names_the_replicas_that_are_out(case):
    from concurrent.futures import Future

    from podkit.client.serverinfo import ServerInfo
    from podkit.client.verify import Verifier

    verifier = Verifier("http://127.0.0.1:9", "sk-test", "coder", router=True)
    assert [name for name, _, _ in verifier.steps()].count("replicas") == 1
    workers = [{"name": name, "url": None, "healthy": healthy} for name, healthy in case["workers"]]
    found = Future()
    found.set_result((ServerInfo("front", router={"policy": "cache_aware", "workers": workers}), 0.1))
    verifier._host = found
    ok, detail, _ = verifier.replicas()
    assert ok == case["ok"] and detail.startswith(case["detail"]), detail


def test_a_routers_health_is_its_readiness_so_one_replica_out_is_still_up():
    """vllm-router's /health fails while any replica is out; /readiness fails only with none in."""
    from podkit.host.probe import probe_config, server_config

    files = router_files(
        router(), replicas=replicas_of(router(), [member("a", ssh_hostname="10.0.0.5")]), way=way_in("r", {})
    )
    assert "rewrite * /readiness" in files["caddyfile"].content
    assert server_config(router())["health_path"] == "/readiness"
    assert probe_config(router())["health_path"] == "/readiness"
    assert "health_path" not in server_config(settings())  # a server's vLLM answers /health itself
