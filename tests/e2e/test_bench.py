"""bench against the real vLLM (CPU build) serving the tiny model: every TTFT length and
concurrency level has figures, prompts are exactly as long as asked (counted by the real server),
the context is read from the real server, and the saved record names the vLLM version and launch
flags. A length past the context is capped by the rule tests/unit/test_bench.py checks against the
context a server lists (test_cap_lengths, test_a_whole_run): measuring one here costs a
65,520-token prefill, 53 CPU-seconds of the CPU build's engine for a fact the unit layer holds."""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def png_dimensions(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_bench_measures_the_sandbox(pod, tmp_path):
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    proc = pod.cli(
        "bench",
        "inventories/sandbox.py",
        "--json",
        "--lengths",
        "256,4096",
        "--ttft-requests",
        "1",
        "--concurrency",
        "1,4",
        "--rounds",
        "2",
        "--prompt-tokens",
        "128",
        "--output-tokens",
        "16",
        "--usd-per-hour",
        "0.5",
        "--output-dir",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(proc.stdout)["sandbox"]
    assert record["outcome"] == "ok" and record["error"] is None

    # the sandbox serves 65536 tokens, read from the server; both lengths fit, so neither is capped
    assert record["max_model_len"] == 65536
    assert [row["target_tokens"] for row in record["ttft"]] == [256, 4096]
    for row in record["ttft"]:
        assert row["prompt_tokens"] == [row["target_tokens"]]  # the server counted exactly what was built
        assert row["ttft_s"]["n"] == 1 and row["ttft_s"]["p50"] > 0 and row["first_request_ttft_s"] > 0
        assert row["errors"] == []

    assert [level["concurrency"] for level in record["concurrency"]] == [1, 4]
    for level in record["concurrency"]:
        assert level["completed"] == level["requests"] == 2 * level["concurrency"] and level["errors"] == []
        assert level["output_tokens"] == 16 * level["completed"]  # ignore_eos: every answer is full length
        assert level["requests_per_s"] > 0 and level["output_tokens_per_s"] > 0
        for figure in ("ttft_s", "itl_s"):
            assert level[figure]["p50"] is not None and level[figure]["p95"] >= level[figure]["p50"]
        assert level["usd_per_million_output_tokens"] > 0

    server = record["server"]
    assert server["running"] and server["error"] is None
    assert server["vllm_version"].startswith("0.32.0") and record["vllm_version"] == server["vllm_version"]
    args = server["serve_args"]
    assert args[args.index("--max-model-len") + 1] == "65536"
    assert "--served-model-name" in args and "--enforce-eager" in args
    assert record["cost"] == {"usd_per_hour": 0.5, "source": "--usd-per-hour"}

    saved = Path(record["record"])
    assert saved.parent == tmp_path and saved.name.endswith("-sandbox.json")
    assert json.loads(saved.read_text()) == record
    width, height = png_dimensions(Path(record["chart"]))
    assert Path(record["chart"]) == saved.with_suffix(".png") and width > 0 and height > 0
    assert pod.key() not in proc.stdout + proc.stderr + saved.read_text()


def test_bench_refuses_an_unknown_host(pod):
    proc = pod.cli("bench", "inventories/sandbox.py", "--host", "nope")
    assert proc.returncode == 2 and "no hosts named nope" in proc.stderr
