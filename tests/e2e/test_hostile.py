"""A hub repo is anyone's to publish: hostile checkpoints, served by the local hub, meet ``plan --measure``
and the deploy against the serving sandbox (``podkit plan MODEL`` reads them through the same reader:
the unit layer runs it on every case). Each is refused in one line naming the
file, the field and the value, before anything is downloaded or restarted; the working server answers
/health 200 throughout, its pid and files those of the converge (``left_as_converged``). A checkpoint
whose config passes podkit's checks but that vLLM cannot build (heads its KV heads do not divide) is
refused by vLLM's own check of the new launch, in vLLM's words, before the server is touched.

The whole hostile set runs through the same three readers in tests/unit/test_hostile_checkpoints.py;
here, the cases marked ``e2e`` in tests/fixtures/hostile_checkpoints.json.
"""

import json
import subprocess
import sys
import urllib.request

import pytest

from podkit import PROJECT_ROOT
from testing import hostile

pytestmark = pytest.mark.e2e

CASES = [
    case for case in hostile.load(PROJECT_ROOT / "tests" / "fixtures" / "hostile_checkpoints.json") if case.get("e2e")
]
#: passes every check of podkit's, and vLLM's model code refuses it (vLLM 0.32.0, CPU)
UNBUILDABLE = {"id": "KV heads that do not divide the heads", "set": {"config.json": {"num_key_value_heads": 3}}}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from testing.hub import LocalHub

    root = tmp_path_factory.mktemp("hub")
    for case in [*CASES, UNBUILDABLE]:
        hostile.write(root / hostile.slug(case), case)
    with LocalHub(root) as served:
        yield served


@pytest.fixture
def hub_env(hub, tmp_path):
    return {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": ""}


def health(pod) -> int:
    port = json.loads(pod.box.state_file.read_text())["edge_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        return answer.status


def podkit(pod, env, *args):
    proc = subprocess.run(
        [sys.executable, "cli.py", *args],
        cwd=PROJECT_ROOT,
        env=pod.box.env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    pod.outputs += [proc.stdout, proc.stderr]
    return proc


def refused(said: str, case: dict) -> None:
    assert all(part in said for part in case["says"]), said[-3000:]
    assert "Traceback" not in said and "use another model or revision" in said, said[-3000:]


@pytest.mark.parametrize("case", [pytest.param(case, id=case["id"]) for case in CASES])
def test_a_hostile_checkpoint_is_refused_by_plan_measure_and_by_the_deploy(converged, hub_env, hub, case):
    pod, _ = converged
    repo = hostile.slug(case)  # podkit plan MODEL reads it as plan --measure does (the unit layer runs it)
    measured = podkit(pod, hub_env, "plan", "--measure", "inventories/sandbox.py", repo)
    assert measured.returncode == 1
    refused(measured.stderr, case)
    applied = pod.apply("--data", f"vllm_model={repo}", env=hub_env)
    assert applied.rc != 0
    refused(applied.stderr, case)
    assert len(applied.sessions) == 1, applied.sessions  # the probe: nothing else reached the host
    assert health(pod) == 200
    weights = [r for r in hub.request_log if r["path"].endswith(".safetensors") and not r["range"]]
    assert weights == []  # headers only (Range requests): no weight was downloaded


def test_a_checkpoint_vllm_cannot_build_is_refused_in_vllms_words_before_the_restart(converged, hub_env):
    pod, _ = converged
    repo = hostile.slug(UNBUILDABLE)
    applied = pod.apply("--data", f"vllm_model={repo}", env=hub_env)
    assert applied.rc != 0
    said = applied.stderr
    assert (
        f"vllm_model: vLLM 0.32.0 cannot build {repo} from its config.json: AssertionError: num_heads (4) is not "
        "divisible by num_kv_heads (3); use another model or revision (the running server was not touched)"
    ) in said, said[-3000:]
    assert "Traceback" not in said
    assert health(pod) == 200
