"""The log diagnosis against real vLLM 0.32 (CPU) logs of each failure (tests/fixtures/vllm_logs/)."""

import json
import subprocess
from pathlib import Path

import pytest

from podkit.host.start.diagnose import diagnose, rule_name

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
        # logs of two starts: only the one after the last "starting vLLM" marker counts
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


def test_an_exception_no_rule_knows_is_the_cause_in_vllms_own_words():
    """vLLM 0.32 (CPU) starting a model whose config.json has num_attention_heads 0: the engine's
    wrapper ("See root cause above") is not the cause, the ZeroDivisionError above it is."""
    found = diagnose((LOGS / "model_config_zero_heads.log").read_text().splitlines())
    assert found is not None and found.cause == "vLLM raised ZeroDivisionError at start"
    assert found.evidence == "ZeroDivisionError: integer division or modulo by zero"
    assert "use another model or revision" in found.fix


@pytest.mark.parametrize(
    "line",
    [
        "WARNING [system_utils.py:255] This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",
        "INFO the word ValueError: in a sentence",
    ],
)
def test_a_line_that_only_quotes_an_exception_is_no_cause(line):
    assert diagnose([line]) is None


def as_launch_sh_writes_it(text: str) -> str:
    """A recorded log with its start lines as launch.sh writes them now (the runner wrote them before)."""
    return text.replace("podkit-runner: starting vLLM: /w/podkit/bin/launch.sh", "podkit: starting vLLM")


def test_a_failure_before_the_last_start_of_launch_sh_is_not_blamed():
    from podkit.host.start.diagnose import START_MARKERS
    from tests.helpers import podctl

    assert START_MARKERS == podctl.START_MARKERS
    current = as_launch_sh_writes_it((LOGS / "earlier_start_failed_current_starting.log").read_text())
    assert diagnose(current.splitlines()) is None
    differently = as_launch_sh_writes_it((LOGS / "earlier_start_failed_differently.log").read_text())
    assert diagnose(differently.splitlines()).cause == "vLLM rejected a command-line argument"


def test_launch_sh_writes_the_start_line_podctl_looks_for():
    from tests.helpers import podctl

    launch = (Path(__file__).resolve().parents[2] / "templates" / "launch.sh.j2").read_text()
    assert f" {podctl.START_MARKERS[0]} (local time " in launch  # the host's UTC offset follows


def test_a_failure_before_the_last_start_is_not_blamed():
    lines = (LOGS / "earlier_start_failed_differently.log").read_text().splitlines()
    found = diagnose(lines)
    assert found.cause == "vLLM rejected a command-line argument"
    assert "unrecognized arguments: --no-such-flag" in found.evidence
    assert diagnose((LOGS / "earlier_start_failed_current_starting.log").read_text().splitlines()) is None


# --- readiness: the live endpoint first, then the log ------------------------------------------


@pytest.fixture
def readiness_cfg(tmp_path):
    """``make(port, crashes, server_alive)``: podctl wait's config for a supervisord that is alive (a
    stand-in whose argv names this config), an exit count left from earlier starts, and a server
    process that runs (a sleep) or not; vLLM and the edge both on ``port``."""
    from tests.helpers import pid_line, stand_in_supervisord

    run = tmp_path / "run"
    run.mkdir()
    conf = str(tmp_path / "supervisord.conf")
    started = [stand_in_supervisord(conf)]
    (run / "supervisord.pid").write_text(f"{started[0].pid}\n")

    def make(port, crashes, server_alive, crashes_before=0, lasting=False, log_text=None):
        (run / "crashes").write_text(f"{crashes}\n")
        if server_alive:
            started.append(subprocess.Popen(["sleep", "60"]))
            (run / "vllm.pid").write_text(pid_line(started[-1].pid))
        log = tmp_path / "vllm.log"
        log.write_text(
            log_text or as_launch_sh_writes_it((LOGS / "earlier_start_failed_current_starting.log").read_text())
        )
        key = tmp_path / "api_key"
        key.write_text("k\n")
        cfg = {
            "host": "127.0.0.1",
            "port": port,
            "edge": {"port": port, "tls": False},
            "key_file": str(key),
            "run_dir": str(run),
            "supervisor": "supervisord",
            "supervisord": {"pidfile": str(run / "supervisord.pid"), "conf": conf, "socket": str(run / "no.sock")},
            "unit": None,
            "served_model_name": "coder",
            "log_file": str(log),
            "window": 2,
            "crash_limit": 2,
            "crashes_before": crashes_before,
            "tail_lines": 200,
        }
        if lasting:  # as the deploy sends it (podkit.host.start.readiness.wait_config)
            from podkit.host.start.diagnose import lasting_patterns

            cfg["lasting_failures"] = lasting_patterns()
        return json.loads(json.dumps(cfg))

    yield make
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.proc
def test_a_starting_server_is_waited_for_despite_exits_left_from_earlier_starts(readiness_cfg):
    """An interrupted run fixed the files; the exit count still says 5 exits, but a server is
    starting: readiness keeps waiting instead of calling it a crash loop, and shows only its lines."""
    import time

    from podkit.host.start.readiness import WaitResult
    from tests.helpers import podctl

    cfg = readiness_cfg(port=1, crashes=5, server_alive=True)
    began = time.monotonic()
    result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
    assert time.monotonic() - began >= 1.5, "gave up at once on a server that is still starting"
    assert result.runner_alive and result.server_alive
    assert not result.ready and not result.hopeless
    assert not any("KV cache" in line for line in result.log_tail)
    assert result.log_tail[0].startswith("Triton is installed")  # the current start's first line


@pytest.mark.proc
def test_with_no_server_running_the_exit_count_ends_the_wait(readiness_cfg):
    from podkit.host.start.readiness import WaitResult
    from tests.helpers import podctl

    result = WaitResult.parse(json.dumps(podctl.wait(readiness_cfg(port=1, crashes=5, server_alive=False))))
    assert result.hopeless and "vLLM exited 5 times" in result.failure(_settings(), 30)


@pytest.mark.proc
def test_one_exit_for_a_lasting_cause_ends_the_wait_while_the_supervisor_starts_again(readiness_cfg):
    """The start this wait watches exited once because its KV cache cannot hold one request, and the
    supervisor has begun the next start of the same launch: the wait ends at once, names the failed
    start's cause from that start's own lines, and does not sit through the next one."""
    import time

    from podkit.host.start.readiness import WaitResult
    from tests.helpers import podctl

    began = time.monotonic()
    result = WaitResult.parse(
        json.dumps(podctl.wait(readiness_cfg(port=1, crashes=1, server_alive=True, lasting=True)))
    )
    assert time.monotonic() - began < 1.5, "sat through the next start of a launch that cannot start"
    assert result.hopeless and result.server_alive and "KV cache is needed" in result.lasting
    assert result.log_tail[-1].endswith("vLLM exited with status 1 after 40s (exit 1 since start); restarting in 2s")
    assert not any("Triton is installed" in line for line in result.log_tail)  # not the next start's lines
    assert result.failure(_settings(), 12).startswith(
        "vLLM exited once (another start would fail the same way) after 12s: "
        "the KV cache cannot hold one request of vllm_max_model_len tokens"
    )


@pytest.mark.parametrize(
    "crashes, crashes_before, log",
    [
        # the failed start was before this wait (the deploy did not restart the server): not this start's
        (5, 5, "earlier_start_failed_current_starting"),
        # a port another process held: it may be free at the next start
        (1, 0, "port_in_use"),
    ],
    ids=["an exit before the wait", "a cause a retry can outlast"],
)
@pytest.mark.proc
def test_a_start_is_waited_for_after_an_exit_that_was_not_this_waits_or_not_lasting(
    readiness_cfg, crashes, crashes_before, log
):
    from podkit.host.start.readiness import WaitResult
    from tests.helpers import podctl

    text = as_launch_sh_writes_it((LOGS / f"{log}.log").read_text())
    if log == "port_in_use":  # that start exited, and the supervisor began the next
        text = f"2025-11-22T02:40:00Z podkit: starting vLLM\n{text}2025-11-22T02:41:00Z podkit: vLLM exited with status 1\n"
        text += "2025-11-22T02:41:00Z podkit: starting vLLM\n"
    cfg = readiness_cfg(
        port=1, crashes=crashes, server_alive=True, crashes_before=crashes_before, lasting=True, log_text=text
    )
    result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
    assert not result.hopeless and result.lasting is None


@pytest.mark.proc
def test_a_server_that_answers_is_ready_whatever_the_count_and_the_log_say(readiness_cfg):
    import http.server
    import threading

    from podkit.host.start.readiness import WaitResult
    from tests.helpers import podctl

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
        cfg = readiness_cfg(port=server.server_address[1], crashes=5, server_alive=False)
        result = WaitResult.parse(json.dumps(podctl.wait(cfg)))
    finally:
        server.shutdown()
    assert result.ready and not result.hopeless and result.edge_health == 200


def waited(health, models_status, edge_health, programs):
    from podkit.host.start.readiness import WaitResult

    answer = {
        "ready": False,
        "health": health,
        "models_status": models_status,
        "models": ["Qwen3-Coder-30B-A3B-Instruct"] if models_status == 200 else None,
        "edge": {"health": edge_health, "scheme": "http" if edge_health else None},
        "runner": {"pid": 77, "vllm_pid": 78, "crashes": 0, "programs": programs},
    }
    return WaitResult.parse(json.dumps(answer))


def test_an_edge_left_fatal_is_named_with_its_log():
    settings = _settings()
    result = waited(None, None, None, {"vllm": "RUNNING", "edge": "FATAL"})
    assert result.fatal == ["edge"] and result.hopeless
    assert result.failure(settings, 30) == (
        "vLLM answers on loopback but the edge (Caddy) on port 8000 does not (/health: None); "
        f"see {settings.paths.edge_log} (another program may hold the port)"
    )


def test_vllm_that_answers_behind_an_edge_that_does_not_is_named():
    """vLLM answers on loopback and lists the model, but Caddy does not answer on the edge's port:
    the failure names the edge and its log, not vLLM."""
    settings = _settings()
    result = waited(200, 200, None, {"vllm": "RUNNING", "edge": "BACKOFF"})
    assert "edge /health no answer" in result.progress(3, 30) and not result.ready
    assert result.failure(settings, 30).startswith(
        "vLLM answers on loopback but the edge (Caddy) on port 8000 does not (/health: None); "
        f"see {settings.paths.edge_log}"
    )


def _settings():
    from tests.helpers import settings

    return settings()
