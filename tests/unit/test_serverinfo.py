"""Reading what a host serves from podctl describe's answer; who holds the served port (podctl
run for real against a python http.server); a malformed checkpoint record read as none."""

import json
import os

import pytest

from podkit.client.serverinfo import parse_describe
from tests.helpers import settings

SETTINGS = settings(vllm_model="Qwen/Qwen2.5-Coder-7B-Instruct", podkit_volume="/workspace")
SNAP = "/workspace/podkit/cache/huggingface/hub/models--Qwen--Qwen2.5-Coder-7B-Instruct/snapshots/abc"
ARGS = [SNAP, "--served-model-name", "Qwen2.5-Coder-7B-Instruct", "--tool-call-parser", "hermes", "--port=8000"]


@pytest.mark.parametrize(
    "answer, model, revision, running, error",
    [
        (
            {
                "running": True,
                "serve_args": ARGS,
                "vllm_version": "0.33.0",
                "checkpoint": {"repo": "Qwen/Qwen2.5-Coder-7B-Instruct", "revision": "abc123", "snapshot": SNAP},
            },
            "Qwen/Qwen2.5-Coder-7B-Instruct",
            "abc123",
            True,
            None,
        ),
        (
            {"running": True, "serve_args": ["/models/mine", "--port", "8000"], "checkpoint": None},
            "/models/mine",
            None,
            True,
            None,
        ),  # a folder on the host: no revision to record
        (
            {"running": False, "serve_args": None, "checkpoint": None},
            None,
            None,
            False,
            "no vLLM server runs under supervisord on this host",
        ),
        (
            {"podctl": 0, "error": "python3 not found on PATH"},
            None,
            None,
            False,
            "python3 not found on PATH: podkit needs python3 on the host (Debian/Ubuntu: apt-get install -y "
            "python3 python3-venv)",
        ),
    ],
)
def test_parse_describe(answer, model, revision, running, error):
    info = parse_describe("pod", SETTINGS, json.dumps(answer) + "\n")
    assert (info.model, info.revision, info.running, info.error) == (model, revision, running, error)


def test_flags_are_read_in_both_spellings():
    info = parse_describe("pod", SETTINGS, json.dumps({"running": True, "serve_args": ARGS}))
    assert info.flag("--tool-call-parser") == "hermes"
    assert info.flag("--port") == "8000"
    assert info.flag("--reasoning-parser") is None


def test_garbage_is_an_error_not_a_crash():
    assert "printed no JSON" in parse_describe("pod", SETTINGS, "Welcome to the pod!\n").error


def started_server(*argv):
    """A stand-in server whose argv reads as ``vllm serve ARGV`` (podctl finds the serve args in it)."""
    import subprocess
    import sys
    import time

    from tests.helpers import podctl

    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "serve", *argv])
    for _ in range(100):  # the child's argv is in /proc once it has exec'd
        if podctl.serve_args(podctl.process_argv(server.pid)):
            return server
        time.sleep(0.05)
    server.kill()
    raise AssertionError("the stand-in server did not start")


@pytest.mark.proc
@pytest.mark.parametrize("supervisor", ["supervisord", "systemd"])
def test_describe_finds_the_server_launch_sh_recorded_under_either_supervisor(tmp_path, monkeypatch, supervisor):
    """launch.sh writes vllm.pid whichever supervisor starts it; under systemd the unit's MainPID is
    launch.sh itself, not vLLM, and is not taken for the server."""
    from tests.helpers import pid_line, podctl

    server = started_server("/models/mine", "--port", "8001")
    launch_sh = started_server("/not/the/server")  # what the unit's MainPID names
    try:
        monkeypatch.setattr(
            podctl, "unit_state", lambda name: {"active": "active", "main_pid": launch_sh.pid, "restarts": 0}
        )
        cfg = {
            "run_dir": str(tmp_path),
            "venv": str(tmp_path / "venv"),
            "key_file": str(tmp_path / "key"),
            "log_file": str(tmp_path / "vllm.log"),
            "scripts": [],
            "unit": "podkit-vllm.service",
            "edge_unit": "podkit-edge.service",
            "supervisor": supervisor,
        }
        assert podctl.describe(cfg)["running"] is False, "no pid file: no server"
        (tmp_path / "vllm.pid").write_text(pid_line(server.pid))
        described = podctl.describe(cfg)
        assert described["running"] is True, described
        assert described["serve_args"][:3] == ["/models/mine", "--port", "8001"]
        assert described["vllm_listens"] == [] and described["routes"] is None  # asked by verify only
    finally:
        for proc in (server, launch_sh):
            proc.kill()
            proc.wait()


@pytest.mark.proc
def test_describe_reads_the_generation_config_and_scans_for_the_key_only_when_asked(tmp_path):
    import subprocess
    import sys
    import time

    from tests.helpers import podctl

    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text('{"temperature": 0.7}')
    (tmp_path / "key").write_text("k" * 32)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "serve", str(model)])
    try:
        for _ in range(100):
            if podctl.serve_args(podctl.process_argv(server.pid)):
                break
            time.sleep(0.05)
        (tmp_path / "vllm.pid").write_text(f"{server.pid} {podctl.starttime(server.pid)}")
        cfg = {
            "run_dir": str(tmp_path),
            "venv": str(tmp_path / "venv"),
            "key_file": str(tmp_path / "key"),
            "log_file": str(tmp_path / "vllm.log"),
            "scripts": [],
        }
        described = podctl.describe(cfg)
        assert described["generation_config"] == {
            "path": str(model / "generation_config.json"),
            "config": {"temperature": 0.7},
        }
        assert described["leaks"] is None
        assert described["running"] and podctl.describe({**cfg, "leaks": True})["leaks"]["argv"] == []
    finally:
        server.kill()
        server.wait()


# ------------------------------------------------- who holds the served port: podctl run for real


def podctl_run(action, cfg):
    """``podctl ACTION`` as a host runs it: the same shell command, python3 from PATH."""
    import subprocess

    from podkit.host.podctl import podctl_command

    out = subprocess.run(["sh", "-c", podctl_command(action, cfg)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def http_server():
    """``python -m http.server`` on a free loopback port, started by a shell that stays its parent:
    (the shell, the server, the port)."""
    import subprocess
    import sys

    shell = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -u -m http.server 0 --bind 127.0.0.1 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = int(shell.stdout.readline())
    line = shell.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...) ..."
    port = int(line.split(" port ")[1].split()[0])
    yield shell, server, port
    shell.kill()
    subprocess.run(["kill", str(server)])
    shell.wait()


def describe_cfg(tmp_path, port, **extra):
    """describe's config for a host whose edge listens on ``port`` (vLLM on port 1: nothing there)."""
    return {
        "host": "127.0.0.1",
        "port": 1,
        "edge": {"port": port, "tls": False},
        "run_dir": str(tmp_path),
        "venv": str(tmp_path / "venv"),
        "key_file": str(tmp_path / "key"),
        "log_file": str(tmp_path / "vllm.log"),
        "scripts": [],
        **extra,
    }


@pytest.mark.proc
def test_podctl_names_a_stranger_on_the_port_and_knows_podkits_server(tmp_path, http_server):
    from podkit.client.serverinfo import key_refusal
    from tests.helpers import podctl

    shell, server, port = http_server
    stranger = podctl_run("describe", describe_cfg(tmp_path, port))["listener"]
    assert stranger["held"] and not stranger["podkit"], stranger
    assert stranger["pid"] == server and stranger["program"].startswith("python"), stranger
    info = parse_describe("pod", SETTINGS, json.dumps({"running": False, "listener": stranger}))
    assert key_refusal(info) == (
        f"port {port} on pod is held by pid {server} ({stranger['program']}), not by podkit's edge: "
        "stop it or change podkit_edge_port; the key was not sent"
    )
    # edge.sh's pid file names the edge itself, or a process it runs under: podkit's either way
    for pid in (server, shell.pid):
        (tmp_path / "edge.pid").write_text(f"{pid} {podctl.starttime(pid)}\n")
        ours = podctl_run("describe", describe_cfg(tmp_path, port))["listener"]
        assert ours["held"] and ours["podkit"] and ours["pid"] == server, ours
        assert key_refusal(parse_describe("pod", SETTINGS, json.dumps({"listener": ours}))) is None
    # vLLM's pid file vouches for nothing on the edge's port: clients talk to the edge only
    (tmp_path / "edge.pid").unlink()
    (tmp_path / "vllm.pid").write_text(f"{server} {podctl.starttime(server)}\n")
    assert not podctl_run("describe", describe_cfg(tmp_path, port))["listener"]["podkit"]
    # a pid file left by an edge that is gone (its pid reused) vouches for nothing
    (tmp_path / "edge.pid").write_text(f"{server} 1\n")
    assert not podctl_run("describe", describe_cfg(tmp_path, port))["listener"]["podkit"]


@pytest.mark.proc
def test_podctl_says_when_nothing_listens(tmp_path):
    from podkit.sandbox.sshd import free_port

    port = free_port()
    listener = podctl_run("describe", describe_cfg(tmp_path, port))["listener"]
    assert listener == {"port": port, "held": False, "podkit": False, "pid": None, "program": None, "user": None}


@pytest.mark.proc
def test_describe_says_where_vllm_listens_and_which_routes_it_serves(tmp_path, http_server):
    """For verify's edge check: every address the server's processes listen on (the shell's child
    holds the socket here), and the paths of the /openapi.json vLLM answers on loopback."""
    import http.server
    import threading

    from tests.helpers import podctl

    shell, _, port = http_server
    assert podctl.listen_addresses(shell.pid) == [{"address": "127.0.0.1", "port": port}]
    assert podctl.listen_addresses(None) == []
    assert podctl.hex_address("0100007F", 4) == "127.0.0.1"
    assert podctl.hex_address("00000000000000000000000001000000", 6) == "::1"

    class OpenApi(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"paths": {"/v1/models": {}, "/tokenize": {}, "/health": {}}}).encode()
            self.send_response(200 if self.path == "/openapi.json" else 404)
            self.end_headers()
            self.wfile.write(body if self.path == "/openapi.json" else b"")

        def log_message(self, *args):
            pass

    vllm = http.server.HTTPServer(("127.0.0.1", 0), OpenApi)
    threading.Thread(target=vllm.serve_forever, daemon=True).start()
    try:
        (tmp_path / "vllm.pid").write_text(f"{shell.pid} {podctl.starttime(shell.pid)}\n")
        cfg = {**describe_cfg(tmp_path, 1), "port": vllm.server_address[1], "routes": True}
        assert podctl_run("describe", cfg)["routes"] == ["/health", "/tokenize", "/v1/models"]
        assert podctl_run("describe", {**cfg, "routes": False})["routes"] is None
    finally:
        vllm.shutdown()
        vllm.server_close()


def test_parse_describe_reads_where_vllm_listens_and_its_routes():
    answer = {
        "running": True,
        "serve_args": ARGS,
        "vllm_listens": [{"address": "127.0.0.1", "port": 8001}],
        "routes": ["/health", "/v1/models"],
    }
    info = parse_describe("pod", SETTINGS, json.dumps(answer))
    assert info.vllm_listens == [{"address": "127.0.0.1", "port": 8001}] and info.routes == ["/health", "/v1/models"]
    assert parse_describe("pod", SETTINGS, json.dumps({"running": False})).routes is None


def test_describe_config_names_every_log_script_and_caddys_folder():
    from podkit.client.serverinfo import describe_config

    paths = SETTINGS.paths
    cfg = describe_config(SETTINGS, leaks=True)
    assert cfg["logs"] == [paths.log_file, paths.edge_log, paths.supervisord_log, paths.access_log]
    assert cfg["access_log"] == paths.access_log
    assert cfg["folders"] == [paths.edge_data] and cfg["routes"] is True and cfg["leaks"] is True
    assert set(cfg["scripts"]) == {
        paths.launch_script,
        paths.env_file,
        paths.edge_script,
        paths.caddyfile,
        paths.supervisord_conf,
    }
    assert paths.api_key not in cfg["scripts"] and cfg["edge"]["port"] == SETTINGS.edge_port
    assert describe_config(SETTINGS)["routes"] is False


# ------------------------------------------------- a malformed checkpoint record is no record


@pytest.mark.proc
@pytest.mark.parametrize(
    "record, why",
    [
        ({"snapshot": None}, "has no snapshot (null)"),
        ({"snapshot": "relative/path"}, "names a snapshot that is not an absolute path"),
        ({"files": "config.json"}, "has no list of files"),
        ({"revision": 7}, "has no revision (7)"),
        (["not", "an", "object"], "is not a JSON object"),
    ],
)
def test_a_malformed_checkpoint_record_is_ignored_and_said_so(tmp_path, record, why):
    """A hand-edited or cut-short run/checkpoint.json: the probe treats it as no record (the deploy
    fetches again, which rewrites it) and says why; describe reports no checkpoint. No traceback."""
    from podkit.host.probe import parse_probe, probe_config
    from tests.helpers import settings_for

    chosen = settings_for(tmp_path, vllm_model="acme/Coder-7B")
    path = chosen.paths.checkpoint_record
    whole = {
        "model": "acme/Coder-7B",
        "repo": "acme/Coder-7B",
        "revision": "a" * 40,
        "snapshot": str(tmp_path / "snap"),
        "files": ["config.json"],
    }
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as handle:
        json.dump({**whole, **record} if isinstance(record, dict) else record, handle)
    state = parse_probe(json.dumps(podctl_run("probe", probe_config(chosen))))
    assert state.checkpoint == {
        "complete": False,
        "missing": [],
        "ignored": f"{path} {why}: ignored, the fetch rewrites it",
    }
    cfg = describe_cfg(tmp_path, 1, record=path)
    assert podctl_run("describe", cfg)["checkpoint"] is None
