"""The log diagnosis against real vLLM 0.32 (CPU) logs of each failure (tests/fixtures/vllm_logs/)."""

import json
from pathlib import Path

import pytest

from podkit.host.diagnose import diagnose, rule_name

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_logs"


@pytest.mark.parametrize(
    "log, rule",
    [
        ("kv_cache_too_small", "kv_cache_too_small"),
        ("max_model_len_too_large", "max_model_len_over_model"),
        ("port_in_use", "port_in_use"),
        ("tool_parser_unknown", "tool_parser_unknown"),
        ("startup_ok", None),
        # vLLM 0.32 (recorded): the top parser's "vllm: error: unrecognized arguments", and a bad value
        ("bad_argument_unrecognized", "bad_argument"),
        ("bad_argument_value", "bad_argument"),
        # runner logs of two starts: only the one after the last "starting vLLM" marker counts
        ("earlier_start_failed_differently", "bad_argument"),
        ("earlier_start_failed_current_starting", None),
    ],
)
def test_real_logs(log, rule):
    assert rule_name((LOGS / f"{log}.log").read_text().splitlines()) == rule


@pytest.mark.parametrize(
    "line, rule",
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
        ("RuntimeError: Failed to infer device type", "no_gpu"),
        ("vllm serve: error: argument --structured-outputs-config: 1 validation error", "bad_argument"),
        ("vllm serve: error: unrecognized arguments: --no-such-flag", "bad_argument"),
        ("vllm: error: unrecognized arguments: --max-model-length 1024", "bad_argument"),
        (
            "OSError: libc10_cuda.so: cannot open shared object file: No such file or directory",
            "cuda_packages_on_cpu",
        ),
        ("RuntimeError: operator torchvision::nms does not exist", "cuda_packages_on_cpu"),
        ("ValueError: Available memory on node 0 (7.6 GiB) is less than desired CPU memory utilization", "cpu_oom"),
        ("importlib.metadata.PackageNotFoundError: No package metadata was found for vllm", "vllm_metadata"),
        ("huggingface_hub.errors.GatedRepoError: 401 Client Error", "model_gated"),
        ("INFO: Application startup complete.", None),
    ],
)
def test_recorded_lines(line, rule):
    assert rule_name([line]) == rule


def test_diagnosis_names_cause_fix_and_evidence():
    found = diagnose((LOGS / "kv_cache_too_small.log").read_text().splitlines())
    assert "KV cache cannot hold one request" in found.line()
    assert "vllm_max_model_len" in found.fix
    assert "estimated maximum model length is 1920" in found.evidence


def test_a_failure_before_the_last_start_is_not_blamed():
    lines = (LOGS / "earlier_start_failed_differently.log").read_text().splitlines()
    found = diagnose(lines)
    assert found.cause == "vLLM rejected a command-line argument"
    assert "unrecognized arguments: --no-such-flag" in found.evidence
    assert diagnose((LOGS / "earlier_start_failed_current_starting.log").read_text().splitlines()) is None


# --- readiness: the live endpoint first, then the log ------------------------------------------


def readiness_cfg(tmp_path, port, crashes, server_alive):
    """podctl wait's config for a runner that is alive (this process), an exit count left from
    earlier starts, and a server process that runs (a sleep) or not."""
    import json
    import os
    import subprocess

    run = tmp_path / "run"
    run.mkdir()
    mine = open(f"/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[19]
    (run / "runner.pid").write_text(f"{os.getpid()} {mine}\n")
    (run / "crashes").write_text(f"{crashes}\n")
    server = None
    if server_alive:
        server = subprocess.Popen(["sleep", "60"])
        start = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()[19]
        (run / "vllm.pid").write_text(f"{server.pid} {start}\n")
    log = tmp_path / "vllm.log"
    log.write_text((LOGS / "earlier_start_failed_current_starting.log").read_text())
    key = tmp_path / "api_key"
    key.write_text("k\n")
    cfg = {
        "host": "127.0.0.1",
        "port": port,
        "key_file": str(key),
        "run_dir": str(run),
        "supervisor": "runner",
        "unit": None,
        "served_model_name": "coder",
        "log_file": str(log),
        "window": 2,
        "crash_limit": 2,
        "tail_lines": 200,
    }
    return json.loads(json.dumps(cfg)), server


def test_a_starting_server_is_waited_for_despite_exits_left_from_earlier_starts(tmp_path):
    """An interrupted run fixed the files; the runner's count still says 5 exits, but a server is
    starting: readiness keeps waiting instead of calling it a crash loop, and shows only its lines."""
    import time

    from podkit.host.readiness import WaitResult
    from podkit.remote import podctl

    cfg, server = readiness_cfg(tmp_path, port=1, crashes=5, server_alive=True)
    try:
        began = time.monotonic()
        result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
        assert time.monotonic() - began >= 1.5, "gave up at once on a server that is still starting"
    finally:
        server.kill()
        server.wait()
    assert not result.ready and not result.hopeless
    assert not any("KV cache" in line for line in result.log_tail)
    assert result.log_tail[0].startswith("Triton is installed")  # the current start's first line


def test_with_no_server_running_the_exit_count_ends_the_wait(tmp_path):
    from podkit.host.readiness import WaitResult
    from podkit.remote import podctl

    cfg, _ = readiness_cfg(tmp_path, port=1, crashes=5, server_alive=False)
    result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
    assert result.hopeless and "vLLM exited 5 times" in result.failure(_settings(), 30)


def test_a_server_that_answers_is_ready_whatever_the_count_and_the_log_say(tmp_path):
    import http.server
    import threading

    from podkit.host.readiness import WaitResult
    from podkit.remote import podctl

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"data": [{"id": "coder"}]}' if self.path == "/v1/models" else b""
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg, _ = readiness_cfg(tmp_path, port=server.server_address[1], crashes=5, server_alive=False)
        result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
    finally:
        server.shutdown()
    assert result.ready and not result.hopeless


def _settings():
    from tests.helpers import settings

    return settings()
