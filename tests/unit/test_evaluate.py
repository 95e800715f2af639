"""The eval harness without a server: scoring recorded answers (tests/fixtures/eval/), the diff and
splice readers, stability, the noise rule, records and their comparison, and the tool loop
against a fake client."""

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest
from click.testing import CliRunner

from podkit.client.eval import PROFILES, TASK_ORDER, compare, compare_table, load_record, load_tasks, table
from podkit.client.eval.answers import PatchError, apply_unified_diff
from podkit.client.eval.endpoint import Endpoint, Unreachable
from podkit.client.eval.harness import build_record, evaluate, profile_differences, summary, write_record
from podkit.client.eval.profiles import generation_config_of, resolve_profiles
from podkit.client.eval.scoring import is_noise, longest_function, score_code, score_explain, stability
from podkit.client.eval.tools import execute_tool, run_tool_task
from podkit_cli import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "eval"
CASES = json.loads((FIXTURES / "cases.json").read_text())
TASKS = {task.name: task for task in load_tasks()}


def answer(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- a fake OpenAI client


def response(content=None, tool_calls=(), finish_reason="stop"):
    calls = [
        SimpleNamespace(id=c["id"], function=SimpleNamespace(name=c["name"], arguments=c["arguments"]))
        for c in tool_calls
    ]
    message = SimpleNamespace(content=content, tool_calls=calls or None)
    return SimpleNamespace(
        choices=[SimpleNamespace(message=message, finish_reason=finish_reason)],
        usage=SimpleNamespace(prompt_tokens=100, completion_tokens=20),
    )


class FakeClient:
    """Answers each request with ``reply(kwargs)``; keeps every request."""

    def __init__(self, reply):
        self.requests = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))
        self.reply = reply

    def _create(self, **kwargs):
        self.requests.append(kwargs)
        result = self.reply(kwargs)
        if isinstance(result, Exception):
            raise result
        return result


def scripted(turns):
    """A reply function that plays a tool conversation: turn N answers the request with N-1 assistant turns."""

    def reply(kwargs):
        turn = turns[sum(1 for m in kwargs["messages"] if m["role"] == "assistant")]
        return response(turn["content"], turn["tool_calls"])

    return reply


SHOWN_FILE = {"ttl_cache.py": "explain", "intervals.py": "bugfix", "durations.py": "feature", "report.py": "refactor"}


def replaying(answers: dict[str, str], tools: list[dict]):
    """A reply function for the whole battery: the task is known by the file its prompt shows."""

    def reply(kwargs):
        if kwargs.get("tools"):
            return scripted(tools)(kwargs)
        task = next(t for name, t in SHOWN_FILE.items() if f"`{name}`" in kwargs["messages"][-1]["content"])
        return response(answers[task])

    return reply


PARAMS = PROFILES["coding"]


# ---------------------------------------------------------------- correctness of one answer


@pytest.mark.proc
@pytest.mark.parametrize("case", CASES, ids=[c["answer"] for c in CASES])
def test_recorded_answers_score_as_expected(case):
    task = TASKS[case["task"]]
    if task.kind == "explain":
        score, info = score_explain(answer(case["answer"]), task.spec["rubric"])
    else:
        score, info = score_code(task, answer(case["answer"]))
        assert info["how"] == case.get("how", info["how"])
        assert (info["extracted"] is None) == (score == 0)
    assert score == case["correctness"], info["detail"]


def test_every_task_is_scored_by_some_case():
    assert {c["task"] for c in CASES} | {"tools"} == set(TASK_ORDER) == set(TASKS)
    assert {c["correctness"] for c in CASES if c["task"] == "bugfix"} == {0, 1, 2}


@pytest.mark.proc
def test_the_shipped_workspaces_fail_their_tests_until_solved():
    """The bug, the missing feature and the tool task are real: the original files fail; the refactor's pass."""
    for name in ("bugfix", "feature", "refactor"):
        task = TASKS[name]
        original = task.files()[task.spec["target"]]
        score, info = score_code(task, f"```python\n{original}```")
        assert info["tests"]["passed"] == (name == "refactor"), name
        assert score == (0 if name == "refactor" else 1), info["detail"]  # an unchanged refactor scores 0


def test_a_diff_is_matched_by_content_near_the_stated_line():
    original = "a\nb\nc\nd\ne\nb\nc\n"
    diff = "@@ -5,2 +5,2 @@\n e\n-b\n+B\n"
    assert apply_unified_diff(original, diff) == "a\nb\nc\nd\ne\nB\nc\n"
    # context lines whose leading space was lost still match
    assert apply_unified_diff(original, "@@ -1,2 +1,2 @@\na\n-b\n+X\n") == "a\nX\nc\nd\ne\nb\nc\n"
    with pytest.raises(PatchError, match="hunk 1 does not match"):
        apply_unified_diff(original, "@@ -1,1 +1,1 @@\n-z\n+y\n")
    with pytest.raises(PatchError, match="no hunk"):
        apply_unified_diff(original, "--- a/x\n+++ b/x\n")


def test_a_diff_for_several_files_applies_only_the_targets_hunks():
    diff = (
        "--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-a\n+OTHER\n"
        "--- a/intervals.py\n+++ b/intervals.py\n@@ -1 +1 @@\n-a\n+MINE\n"
    )
    assert apply_unified_diff("a\n", diff, "intervals.py") == "MINE\n"


def test_longest_function_ignores_docstrings_blanks_and_comments():
    code = 'def f():\n    """Doc\n    string."""\n\n    # note\n    x = 1\n    return x\n\n\ndef g():\n    pass\n'
    assert longest_function(code) == 3
    assert longest_function(TASKS["refactor"].files()["report.py"]) == 36


# ---------------------------------------------------------------- stability and noise


def test_identical_runs_are_stable():
    assert stability([2, 2, 2], ["def f():\n    return 1\n"] * 3) == (2, 1.0)


def test_whitespace_does_not_make_runs_differ():
    score, ratio = stability([1, 1], ["x = 1\n\n\ny  =  2   \n", "x = 1\ny = 2"])
    assert (score, ratio) == (2, 1.0)


def test_same_scores_but_divergent_outputs_are_half_stable():
    outputs = [answer("bugfix_good_file.md"), answer("bugfix_good_diff.md"), "It is fixed."]
    score, ratio = stability([2, 2, 2], outputs)
    assert score == 1 and ratio < 0.8


def test_divergent_scores_and_outputs_are_unstable():
    score, ratio = stability([2, 0, 1], [answer("refactor_good.md"), "no idea", answer("explain_vague.md")])
    assert score == 0 and ratio < 0.5


def test_one_run_has_no_stability():
    assert stability([2], ["x"]) == (None, None)


@pytest.mark.parametrize(
    "a, b, possible, noise",
    [
        (10, 11.9, 20, True),
        (10, 12, 20, False),
        (12, 10, 20, False),
        (5, 5, 10, True),
        (3, 3.9, 10, True),
        (3, 4, 10, False),
    ],
)
def test_differences_under_a_tenth_of_the_possible_score_are_noise(a, b, possible, noise):
    assert is_noise(a, b, possible) is noise


def test_profile_totals_are_compared_with_the_noise_rule():
    totals = {
        "coding": {"score": 14.0, "possible": 20},
        "chat": {"score": 12.5, "possible": 20},
        "other": {"score": 9.0, "possible": 20},
    }
    rows = {(r["a"], r["b"]): r for r in profile_differences(totals)}
    assert rows[("coding", "chat")] == {"a": "coding", "b": "chat", "difference": -1.5, "possible": 20, "noise": True}
    assert rows[("coding", "other")]["noise"] is False


# ---------------------------------------------------------------- profiles


def test_the_coding_profile_is_the_documented_one():
    assert PROFILES["coding"] == {"temperature": 0.15, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}


def test_chat_takes_the_models_generation_config_with_vllm_defaults_for_missing_keys():
    profiles = resolve_profiles(["coding", "chat"], {"temperature": 0.6, "top_p": 0.95, "eos_token_id": 2}, "/m/g.json")
    assert profiles["chat"]["params"] == {"temperature": 0.6, "top_p": 0.95, "top_k": 0, "repetition_penalty": 1.0}
    assert "generation_config.json" in profiles["chat"]["source"] and "/m/g.json" in profiles["chat"]["source"]
    assert profiles["coding"]["params"] == PROFILES["coding"]


def test_chat_falls_back_to_the_qwen_defaults_and_says_so():
    profiles = resolve_profiles(["chat"], None, "ssh failed")
    assert profiles["chat"]["params"] == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    assert "Qwen" in profiles["chat"]["source"] and "ssh failed" in profiles["chat"]["source"]
    with pytest.raises(ValueError, match="the profiles are coding, chat"):
        resolve_profiles(["fast"], None, "")


def test_the_generation_config_comes_with_the_hosts_one_describe():
    from podkit.client.serverinfo import ServerInfo

    found = ServerInfo(
        "h", generation_config={"path": "/vol/models/my model/generation_config.json", "config": {"temperature": 0.6}}
    )
    assert generation_config_of(found) == ({"temperature": 0.6}, "/vol/models/my model/generation_config.json")
    assert generation_config_of(ServerInfo("h"))[0] is None
    # the model's own file is data: a sampling default out of range, or NaN, is no profile
    for hostile, said in ((float("nan"), "nan"), ("hot", "'hot'"), (-1, "-1")):
        odd = ServerInfo(
            "h", generation_config={"path": "/m/generation_config.json", "config": {"temperature": hostile}}
        )
        config, why = generation_config_of(odd)
        assert config is None and "generation_config.json temperature is " + said in why and "\n" not in why
    missing = ServerInfo("h", generation_config={"path": "/m/generation_config.json", "error": "No such file"})
    assert generation_config_of(missing) == (None, "/m/generation_config.json: No such file")


# ---------------------------------------------------------------- the endpoint


def test_sampling_goes_out_with_top_k_and_repetition_penalty_in_extra_body():
    client = FakeClient(lambda kwargs: response("hi"))
    turn = Endpoint(client, "m", 500).chat([{"role": "user", "content": "x"}], PROFILES["chat"])
    sent = client.requests[0]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.7, 0.8, 500)
    assert sent["extra_body"] == {"top_k": 20, "repetition_penalty": 1.05}
    assert "tools" not in sent and turn.content == "hi" and turn.completion_tokens == 20


def test_max_tokens_is_trimmed_to_what_the_context_leaves():
    client = FakeClient(lambda kwargs: response("hi"))
    endpoint = Endpoint(client, "m", 4096, count_tokens=lambda messages, tools: (1800, 2048))
    assert endpoint.chat([], PARAMS).max_tokens == 248 and client.requests[0]["max_tokens"] == 248
    full = Endpoint(client, "m", 4096, count_tokens=lambda messages, tools: (2048, 2048)).chat([], PARAMS)
    assert full.error == "the prompt is 2048 tokens; the server's context is 2048" and len(client.requests) == 1


def test_an_error_fails_the_run_but_a_refused_connection_stops_the_host():
    request = SimpleNamespace(method="POST", url="http://x/v1/chat/completions")
    bad = openai.BadRequestError(
        "context too long", response=SimpleNamespace(status_code=400, headers={}, request=request), body=None
    )
    turn = Endpoint(FakeClient(lambda kwargs: bad), "m", 10).chat([], PARAMS)
    assert turn.error.startswith("BadRequestError") and turn.content is None
    refused = openai.APIConnectionError(request=request)
    with pytest.raises(Unreachable) as caught:
        Endpoint(FakeClient(lambda kwargs: refused), "m", 10).chat([], PARAMS)
    assert caught.value.auth is False
    slow = openai.APITimeoutError(request=request)
    assert Endpoint(FakeClient(lambda kwargs: slow), "m", 10).chat([], PARAMS).error.startswith("APITimeoutError")


# ---------------------------------------------------------------- the tool loop


def tool_script(name):
    return json.loads((FIXTURES / name).read_text())["turns"]


@pytest.mark.proc
def test_the_tool_loop_reads_writes_and_passes_the_tests():
    client = FakeClient(scripted(tool_script("tools_good.json")))
    score, info = run_tool_task(Endpoint(client, "m", 100), TASKS["tools"], PARAMS)
    assert score == 2, info["detail"]
    assert info["stop"] == "answered" and info["turns"] == 4 and sorted(info["changed"]) == ["config.py", "loader.py"]
    assert info["transcript"][0]["results"][0] == TASKS["tools"].files()["config.py"]
    assert all(
        r["tool_choice"] == "auto" and [t["function"]["name"] for t in r["tools"]] == ["read_file", "write_file"]
        for r in client.requests
    )
    # the model sees its own calls and their results
    last = client.requests[-1]["messages"]
    assert [m["role"] for m in last[2:]] == ["assistant", "tool", "tool", "assistant", "tool", "assistant", "tool"]
    assert last[3]["tool_call_id"] == "call_1"


@pytest.mark.proc
def test_the_tool_loop_refuses_test_edits_and_paths_outside_and_scores_a_half_change():
    score, info = run_tool_task(
        Endpoint(FakeClient(scripted(tool_script("tools_partial.json"))), "m", 100), TASKS["tools"], PARAMS
    )
    assert score == 1 and list(info["changed"]) == ["loader.py"] and not info["tests"]["passed"]
    results = [r for step in info["transcript"] for r in step.get("results", [])]
    assert results[0].startswith("error: '../../etc/passwd' is not a file of the workspace")
    assert results[1].startswith("error: arguments must be a JSON object")
    assert results[2] == "error: 'test_loader.py' holds the tests, which must not change"
    assert results[4] == "error: no tool named 'delete_file'; the tools are read_file and write_file"


@pytest.mark.proc
def test_the_tool_loop_stops_at_the_turn_limit():
    client = FakeClient(scripted(tool_script("tools_loop.json")))
    score, info = run_tool_task(Endpoint(client, "m", 100), TASKS["tools"], PARAMS)
    assert score == 0 and info["stop"] == "turn limit"
    assert info["turns"] == len(client.requests) == TASKS["tools"].spec["max_turns"]


def test_a_written_test_file_is_restored_before_the_tests_run(tmp_path):
    (tmp_path / "test_x.py").write_text("original")
    assert execute_tool(
        tmp_path, "write_file", json.dumps({"path": "test_x.py", "content": "pass"}), ["test_x.py"]
    ).startswith("error")
    assert (tmp_path / "test_x.py").read_text() == "original"
    assert execute_tool(tmp_path, "read_file", json.dumps({"path": "nope.py"}), []) == "error: no file 'nope.py'"


# ---------------------------------------------------------------- a whole battery, records, compare

GOOD = {
    "explain": answer("explain_good.md"),
    "bugfix": answer("bugfix_good_diff.md"),
    "feature": answer("feature_good_function.md"),
    "refactor": answer("refactor_good.md"),
}
BAD = {
    "explain": answer("explain_vague.md"),
    "bugfix": answer("bugfix_broken_syntax.md"),
    "feature": answer("feature_lenient.md"),
    "refactor": answer("refactor_changes_behaviour.md"),
}
SERVER = {
    "host": "h",
    "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "revision": "abc123",
    "vllm_version": "0.33.0",
    "serve_args": ["/snap", "--max-model-len", "32768", "--enable-auto-tool-choice"],
}


def battery(answers, tools_file, runs=2, profiles=("coding",), server=SERVER):
    client = FakeClient(replaying(answers, tool_script(tools_file)))
    chosen = resolve_profiles(profiles, None, "test")
    tasks = load_tasks()
    messages = []
    results = evaluate(Endpoint(client, "m", 100), chosen, tasks, runs, messages.append)
    record = build_record(
        "h",
        "http://h:8000",
        server,
        chosen,
        tasks,
        results,
        datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        {"runs": runs, "max_tokens": 100},
    )
    return record, messages


@pytest.mark.proc
def test_a_battery_of_good_answers_scores_full_marks_and_keeps_every_raw_output():
    record, messages = battery(GOOD, "tools_good.json")
    coding = record["results"]["coding"]
    assert [coding[t]["correctness"] for t in TASK_ORDER] == [2, 2, 2, 2, 2]
    assert [coding[t]["stability"] for t in TASK_ORDER] == [2, 2, 2, 2, 2]
    assert record["totals"]["coding"] == {"correctness": 10, "stability": 10, "score": 20, "possible": 20}
    assert coding["bugfix"]["runs"][0]["response"]["content"] == GOOD["bugfix"]
    assert coding["tools"]["runs"][1]["transcript"][1]["tool_calls"][0]["name"] == "write_file"
    assert len(messages) == 10 and messages[0].startswith("coding  explain   run 1/2: 2")
    assert record["server"]["serve_args"] == SERVER["serve_args"] and record["settings"]["tasks"] == list(TASK_ORDER)


@pytest.mark.proc
def test_records_round_trip_and_compare(tmp_path):
    good, _ = battery(GOOD, "tools_good.json", profiles=("coding", "chat"))
    bad, _ = battery(
        BAD, "tools_loop.json", server={**SERVER, "serve_args": SERVER["serve_args"] + ["--enforce-eager"]}
    )
    assert bad["totals"]["coding"]["correctness"] == 2  # explain 0, bugfix 0, feature 1, refactor 1, tools 0
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    path_a, path_b = write_record(good, tmp_path, when), write_record(bad, tmp_path, when)
    assert path_a.name == "20250102T030405Z-h.json" and path_b.name == "20250102T030405Z-h-2.json"

    assert list(load_record(path_a)["results"]["coding"]) == list(TASK_ORDER)  # the battery's order, kept
    result = compare(load_record(path_a), load_record(path_b))
    assert result["flags_only_in_b"] == ["--enforce-eager"] and result["flags_only_in_a"] == []
    coding = result["profiles"]["coding"]
    assert coding["total"]["difference"] == bad["totals"]["coding"]["score"] - 20 and coding["total"]["noise"] is False
    assert coding["tasks"]["bugfix"] == {
        "a": {"correctness": 2, "stability": 2, "score": 4, "possible": 4},
        "b": {"correctness": 0, "stability": 2, "score": 2, "possible": 4},
        "difference": -2,
        "possible": 4,
        "noise": False,
    }
    assert result["profiles"]["chat"]["total"]["b"] is None  # the second record has no chat profile
    assert result["profiles"]["chat"]["same_sampling"] is None and coding["same_sampling"] is True
    lines = compare_table(result)
    assert any(line.split()[:1] == ["bugfix"] and line.endswith("REAL") for line in lines)
    assert any("only in A" in line for line in lines)

    same = compare(load_record(path_a), load_record(path_a))
    assert all(row["noise"] and row["difference"] == 0 for row in same["profiles"]["coding"]["tasks"].values())


@pytest.mark.proc
def test_the_summary_and_table_leave_out_raw_outputs():
    record, _ = battery(GOOD, "tools_good.json", runs=1)
    short = summary(record)
    assert "runs" not in short["scores"]["coding"]["bugfix"] and short["scores"]["coding"]["bugfix"]["per_run"] == [2]
    assert short["totals"]["coding"]["possible"] == 10  # one run: no stability
    text = "\n".join(table({**short, "record": "runs/eval/x.json"}))
    assert "coding   total" in text and "score 10.00 of 10" in text and "record: runs/eval/x.json" in text


def test_without_a_cage_the_code_tasks_are_recorded_as_not_scored(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bwrap-here"))
    record, messages = battery(GOOD, "tools_good.json", runs=1)
    coding = record["results"]["coding"]
    assert coding["explain"]["runs"][0]["correctness"] == 2 and "scored" not in coding["explain"]["runs"][0]
    for name in ("bugfix", "feature", "refactor", "tools"):
        run = coding[name]["runs"][0]
        assert run["scored"] is False and run["correctness"] == 0, name
        assert run["detail"].startswith("not scored: eval needs bubblewrap") and "\n" not in run["detail"]
    assert any("not scored: " in message for message in messages)


def test_load_record_refuses_other_json(tmp_path):
    other = tmp_path / "bench.json"
    other.write_text('{"ttft": []}')
    with pytest.raises(ValueError, match="not an eval record"):
        load_record(other)


# ---------------------------------------------------------------- the CLI


@pytest.mark.proc
def test_eval_compare_from_the_cli(tmp_path):
    good, _ = battery(GOOD, "tools_good.json", runs=1)
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    a, b = write_record(good, tmp_path, when), write_record(good, tmp_path, when)
    runner = CliRunner()
    shown = runner.invoke(cli, ["eval", "compare", str(a), str(b)])
    assert shown.exit_code == 0, shown.output
    assert "noise" in shown.output and "REAL" not in shown.output
    as_json = runner.invoke(cli, ["eval", "compare", str(a), str(b), "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["profiles"]["coding"]["total"]["noise"] is True
    (tmp_path / "x.json").write_text("{}")
    refused = runner.invoke(cli, ["eval", "compare", str(a), str(tmp_path / "x.json")])
    assert refused.exit_code == 1 and "not an eval record" in refused.output


def test_eval_inventory_falls_through_to_eval_run(tmp_path):
    runner = CliRunner()
    missing = str(tmp_path / "nowhere.py")
    for args in (["eval", missing], ["eval", "--runs", "2", missing], ["eval", "run", missing]):
        result = runner.invoke(cli, args)
        # a missing inventory is bad input (exit 2), as for every command, and names the file
        assert result.exit_code == 2 and "no such inventory file" in result.output, (args, result.output)
    helped = runner.invoke(cli, ["eval", "--help"])
    assert helped.exit_code == 0 and "compare" in helped.output and "run" in helped.output
    bad = runner.invoke(cli, ["eval", missing, "--profile", "fast"])
    assert bad.exit_code == 2 and "the profiles are coding, chat" in bad.output


def test_an_answer_with_a_nul_byte_is_not_python_and_scores_zero():
    """A tiny random model wrote a NUL into a code block; Debian's Python 3.11.2 raises ValueError
    from ast.parse there (later versions a SyntaxError). Either way: no Python, correctness 0."""
    from podkit.client.eval.answers import extract_code

    found = extract_code("```python\ndef parse_duration(text):\n    return 1\x00\n```", "", ["parse_duration"], "d.py")
    assert found.code is None and "not valid Python" in found.how
