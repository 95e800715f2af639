"""A working endpoint is never taken down by a setting podkit could check: the installed vLLM reads the
new launch before the restart (the server untouched, one line naming the setting), and a start that
fails anyway puts back the files that served (the endpoint answers again when the deploy returns)."""

import json
import urllib.request

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.aside]

SANDBOX_ARGS = ["--enforce-eager", "--kv-cache-memory-bytes", "64M"]  # group_data/sandbox.py's


def answers(pod) -> tuple[list[str], str]:
    """The served names and a short chat's reply, through the edge with the key, as a client asks."""
    port = json.loads(pod.box.state_file.read_text())["edge_port"]

    def ask(path, body=None):
        data = json.dumps(body).encode() if body else None
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
        request.add_header("Authorization", f"Bearer {pod.key()}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    names = [m["id"] for m in ask("/v1/models")["data"]]
    chat = ask(
        "/v1/chat/completions",
        {"model": names[0], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    return names, chat["choices"][0]["finish_reason"]


def untouched(pod, before: dict) -> None:
    """The server that served before the run serves still: same pid, same launch script."""
    assert pod.read_pid("vllm.pid") == before["pid"]
    assert (pod.podkit / "bin" / "launch.sh").read_text() == before["launch"]
    assert answers(pod)[0] == ["tiny-coder"]


def serving_now(pod) -> dict:
    return {"pid": pod.read_pid("vllm.pid"), "launch": (pod.podkit / "bin" / "launch.sh").read_text()}


REFUSED = [
    pytest.param(
        f"vllm_extra_args={json.dumps([*SANDBOX_ARGS, '--no-such-flag'])}",
        "preflight: vllm_extra_args: vLLM 0.32.0 refuses the command line: unrecognized arguments: --no-such-flag; "
        "fix vllm_extra_args and re-apply (the running server was not touched)",
        id="an unknown extra flag",
    ),
    pytest.param(
        'vllm_generation_config={"temperature": -1, "top_p": 1.0}',
        "preflight: vllm_generation_config: vLLM 0.32.0 refuses the sampling defaults: temperature must be "
        "non-negative, got -1.",
        id="a generation config vLLM rejects",
    ),
    pytest.param(
        'vllm_generation_config={"temprature": 0.2}',
        "preflight: vllm_generation_config: vLLM 0.32.0 refuses the sampling defaults: vLLM does not read "
        "temprature from it",
        id="a generation config key vLLM ignores",
    ),
    pytest.param(
        f"vllm_extra_args={json.dumps([*SANDBOX_ARGS, '--quantization', 'bogus'])}",
        "preflight: vllm_extra_args: vLLM 0.32.0 refuses the engine config: Unknown quantization method: bogus.",
        id="a value only vLLM's engine config knows",
    ),
]


@pytest.mark.parametrize("datum, said", REFUSED)
def test_vllms_own_check_refuses_the_launch_before_the_restart(serving, datum, said):
    pod = serving
    before = serving_now(pod)
    applied = pod.apply("--data", datum)
    assert applied.rc != 0
    assert said in applied.stderr, applied.stderr[-3000:]
    assert "Traceback" not in applied.stderr
    untouched(pod, before)
    # the probe, and vLLM's check: nothing else reached the host
    assert len(applied.sessions) == 2, applied.sessions


def test_a_pipeline_on_one_cpu_host_is_refused_by_the_preflight(serving):
    pod = serving
    before = serving_now(pod)
    applied = pod.apply("--data", "vllm_pipeline_parallel_size=2")
    assert applied.rc != 0
    assert "preflight: vllm_pipeline_parallel_size is 2 but this host has no GPU and serves alone" in applied.stderr
    assert len(applied.sessions) == 1, applied.sessions
    untouched(pod, before)


def test_a_start_that_fails_puts_back_the_files_that_served(serving):
    pod = serving
    before = serving_now(pod)
    # passes vLLM's parser and config validation, fails at engine start: no KV cache for one request
    applied = pod.apply("--data", f"vllm_extra_args={json.dumps(['--enforce-eager', '--kv-cache-memory-bytes', '4K'])}")
    assert applied.rc != 0
    assert "vLLM 0.32.0 reads the new launch" in applied.stderr  # the check passed it
    assert "the new start failed: putting back the files that served before it" in applied.stderr
    assert "refused the new launch: vLLM " in applied.stderr, applied.stderr[-4000:]
    assert "put back the files that served before (launch.sh, env.sh, plan.json) and vLLM answers again" in (
        applied.stderr
    )
    assert "Traceback" not in applied.stderr
    # when the deploy returns, the endpoint answers, from the files that served before
    assert (pod.podkit / "bin" / "launch.sh").read_text() == before["launch"]
    assert answers(pod) == (["tiny-coder"], "length")
    # and the host is converged again: a re-apply with the data that served costs one remote command
    again = pod.apply()
    assert again.rc == 0, again.stderr[-3000:]
    assert again.changed() == [] and len(again.sessions) == 1, (again.changed(), again.sessions)
