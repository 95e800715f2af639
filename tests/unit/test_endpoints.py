"""Where a client reaches a host's edge and how (plain HTTP or TLS), for every kind of inventory
entry; the sites the Caddyfile serves for each; the edge CA pinned on the controller."""

import pytest

from podkit.client.targets import cost_per_hour, each_host
from podkit.host.edge import EdgeSites, edge_problems, edge_sites
from podkit.wayin import WayIn, ca_path, endpoint_url, host_address, is_loopback, pin_ca, way_in
from tests.helpers import settings

POD = {"runpod_pod_id": "abc123", "runpod_public_ip": "10.203.0.7", "runpod_tcp_ports": {"22": 40122}}
PROXY = "https://abc123-8000.proxy.runpod.net"


@pytest.mark.parametrize(
    "data, way",
    [
        # the sandbox, a tunnel: nothing leaves the machine, plain HTTP
        ({"ssh_hostname": "127.0.0.1"}, WayIn("loopback", "off", "http://127.0.0.1:8000", "127.0.0.1", 8000)),
        ({"ssh_hostname": "localhost"}, WayIn("loopback", "off", "http://localhost:8000", "localhost", 8000)),
        ({"ssh_hostname": "::1"}, WayIn("loopback", "off", "http://[::1]:8000", "::1", 8000)),
        # a box reached directly over a network: TLS from Caddy's internal CA
        ({"ssh_hostname": "10.0.0.5"}, WayIn("direct", "internal", "https://10.0.0.5:8000", "10.0.0.5", 8000)),
        ({}, WayIn("direct", "internal", "https://box:8000", "box", 8000)),  # the inventory name is the address
        ({"ssh_hostname": "fd00::5"}, WayIn("direct", "internal", "https://[fd00::5]:8000", "fd00::5", 8000)),
        (
            {"ssh_hostname": "10.0.0.5", "podkit_edge_port": 9443},
            WayIn("direct", "internal", "https://10.0.0.5:9443", "10.0.0.5", 9443),
        ),
        # podkit_tls overrides auto either way
        (
            {"ssh_hostname": "10.0.0.5", "podkit_tls": "off"},
            WayIn("direct", "off", "http://10.0.0.5:8000", "10.0.0.5", 8000),
        ),
        (
            {"ssh_hostname": "127.0.0.1", "podkit_tls": "internal"},
            WayIn("loopback", "internal", "https://127.0.0.1:8000", "127.0.0.1", 8000),
        ),
        # a RunPod pod whose edge port is mapped to a public TCP port: direct, with the pod's address
        (
            {**POD, "runpod_tcp_ports": {"22": 40122, "8000": 40100}},
            WayIn("direct", "internal", "https://10.203.0.7:40100", "10.203.0.7", 40100),
        ),
        # not mapped: RunPod's HTTPS proxy, which speaks plain HTTP to the edge (internal TLS cannot apply)
        (POD, WayIn("runpod-proxy", "off", PROXY)),
        ({**POD, "podkit_tls": "internal"}, WayIn("runpod-proxy", "off", PROXY)),
        # a domain: an ACME certificate for it, and clients use the name
        (
            {"ssh_hostname": "10.0.0.5", "podkit_domain": "llm.example.com"},
            WayIn("direct", "acme", "https://llm.example.com:8000", "llm.example.com", 8000),
        ),
        (
            {**POD, "runpod_tcp_ports": {"8000": 40100}, "podkit_domain": "llm.example.com"},
            WayIn("direct", "acme", "https://llm.example.com:40100", "llm.example.com", 40100),
        ),
        # podkit_endpoint_url: a proxy or tunnel of the user's own, used as it is
        ({**POD, "podkit_endpoint_url": "http://tunnel:9/"}, WayIn("custom", "off", "http://tunnel:9")),
        (
            {"podkit_endpoint_url": "https://llm.example.com/", "podkit_tls": "internal"},
            WayIn("custom", "internal", "https://llm.example.com"),
        ),
        (
            {"podkit_endpoint_url": "https://llm.example.com", "podkit_domain": "llm.example.com"},
            WayIn("custom", "acme", "https://llm.example.com"),
        ),
    ],
)
def test_way_in(data, way):
    assert way_in("box", data) == way
    assert endpoint_url("box", data) == way.base_url and way.v1 == f"{way.base_url}/v1"
    assert (way.note is not None) == (way.kind == "runpod-proxy")


def test_the_port_given_wins_over_the_datum():
    assert way_in("box", {"ssh_hostname": "10.0.0.5", "podkit_edge_port": 9443}, 8443).port == 8443
    assert endpoint_url("box", {**POD, "runpod_tcp_ports": {"8443": 40200}}, 8443) == "https://10.203.0.7:40200"


@pytest.mark.parametrize(
    "value, checked",
    [
        ("10.0.0.5", "10.0.0.5"),
        ("[fd00::5]", "fd00::5"),
        ("fd00:0::5", "fd00::5"),
        ("gpu-box-1", "gpu-box-1"),
        ("llm.example.com", "llm.example.com"),
        ("llm.example.com\ntls off", None),
        ("a b", None),
        ("box}", None),
        ("-box", None),
        ("", None),
    ],
)
def test_host_address_is_an_ip_address_or_a_dns_name(value, checked):
    assert host_address(value) == checked


@pytest.mark.parametrize("address, loopback", [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True),
                                                ("[::1]", True), ("localhost", True), ("10.0.0.5", False),
                                                ("box", False)])  # fmt: skip
def test_is_loopback(address, loopback):
    assert is_loopback(address) is loopback


@pytest.mark.parametrize(
    "data, public, sites",
    [
        ({"ssh_hostname": "127.0.0.1"}, True, EdgeSites(("http://:8000",), (), None, "off")),
        ({"ssh_hostname": "127.0.0.1"}, False, EdgeSites(("http://:8000",), ("127.0.0.1",), None, "off")),
        (
            {"ssh_hostname": "10.0.0.5"},
            True,
            EdgeSites(
                ("https://10.0.0.5:8000", "https://127.0.0.1:8000", "https://localhost:8000"),
                (),
                "10.0.0.5",
                "internal",
            ),
        ),
        (
            {"ssh_hostname": "fd00::5"},
            True,
            EdgeSites(
                ("https://[fd00::5]:8000", "https://127.0.0.1:8000", "https://localhost:8000"),
                (),
                "fd00::5",
                "internal",
            ),
        ),
        # the certificate names the pod's address; the site listens on the edge's own port
        (
            {**POD, "runpod_tcp_ports": {"8000": 40100}},
            True,
            EdgeSites(
                ("https://10.203.0.7:8000", "https://127.0.0.1:8000", "https://localhost:8000"),
                (),
                "10.203.0.7",
                "internal",
            ),
        ),
        (POD, True, EdgeSites(("http://:8000",), (), None, "off")),
        (
            {"ssh_hostname": "10.0.0.5", "podkit_domain": "llm.example.com"},
            True,
            EdgeSites(
                ("https://llm.example.com:8000", "https://127.0.0.1:8000", "https://localhost:8000"),
                (),
                "llm.example.com",
                "acme",
            ),
        ),
        # an address that is no IP address nor DNS name never reaches the Caddyfile
        (
            {"ssh_hostname": "box; tls off"},
            True,
            EdgeSites(("https://127.0.0.1:8000", "https://localhost:8000"), (), "127.0.0.1", "internal"),
        ),
    ],
)
def test_edge_sites_for_each_way_in(data, public, sites):
    chosen = settings(podkit_public=public, **{k: v for k, v in data.items() if k.startswith("podkit_")})
    assert edge_sites(chosen, way_in("box", data, chosen.edge_port)) == sites


@pytest.mark.parametrize(
    "data, problem",
    [
        ({"ssh_hostname": "10.0.0.5"}, None),
        ({"ssh_hostname": "gpu-box-1.lan"}, None),
        ({"ssh_hostname": "127.0.0.1"}, None),  # loopback: plain HTTP, no certificate
        ({"ssh_hostname": "my_box"}, "clients reach this host as 'my_box', which a TLS certificate cannot name"),
        ({"ssh_hostname": "my_box", "podkit_tls": "off"}, None),
        ({"ssh_hostname": "my_box", "podkit_endpoint_url": "https://llm.example.com"}, None),
    ],
)
def test_an_address_no_certificate_can_name_is_refused_before_anything_changes(data, problem):
    found = edge_problems(way_in("box", data, 8000))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(problem) and "podkit_tls = 'off'" in found[0]


def test_the_edge_ca_is_pinned_once_per_host_and_rewritten_only_when_it_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("PODKIT_STATE_DIR", str(tmp_path / "state"))
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    path = pin_ca("box", pem + "\n\n")
    assert path == ca_path("box") == tmp_path / "state" / "ca" / "box.crt"
    assert path.read_text() == pem + "\n"
    written = path.stat().st_mtime_ns
    assert pin_ca("box", pem) == path and path.stat().st_mtime_ns == written, "unchanged: not rewritten"
    pin_ca("box", pem.replace("MIIB", "MIIC"))
    assert "MIIC" in path.read_text() and ca_path("other") != path


@pytest.mark.parametrize(
    "data, override, cost",
    [({}, None, None), ({"runpod_cost_per_hr": 2.49}, None, 2.49), ({"runpod_cost_per_hr": 2.49}, 1.0, 1.0)],
)
def test_cost_per_hour(data, override, cost):
    assert cost_per_hour(data, override) == cost


def test_each_host_keeps_the_order_and_runs_in_parallel():
    import threading

    seen = set()
    barrier = threading.Barrier(3, timeout=5)  # deadlocks unless the three run at once

    def work(n):
        barrier.wait()
        seen.add(threading.get_ident())
        return n * 2

    assert each_host(work, [1, 2, 3]) == [2, 4, 6]
    assert len(seen) == 3
