"""Where a client reaches a host, for every kind of inventory entry."""

import pytest

from podkit.client.targets import cost_per_hour, each_host, endpoint_url

POD = {"runpod_pod_id": "abc123", "runpod_public_ip": "203.0.113.7", "runpod_tcp_ports": {"22": 40122}}


@pytest.mark.parametrize(
    "data, host, port, url",
    [
        ({"ssh_hostname": "10.0.0.5"}, "0.0.0.0", 8000, "http://10.0.0.5:8000"),
        ({}, "0.0.0.0", 8000, "http://box:8000"),  # the inventory name is the address
        ({"ssh_hostname": "10.0.0.5"}, "127.0.0.1", 8001, "http://127.0.0.1:8001"),
        ({"ssh_hostname": "fd00::5"}, "::", 8000, "http://[fd00::5]:8000"),
        ({"podkit_endpoint_url": "https://llm.example.com/"}, "0.0.0.0", 8000, "https://llm.example.com"),
        (POD, "0.0.0.0", 8000, "https://abc123-8000.proxy.runpod.net"),  # port not exposed: the proxy
        ({**POD, "runpod_tcp_ports": {"22": 40122, "8000": 40100}}, "0.0.0.0", 8000, "http://203.0.113.7:40100"),
        ({**POD, "podkit_endpoint_url": "http://tunnel:9"}, "0.0.0.0", 8000, "http://tunnel:9"),
    ],
)
def test_endpoint_url(data, host, port, url):
    assert endpoint_url("box", data, host, port) == url


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
