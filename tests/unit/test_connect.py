"""podkit.client.connect (what a client is told) and the ``podkit client`` and ``podkit tunnel`` commands.

The renderers run against one table of ways in (CASES): each case is a host's data as the
inventory gives it, the context its server has, and what every client must be told. The
snippets are checked by their readers: YAML by a YAML parser, the shell exports by bash,
the Python by the compiler. ``podkit tunnel`` runs against a real private sshd with a tiny
HTTP server standing in for the edge.
"""

from __future__ import annotations

import ast
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from podkit.client.agents import agent
from podkit.client.agents.printout import printout
from podkit.client.connect import (
    HERMES_MIN_CONTEXT,
    ClientSettings,
    ConnectError,
    env_snippet,
    hermes_yaml,
    llm_yaml,
    openai_snippet,
    ssh_forward_argv,
    summary,
    through_tunnel,
    warnings,
)
from podkit.wayin import RUNPOD_PROXY_NOTE, record_role, role_path, way_in
from tests import helpers
from tests.helpers import bash_env as _bash_env
from tests.helpers import one_error_line, podkit

KEY = "k3y" + "0123456789abcdef" * 2  # what must never show unless asked for
HERMES_WARNING = "Hermes Agent needs at least 64,000 tokens of context"

# One row per way in: the host's data, its context, and what a client must be told.
CASES = [
    {
        "id": "bare-metal-direct",
        "data": {"ssh_hostname": "10.192.0.10"},
        "context": 65536,
        "url": "https://10.192.0.10:8000/v1",
        "tls": "internal",
        "ca": True,
        "way": "direct",
        "hermes_warning": False,
        "note": False,
    },
    {
        "id": "runpod-proxy",
        "data": {"runpod_pod_id": "abc123", "runpod_public_ip": "10.203.0.5"},
        "context": 131072,
        "url": "https://abc123-8000.proxy.runpod.net/v1",
        "tls": "off",
        "ca": False,
        "way": "runpod-proxy",
        "hermes_warning": False,
        "note": True,
    },
    {
        "id": "runpod-tcp-port",
        "data": {"runpod_pod_id": "abc123", "runpod_public_ip": "10.203.0.5", "runpod_tcp_ports": {"9000": 40123}},
        "port": 9000,
        "context": 65536,
        "url": "https://10.203.0.5:40123/v1",
        "tls": "internal",
        "ca": True,
        "way": "direct",
        "hermes_warning": False,
        "note": False,
    },
    {
        "id": "sandbox-loopback-small-context",
        "data": {"ssh_hostname": "127.0.0.1", "podkit_edge_port": 18000},
        "context": 8192,
        "url": "http://127.0.0.1:18000/v1",
        "tls": "off",
        "ca": False,
        "way": "loopback",
        "hermes_warning": True,
        "note": False,
    },
    {
        "id": "own-proxy",
        "data": {"ssh_hostname": "10.0.0.5", "podkit_endpoint_url": "https://llm.example.com/"},
        "context": 63999,
        "url": "https://llm.example.com/v1",
        "tls": "off",
        "ca": False,
        "way": "custom",
        "hermes_warning": True,
        "note": False,
    },
    {
        "id": "acme-domain",
        "data": {"ssh_hostname": "10.192.0.10", "podkit_domain": "llm.example.com"},
        "context": HERMES_MIN_CONTEXT,
        "url": "https://llm.example.com:8000/v1",
        "tls": "acme",
        "ca": False,
        "way": "direct",
        "hermes_warning": False,
        "note": False,
    },
]


def settings_for(case, tmp_path: Path, model: str = "coder") -> ClientSettings:
    way = way_in("box", case["data"], case.get("port"))
    key_file = tmp_path / "secret dir" / "api_key"  # a space: every snippet must quote it
    key_file.parent.mkdir(exist_ok=True)
    key_file.write_text(KEY + "\n")
    ca_file = tmp_path / "ca" / "box.crt"
    return ClientSettings.of("box", way, model, case["context"], key_file, ca_file)


@pytest.fixture(params=CASES, ids=[case["id"] for case in CASES])
def case(request):
    return request.param


def test_the_settings_follow_the_way_in(case, tmp_path):
    cs = settings_for(case, tmp_path)
    assert (cs.base_url, cs.tls, cs.way) == (case["url"], case["tls"], case["way"])
    assert (cs.ca_file is not None) == case["ca"]
    assert cs.note == (RUNPOD_PROXY_NOTE if case["note"] else None)
    assert Path(cs.key_file).is_absolute()


def test_hermes_gets_a_valid_config_with_the_key_as_a_variable(case, tmp_path):
    cs = settings_for(case, tmp_path)
    text = hermes_yaml(cs)
    assert KEY not in text
    config = yaml.safe_load(text)
    assert list(config) == ["model"]
    assert config["model"] == {
        "provider": "custom",
        "base_url": case["url"],
        "default": "coder",
        "api_key": "${PODKIT_API_KEY}",
        "context_length": case["context"],
        "max_tokens": min(8192, case["context"] // 4),
    }
    # prompt and answer fit in the context
    assert config["model"]["max_tokens"] < config["model"]["context_length"]


def test_hermes_is_warned_below_its_minimum_context(case, tmp_path):
    cs = settings_for(case, tmp_path)
    hermes = [line for line in agent("hermes").render(cs).warnings if HERMES_WARNING in line]
    assert bool(hermes) == case["hermes_warning"]
    if hermes:
        assert hermes == [
            f"box: Hermes Agent needs at least 64,000 tokens of context but the server has {case['context']:,}: "
            "set vllm_max_model_len = 65536 and re-apply"
        ]
    assert not [line for line in agent("llm").render(cs).warnings if HERMES_WARNING in line]


def test_the_runpod_proxy_note_is_a_warning_and_in_the_summary(case, tmp_path):
    cs = settings_for(case, tmp_path)
    assert any(RUNPOD_PROXY_NOTE in line for line in warnings(cs)) == case["note"]
    assert (RUNPOD_PROXY_NOTE in summary(cs)) == case["note"]


def test_a_pinned_ca_that_is_not_there_yet_is_a_warning(case, tmp_path):
    cs = settings_for(case, tmp_path)
    missing = [line for line in warnings(cs) if "no pinned CA certificate" in line]
    assert bool(missing) == case["ca"]
    if case["ca"]:
        Path(cs.ca_file).parent.mkdir(parents=True)
        Path(cs.ca_file).write_text("-----BEGIN CERTIFICATE-----\n")
        assert not [line for line in warnings(cs) if "no pinned CA certificate" in line]


@pytest.mark.proc
def test_the_shell_exports_read_the_key_from_its_file_when_they_run(case, tmp_path):
    cs = settings_for(case, tmp_path)
    text = env_snippet(cs)
    assert KEY not in text
    env = _bash_env(text)
    assert env["OPENAI_BASE_URL"] == case["url"]
    assert env["OPENAI_API_KEY"] == env["PODKIT_API_KEY"] == KEY
    assert env["PODKIT_MODEL"] == "coder"
    assert env["OPENAI_AGENTS_DISABLE_TRACING"] == "1"
    assert env.get("SSL_CERT_FILE") == cs.ca_file
    assert ("SSL_CERT_FILE" in env) == case["ca"]


@pytest.mark.proc
def test_the_shell_exports_hold_the_key_itself_only_when_given(case, tmp_path):
    cs = settings_for(case, tmp_path)
    text = env_snippet(cs, key=KEY)
    assert KEY in text and "$(cat" not in text
    assert _bash_env(text)["OPENAI_API_KEY"] == KEY


def test_llm_gets_one_valid_entry_per_host(tmp_path):
    entries = [settings_for(case, tmp_path) for case in CASES[:2]]
    entries[1] = ClientSettings(**{**entries[1].as_dict(), "host": "pod"})
    parsed = yaml.safe_load(llm_yaml(entries))
    assert parsed == [
        {
            "model_id": "podkit-box",
            "model_name": "coder",
            "api_base": CASES[0]["url"],
            "api_key_name": "podkit",
            "supports_tools": True,
        },
        {
            "model_id": "podkit-pod",
            "model_name": "coder",
            "api_base": CASES[1]["url"],
            "api_key_name": "podkit",
            "supports_tools": True,
        },
    ]


def test_the_python_snippet_compiles_uses_the_endpoint_and_turns_tracing_off(case, tmp_path):
    cs = settings_for(case, tmp_path)
    text = openai_snippet(cs)
    assert KEY not in text
    tree = ast.parse(text)
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert case["url"] in strings and "coder" in strings and "PODKIT_API_KEY" in strings
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    tracing = [c for c in calls if getattr(c.func, "id", None) == "set_tracing_disabled"]
    assert [ast.literal_eval(c.args[0]) for c in tracing] == [True]
    assert any(getattr(c.func, "id", None) == "OpenAIChatCompletionsModel" for c in calls)
    assert (cs.ca_file in strings) == case["ca"]


@pytest.mark.proc
@pytest.mark.parametrize(
    "model",
    [
        'a "quoted" name',
        "colon: and # hash",
        "{braces}, [brackets] & *star",
        "ünï ☃ 模型",
        "yes",
        "123",
        "- dash",
        "del\x7f nel\x85 ls\u2028",
    ],
)
def test_yaml_stays_valid_for_any_model_name(model, tmp_path):
    cs = settings_for(CASES[0], tmp_path, model=model)
    assert yaml.safe_load(hermes_yaml(cs))["model"]["default"] == model
    assert yaml.safe_load(llm_yaml(cs))[0]["model_name"] == model
    assert _bash_env(env_snippet(cs))["PODKIT_MODEL"] == model
    assert model in {n.value for n in ast.walk(ast.parse(openai_snippet(cs))) if isinstance(n, ast.Constant)}


def test_hermes_needs_a_known_context(tmp_path):
    cs = ClientSettings(**{**settings_for(CASES[0], tmp_path).as_dict(), "context_length": None})
    with pytest.raises(ConnectError, match="context length is unknown"):
        hermes_yaml(cs)


def test_every_client_but_llm_takes_one_host(tmp_path):
    two = [(settings_for(CASES[0], tmp_path), None), (settings_for(CASES[1], tmp_path), None)]
    for client in ("env", "hermes", "openai"):
        with pytest.raises(ConnectError, match=f"--for {client} writes one host's settings but 2 are selected"):
            printout(client, two)
    assert len(yaml.safe_load(printout("llm", two).stdout)) == 2


def test_notes_tell_each_client_where_the_key_and_the_ca_are(tmp_path):
    cs = settings_for(CASES[0], tmp_path)

    def stderr(client):
        return printout(client, [(cs, None)]).stderr

    assert any("llm keys set podkit --value" in line for line in stderr("llm"))
    assert any("export PODKIT_API_KEY=" in line for line in stderr("hermes"))
    assert any(f"SSL_CERT_FILE={cs.ca_file}" in line for line in stderr("hermes"))
    assert not any(KEY in line for client in ("env", "hermes", "llm", "openai") for line in stderr(client))


# --- through a tunnel ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index, url, ca",
    [
        (0, "https://127.0.0.1:5555/v1", True),
        (1, "http://127.0.0.1:5555/v1", False),
        (3, "http://127.0.0.1:5555/v1", False),
    ],
)
def test_a_tunnel_client_talks_to_loopback_with_the_pinned_ca(index, url, ca, tmp_path):
    cs = through_tunnel(settings_for(CASES[index], tmp_path), 5555)
    assert (cs.base_url, cs.way, cs.note) == (url, "tunnel", None)
    assert (cs.ca_file is not None) == ca


def test_a_tunnel_to_an_acme_edge_is_refused(tmp_path):
    with pytest.raises(ConnectError, match="ACME certificate for its domain only"):
        through_tunnel(settings_for(CASES[5], tmp_path), 5555)


def _options(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "-o")


def test_the_tunnel_connects_as_the_deploy_does(tmp_path):
    data = {
        "ssh_hostname": "10.192.0.10",
        "ssh_port": 2222,
        "ssh_user": "ops",
        "ssh_key": "keys/100%.key",  # relative to the project; % is an ssh token
        "ssh_known_hosts_file": str(tmp_path / "known hosts"),
        "ssh_strict_host_key_checking": "yes",
    }
    argv = ssh_forward_argv("box", data, 18000, 8000, root=tmp_path)
    assert argv[:4] == ["ssh", "-N", "-L", "127.0.0.1:18000:127.0.0.1:8000"]
    assert argv[-1] == "10.192.0.10"
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "ops"
    assert argv[argv.index("-i") + 1] == f"{tmp_path}/keys/100%%.key"
    assert _options(argv) == {
        "IdentitiesOnly": "yes",
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": f'"{tmp_path}/known hosts"',
        "GlobalKnownHostsFile": "/dev/null",
        "ExitOnForwardFailure": "yes",
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "3",
        "ControlMaster": "no",
        "ControlPath": "none",
        "LogLevel": "ERROR",
    }


def test_the_tunnel_keeps_pyinfras_defaults_and_refuses_what_ssh_cannot_do():
    argv = ssh_forward_argv("gpu-box", {}, 1, 2)
    assert argv[-1] == "gpu-box" and _options(argv)["StrictHostKeyChecking"] == "accept-new"
    assert "-i" not in argv and "UserKnownHostsFile" not in _options(argv)
    with pytest.raises(ConnectError, match="cannot use ssh_password: set ssh_key"):
        ssh_forward_argv("box", {"ssh_password": "x"}, 1, 2)
    with pytest.raises(ConnectError, match="is not a host name"):
        ssh_forward_argv("box", {"ssh_hostname": "-oProxyCommand=sh"}, 1, 2)


# --- podkit client ---------------------------------------------------------------------------


def write_inventory(tmp_path: Path, hosts: dict[str, dict], key: bool = True) -> str:
    return helpers.write_inventory(tmp_path, hosts, KEY if key else None)


BOX = {"ssh_hostname": "10.192.0.10", "vllm_served_model_name": "coder"}
POD = {"ssh_hostname": "10.192.0.11", "runpod_pod_id": "abc123", "vllm_max_model_len": 32768}
#: nothing listens on port 1: the host cannot be read over SSH
UNREACHABLE = {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "vllm_max_model_len": "auto"}


def test_client_for_hermes_prints_only_the_config_on_stdout(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX})
    result = podkit(tmp_path, "client", inventory, "--for", "hermes")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["model"] == {
        "provider": "custom",
        "base_url": "https://10.192.0.10:8000/v1",
        "default": "coder",
        "api_key": "${PODKIT_API_KEY}",
        "context_length": 65536,
        "max_tokens": 8192,
    }
    assert all(line.startswith(("#", "model:", "  ")) for line in result.stdout.splitlines())
    assert "export PODKIT_API_KEY" in result.stderr and f"SSL_CERT_FILE={tmp_path}/state/ca/box.crt" in result.stderr
    assert KEY not in result.output


def test_client_for_hermes_with_several_hosts_is_refused_in_one_line(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX, "pod": POD})
    result = podkit(tmp_path, "client", inventory, "--for", "hermes")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "Error: --for hermes writes one host's settings but 2 are selected (box, pod): pick one with --host"
    )
    picked = podkit(tmp_path, "client", inventory, "--for", "hermes", "--host", "pod")
    assert picked.exit_code == 0 and yaml.safe_load(picked.stdout)["model"]["context_length"] == 32768
    assert HERMES_WARNING in picked.stderr and RUNPOD_PROXY_NOTE in picked.stderr
    everyone = podkit(tmp_path, "client", inventory, "--for", "llm")
    assert everyone.exit_code == 0 and [e["model_id"] for e in yaml.safe_load(everyone.stdout)] == [
        "podkit-box",
        "podkit-pod",
    ]


def test_a_follower_whose_rank_only_its_pod_knows_is_skipped_once_a_deploy_recorded_it(tmp_path, monkeypatch):
    """On a RunPod Instant Cluster the rank is the pod's NODE_RANK, not data: the deploy records it on
    the controller, and client commands skip a follower (it serves no API) or refuse it by name."""
    monkeypatch.setenv("PODKIT_STATE_DIR", str(tmp_path / "state"))
    inventory = write_inventory(
        tmp_path, {"head": {**BOX, "podkit_cluster": "pair"}, "node": {**POD, "podkit_cluster": "pair"}}
    )
    before = podkit(tmp_path, "client", inventory, "--json")
    assert [row["host"] for row in json.loads(before.stdout)] == ["head", "node"]  # no rank known yet
    record_role("head", "pair", 0)
    record_role("node", "pair", 1)
    after = podkit(tmp_path, "client", inventory, "--json")
    assert after.exit_code == 0 and [row["host"] for row in json.loads(after.stdout)] == ["head"]
    named = podkit(tmp_path, "client", inventory, "--host", "node")
    assert named.exit_code == 1 and one_error_line(named) == (
        "Error: node: rank 1 of cluster pair serves no API (its head, rank 0, does): name the head with --host"
    )
    record_role("node", None, None)  # the node left the cluster: its record goes
    assert not role_path("node").exists()
    assert [row["host"] for row in json.loads(podkit(tmp_path, "client", inventory, "--json").stdout)] == [
        "head",
        "node",
    ]


def test_client_json_is_a_list_of_settings(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX, "pod": POD})
    result = podkit(tmp_path, "client", inventory, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [sorted(row) for row in rows] == [
        ["base_url", "ca_file", "context_length", "host", "key_file", "model", "note", "tls", "warnings", "way"]
    ] * 2
    box, pod = rows
    assert box == {
        "host": "box",
        "base_url": "https://10.192.0.10:8000/v1",
        "model": "coder",
        "context_length": 65536,
        "key_file": str(tmp_path / "api_key"),
        "ca_file": str(tmp_path / "state" / "ca" / "box.crt"),
        "tls": "internal",
        "way": "direct",
        "note": None,
        "warnings": [
            f"box: no pinned CA certificate at {tmp_path}/state/ca/box.crt yet: apply the deploy (it pins the edge's CA)"
        ],
    }
    assert pod["way"] == "runpod-proxy" and pod["note"] == RUNPOD_PROXY_NOTE and pod["ca_file"] is None
    assert any(HERMES_WARNING in line for line in pod["warnings"])
    assert KEY not in result.output
    shown = podkit(tmp_path, "client", inventory, "--json", "--show-key")
    assert [row["api_key"] for row in json.loads(shown.stdout)] == [KEY, KEY]


def test_the_key_shows_nowhere_unless_asked_for(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX})
    for args in ([], ["--json"], ["--for", "env"], ["--for", "hermes"], ["--for", "llm"], ["--for", "openai"]):
        result = podkit(tmp_path, "client", inventory, *args)
        assert result.exit_code == 0 and KEY not in result.output, args
    shown = podkit(tmp_path, "client", inventory, "--for", "env", "--show-key")
    assert f"export OPENAI_API_KEY={KEY}" in shown.stdout
    assert KEY not in podkit(tmp_path, "client", inventory, "--for", "hermes", "--show-key").stdout


def test_client_without_a_key_file_names_the_host_and_the_fix(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX}, key=False)
    result = podkit(tmp_path, "client", inventory)
    assert result.exit_code == 1
    assert one_error_line(result) == (
        f"Error: box: no API key at {tmp_path / 'api_key'}; apply the deploy first (it creates the key)"
    )


def test_an_auto_context_that_cannot_be_read_is_one_line(tmp_path):
    inventory = write_inventory(tmp_path, {"far": UNREACHABLE})
    result = podkit(tmp_path, "client", inventory, "--json")
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert row["context_length"] is None
    assert row["warnings"][0].startswith(
        'far: the context length is unknown: vllm_max_model_len is "auto" and the running server\'s '
        "--max-model-len cannot be read (cannot run the command over SSH"
    )
    hermes = podkit(tmp_path, "client", inventory, "--for", "hermes")
    assert hermes.exit_code == 1
    line = one_error_line(hermes)
    assert line.startswith("Error: far: the context length is unknown") and line.endswith(
        "Hermes needs it: set vllm_max_model_len to a number"
    )
    env = podkit(tmp_path, "client", inventory, "--for", "env")
    assert env.exit_code == 0 and "export OPENAI_BASE_URL=http://127.0.0.1:8000/v1" in env.stdout
    assert "the context length is unknown" in env.stderr


def test_json_with_for_is_each_hosts_setup(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX, "pod": POD})
    result = podkit(tmp_path, "client", inventory, "--json", "--for", "env")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(row["host"], row["agent"], row["files"], row["args"]) for row in rows] == [
        ("box", "env", [], []),
        ("pod", "env", [], []),
    ]
    assert rows[0]["env"]["PODKIT_API_KEY"] == f'"$(cat {tmp_path}/api_key)"'
    assert KEY not in result.output


# --- podkit tunnel, against a real sshd ------------------------------------------------------

HAVE_SSH = shutil.which("ssh") is not None and (shutil.which("sshd") or Path("/usr/sbin/sshd").exists())
needs_ssh = pytest.mark.skipif(not HAVE_SSH, reason="openssh-client and openssh-server are not installed")
PODKIT = str(Path(sys.executable).parent / "podkit")


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"up" if self.path == "/health" else b"no"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def ssh_box(tmp_path):
    """A private sshd and, on loopback, an HTTP server standing in for the edge (plain HTTP)."""
    from podkit.sandbox.sshd import PrivateSshd

    sshd = PrivateSshd(tmp_path / "sshd")
    host = sshd.start()
    edge = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=edge.serve_forever, daemon=True).start()
    data = {**host.pyinfra_data(), "podkit_edge_port": edge.server_address[1], "podkit_tls": "off"}
    try:
        yield data
    finally:
        edge.shutdown()
        sshd.stop()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _start_tunnel(tmp_path, inventory, *args):
    proc = subprocess.Popen(
        [PODKIT, "tunnel", inventory, "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PODKIT_STATE_DIR": str(tmp_path / "state")},
    )
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=10)
            pytest.fail(f"podkit tunnel exited {proc.returncode}: {proc.stderr.read()}")
        lines.append(line)
        if line.rstrip() == "]":
            return proc, json.loads("".join(lines))
    proc.kill()
    pytest.fail("podkit tunnel printed no settings within 60 s")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.proc
@needs_ssh
def test_tunnel_forwards_the_edge_until_ctrl_c(tmp_path, ssh_box):
    inventory = write_inventory(tmp_path, {"box": ssh_box})
    proc, rows = _start_tunnel(tmp_path, inventory)
    try:
        [row] = rows
        port = int(row["base_url"].rsplit(":", 1)[1].split("/")[0])
        assert row["base_url"] == f"http://127.0.0.1:{port}/v1" and row["way"] == "tunnel"
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            assert answer.read() == b"up"
        ssh = _children(proc.pid)
        assert len(ssh) == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert "closing the tunnel" in proc.stderr.read()
        assert not Path(f"/proc/{ssh[0]}").exists() and not _answers(port)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.proc
@needs_ssh
def test_tunnel_exits_3_with_ssh_last_line_when_ssh_ends(tmp_path, ssh_box):
    inventory = write_inventory(tmp_path, {"box": ssh_box})
    proc, _ = _start_tunnel(tmp_path, inventory)
    try:
        [ssh] = _children(proc.pid)
        os.kill(ssh, signal.SIGKILL)
        assert proc.wait(timeout=15) == 3
        last = proc.stderr.read().strip().splitlines()[-1]
        assert last == "Error: box: ssh exited (status -9): it wrote nothing"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.proc
@needs_ssh
def test_tunnel_refuses_a_host_key_that_is_not_the_pinned_one(tmp_path, ssh_box):
    other = tmp_path / "other_known_hosts"
    other.write_text(f"[127.0.0.1]:{ssh_box['ssh_port']} ssh-ed25519 {'A' * 68}\n")
    inventory = write_inventory(tmp_path, {"box": {**ssh_box, "ssh_known_hosts_file": str(other)}})
    result = subprocess.run(
        [PODKIT, "tunnel", inventory],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PODKIT_STATE_DIR": str(tmp_path / "state")},
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1].startswith("Error: box: ssh exited (status 255): ")


def test_tunnel_local_port_takes_one_host(tmp_path):
    inventory = write_inventory(tmp_path, {"box": BOX, "pod": POD})
    result = podkit(tmp_path, "tunnel", inventory, "--local-port", "18000")
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: --local-port is one port but 2 hosts are selected: pick one with --host"
