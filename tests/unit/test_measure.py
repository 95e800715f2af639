"""The measured plan's pure parts: the start it asks for, the files it may fetch, what it reads back."""

import fnmatch
import json
from pathlib import Path

import pytest

from podkit.host.measure import (
    METADATA_PATTERNS,
    measure_argv,
    measure_command,
    measurement_key,
    parse_answer,
    read_measurement,
    report_lines,
    vllm_reason,
    weight_files,
)
from podkit.remote import measure as remote

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASE_KEYS = set(json.loads((FIXTURES / "kv_reference_cases.json").read_text())[0])

SERVE = ["/v/bin/vllm", "serve", "/vol/snap", "--served-model-name", "m", "--host", "127.0.0.1", "--port", "8001"]


def test_the_measured_start_is_the_served_one_with_random_weights():
    argv = measure_argv(SERVE + ["--load-format", "safetensors"])
    assert argv[:3] == ["/v/bin/vllm", "serve", "{model}"]
    assert argv[argv.index("--port") + 1] == "{port}" and "127.0.0.1" in argv
    assert argv[-2:] == ["--load-format", "dummy"]  # last, so it wins over the flags' own


@pytest.mark.parametrize(
    "name, fetched",
    [
        ("config.json", True),
        ("tokenizer.json", True),
        ("tokenizer_config.json", True),
        ("tekken.json", True),
        ("o200k_base.tiktoken", True),
        ("model.safetensors", False),
        ("model-00001-of-00004.safetensors", False),
        ("model.safetensors.index.json", False),
        ("consolidated.safetensors", False),
        ("pytorch_model.bin", False),
        ("original/consolidated.00.pth", False),
        ("README.md", False),
    ],
)
def test_only_config_and_tokenizer_files_are_asked_for(name, fetched):
    assert any(fnmatch.fnmatch(name, pattern) for pattern in METADATA_PATTERNS) is fetched


def test_the_key_changes_with_everything_a_measurement_depends_on():
    base = ({"gpu": "H100", "memory_gib": 79.2, "count": 1}, "0.33.0", "org/m@abc", SERVE)
    keys = {measurement_key(*base)}
    keys.add(measurement_key({"gpu": "H200", "memory_gib": 139.8, "count": 1}, *base[1:]))
    keys.add(measurement_key(base[0], "0.32.0", *base[2:]))
    keys.add(measurement_key(base[0], base[1], "org/m@def", base[3]))
    keys.add(measurement_key(*base[:3], SERVE + ["--max-num-seqs", "64"]))
    assert len(keys) == 5 and measurement_key(*base) in keys


KV_FAILURE = (
    "(EngineCore_DP0 pid=4242) ValueError: To serve at least one request with the models's max seq len "
    "(65536), (0.12 GiB KV cache is needed, which is larger than the available KV cache memory (0.06 GiB). "
    "Based on the available memory, the estimated maximum model length is 32768."
)


@pytest.mark.parametrize(
    "errors, tail, reason",
    [
        (
            [KV_FAILURE, "ERROR 11-26 12:00:01 [core.py:700] EngineCore failed to start."],
            [],
            KV_FAILURE[KV_FAILURE.index("ValueError") :],
        ),
        (
            [
                KV_FAILURE,
                "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {}",
            ],
            [],
            KV_FAILURE[KV_FAILURE.index("ValueError") :],
        ),
        (
            ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. (while warming up sampler)"],
            [],
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. (while warming up sampler)",
        ),
        (
            ["ERROR 11-26 12:00:01 [core.py:700] EngineCore failed to start."],
            [],
            "ERROR 11-26 12:00:01 [core.py:700] EngineCore failed to start.",
        ),
        ([], ["Killed"], "Killed"),
        ([], [], "vLLM stopped without saying why"),
    ],
)
def test_the_reason_is_vllms_own(errors, tail, reason):
    assert vllm_reason(errors, tail) == reason


RECORD = {
    "vllm_version": "0.32.0",
    "model": "acme/tiny",
    "gpu": None,
    "gpu_count": 0,
    "gpu_memory_gib": None,
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "max_model_len": 8192,
    "kv_cache_dtype": "auto",
    "config": {"num_hidden_layers": 4},
    "predicted": {"available_kv_gib": 0.0625, "kv_tokens": 32768, "max_concurrency": 4.0},
}
STARTED = {
    "measure": 1,
    "started": True,
    "seconds": 31.5,
    "fetched": ["config.json", "tokenizer.json"],
    "lines": [
        "INFO 11-26 12:00:00 [api_server.py:1] vLLM API server version 0.32.0",
        "INFO 11-26 12:00:09 [cpu_worker.py:1] Loading weights took 0.02 seconds",
        "INFO 11-26 12:00:10 [kv_cache_utils.py:1] CPU KV cache size: 32,768 tokens",
        "INFO 11-26 12:00:10 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per request: 4.00x",
        "INFO 11-26 12:00:30 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:40000",
    ],
}


def test_a_start_is_measured_against_the_plan_and_kept_as_a_reference_case():
    found = read_measurement("sandbox", STARTED, RECORD)
    assert found["fits"] is True and found["measured"] is True
    assert found["logged"]["kv_cache_tokens"] == 32768 and found["logged"]["max_concurrency"] == 4.0
    assert {row["figure"]: row["gap"] for row in found["compare"]} == {"KV tokens": 0.0, "max concurrency": 0.0}
    assert found["phases_seconds"]["total"] == 30.0
    case = found["reference_case"]
    assert CASE_KEYS - set(case) <= {"nodes", "notes", "max_num_seqs", "max_num_batched_tokens"}, CASE_KEYS - set(case)
    assert case["fits"] is True and case["logged"]["error"] is None and case["vllm_version"] == "0.32.0"
    text = "\n".join(report_lines(found))
    assert "FITS (measured)" in text and "KV cache tokens: 32768" in text and "concurrency at 8192 tokens: 4.0x" in text


KV_FAILED = {"measure": 1, "started": False, "exit": 1, "errors": [KV_FAILURE], "lines": [], "seconds": 12}


def test_a_failed_start_does_not_fit_with_vllms_reason():
    found = read_measurement("sandbox", KV_FAILED, RECORD)
    assert found["fits"] is False and found["measured"] is True
    assert found["reason"].startswith("ValueError: To serve at least one request")
    assert found["reference_case"]["fits"] is False and found["reference_case"]["logged"]["error"] == found["reason"]
    assert report_lines(found)[0].startswith("sandbox: DOES NOT FIT (measured): ValueError")


def test_plan_measure_exits_1_with_the_failed_start_in_its_json(monkeypatch, tmp_path):
    """The CLI around a start vLLM refused (the host's side replaced by its recorded answer): exit 1,
    and the JSON says measured, does not fit, in vLLM's words, with the reference case kept."""
    from click.testing import CliRunner

    import podkit_cli.hosts
    import podkit_cli.measure
    from podkit_cli import cli

    class Host:
        name = "sandbox"

        def disconnect(self):
            pass

    monkeypatch.setattr(podkit_cli.hosts, "load_hosts", lambda inventory, names: [Host()])
    monkeypatch.setattr(podkit_cli.measure, "measure_host", lambda *a: read_measurement("sandbox", KV_FAILED, RECORD))
    monkeypatch.setenv("PODKIT_STATE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["plan", "--measure", "inventories/sandbox.py", "acme/tiny", "--json"])
    assert result.exit_code == 1, result.output
    (found,) = json.loads(result.stdout)
    assert found["fits"] is False and found["measured"] is True and found["reason"].startswith("ValueError")
    assert json.loads(Path(found["reference_case_file"]).read_text())["logged"]["error"] == found["reason"]


def test_a_start_that_never_answered_says_so():
    answer = {"measure": 1, "started": False, "exit": None, "timed_out": True, "errors": [], "seconds": 1200}
    assert "did not start within 1200 s" in read_measurement("h", answer, RECORD)["reason"]


def test_what_came_back_instead_of_the_json_line_is_named():
    assert parse_answer("bash: python: not found\n")["error"].startswith("the measurement printed no JSON")
    assert parse_answer("noise\n" + json.dumps({"measure": 1, "started": True}) + "\n")["started"] is True
    found = read_measurement("h", {"error": "RuntimeError: RepoNotFound"}, RECORD)
    assert found["measured"] is False and found["fits"] is None and "NOT MEASURED" in report_lines(found)[0]


def test_weight_files_are_told_apart():
    assert weight_files(["config.json", "model.safetensors", "x/pytorch_model.bin"]) == [
        "model.safetensors",
        "x/pytorch_model.bin",
    ]


def test_the_command_carries_no_secret_and_the_program_verbatim():
    cfg = {"model": "/m", "argv": ["vllm"], "token_file": "/vol/podkit/secrets/hf_token"}
    command = measure_command(cfg, "/vol/podkit/venv/bin/python", "http://127.0.0.1:9")
    assert "http://127.0.0.1:9" in command and "def fetch_metadata" in command
    assert "hf_token" in command and "hf_" + "x" * 8 not in command  # the path, never a token


def test_the_host_side_fetch_takes_config_and_tokenizer_only(tmp_path):
    from testing.hub import LocalHub
    from testing.hub_repos import repo_files, write_repo

    files = dict(repo_files(), **{"tokenizer_config.json": "{}", "README.md": "# x\n"})
    write_repo(tmp_path / "hub", "acme/M-7B", files)
    with LocalHub(tmp_path / "hub") as hub:
        cfg = {
            "repo": "acme/M-7B",
            "revision": None,
            "patterns": list(METADATA_PATTERNS),
            "scratch_hub": str(tmp_path / "scratch"),
            "endpoint": hub.url,
        }
        snapshot, fetched = remote.fetch_metadata(cfg)
        gets = [r["path"] for r in hub.request_log if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert fetched == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert not any(path.endswith(".safetensors") for path in gets)
    assert Path(snapshot, "config.json").is_file() and not list(Path(snapshot).glob("*.safetensors"))


def _deploy(measure=True, gpus=(), server_pid=None, measured=None, fetched=False, extra_args=()):
    from types import SimpleNamespace

    from podkit.host.fetch import FetchSpec
    from podkit.host.hostplan import HostPlan
    from podkit.host.hoststate import Gpu
    from podkit.settings import Settings, defaults

    settings = Settings.from_mapping(
        dict(defaults(), vllm_model="acme/M-7B", podkit_plan_measure=measure, vllm_extra_args=list(extra_args))
    )
    spec = FetchSpec("acme/M-7B", "acme/M-7B", "a" * 40, ("config.json", "model.safetensors"), 10)
    launch = HostPlan(
        model=spec.snapshot(settings.paths),
        max_model_len=8192,
        tensor_parallel_size=1,
        tool_call_parser="hermes",
        reasoning_parser=None,
        fetch=spec,
        fetched=fetched,
    )
    state = SimpleNamespace(
        gpus=[Gpu(i, "NVIDIA H100 80GB HBM3", 81559, "9.0") for i in range(len(gpus))],
        has_gpus=bool(gpus),
        server_pid=server_pid,
        measured=measured,
    )
    return settings, launch, state


def test_the_deploy_measures_a_new_checkpoint_once_and_keeps_the_outcome_with_its_key():
    from podkit.host.measure import deploy_step

    step = deploy_step(*_deploy(gpus=[0]), "/v/bin/vllm")
    assert step["action"] == "measure"
    cfg = step["cfg"]
    assert cfg["repo"] == "acme/M-7B" and cfg["revision"] == "a" * 40 and cfg["key"] == step["key"]
    assert cfg["record"].endswith("/podkit/measure/measured.json") and cfg["argv"][-2:] == ["--load-format", "dummy"]
    assert cfg["scratch_hub"] != _deploy()[0].paths.hub_cache  # never the cache the server uses
    again = deploy_step(*_deploy(gpus=[0], measured={"key": step["key"], "result": {"started": True}}), "/v/bin/vllm")
    assert again["action"] == "recorded" and again["result"]["started"] is True
    # other flags are another start: measured again
    other = deploy_step(
        *_deploy(gpus=[0], measured={"key": step["key"], "result": {}}, extra_args=["--max-num-seqs", "64"]),
        "/v/bin/vllm",
    )
    assert other["action"] == "measure" and other["key"] != step["key"]


@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"measure": False}, None),
        ({"fetched": True}, None),
        ({"gpus": [0], "server_pid": 4242}, "the running server (pid 4242) holds the GPUs' memory"),
    ],
)
def test_the_deploy_does_not_measure(kwargs, why):
    from podkit.host.measure import deploy_step

    step = deploy_step(*_deploy(**kwargs), "/v/bin/vllm")
    assert step["action"] == "skip"
    assert (step["why"] is None) if why is None else (why in step["why"] and "--stop-server" in step["why"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["acme/M", "--host", "box"], "--host and --stop-server go with --measure INVENTORY"),
        (["acme/M", "--stop-server"], "--host and --stop-server go with --measure INVENTORY"),
        (["acme/M", "--measure", "inventories/sandbox.py", "--gpu", "H100"], "leave out --gpu and --gpu-memory-gib"),
    ],
)
def test_measure_options_are_refused_out_of_place(args, message):
    from click.testing import CliRunner

    from podkit_cli import cli

    result = CliRunner().invoke(cli, ["plan", *args])
    assert result.exit_code == 2 and message in result.output


def test_the_hosts_own_server_on_gpus_refuses_a_measurement_unless_it_may_be_stopped():
    from podkit_cli.measure import server_refusal

    settings, _, state = _deploy(gpus=[0], server_pid=4242)
    said = server_refusal("gpu-box", settings, state, stop_server=False)
    assert said.startswith("gpu-box: the host's own vLLM (pid 4242) holds vllm_gpu_memory_utilization 0.9")
    assert "--stop-server" in said
    assert server_refusal("gpu-box", settings, state, stop_server=True) is None
    assert server_refusal("cpu-box", *_deploy(server_pid=4242)[::2], stop_server=False) is None
