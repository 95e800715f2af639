"""A checkpoint's own files are data: each hostile case of tests/fixtures/hostile_checkpoints.json is
refused in one line naming the file, the field and the value, by every reader podkit has for a
checkpoint (a folder on the controller, a hub repo, a folder on the host as podctl reads it) and so
by ``podkit plan`` and the deploy's preflight alike, before anything is downloaded; never a traceback.
(``plan --measure`` plans through the deploy's own ``plan_host``; the e2e layer runs the three
against the sandbox: tests/e2e/test_hostile.py.)"""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from huggingface_hub import constants

from podkit.host.hostplan import plan_host
from podkit.host.hoststate import HostState
from podkit.plan import checkpoints, modelfiles
from podkit_cli import cli
from testing import hostile
from testing.hub import LocalHub
from tests.helpers import ROOT, podctl, settings
from tests.helpers import gpu_host as host
from tests.helpers import host_plan as plan

CASES = hostile.load(ROOT / "tests" / "fixtures" / "hostile_checkpoints.json")
PARAMS = [pytest.param(case, id=case["id"]) for case in CASES]
#: A control: the case with nothing changed is the sandbox's tiny model, which every reader takes.
CONTROL = {"id": "the tiny model as it is"}


def refused_once(lines: list[str], case: dict) -> str:
    assert len(lines) == 1, lines
    (line,) = lines
    assert all(said in line for said in case["says"]), line
    assert "\n" not in line and "Traceback" not in line and modelfiles.FIX in line
    return line


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """One local hub for the module (the real huggingface_hub client, HTTP on loopback), serving
    every case as ``acme/hostile-...`` and the tiny model as it is as ``acme/tiny``."""
    root = tmp_path_factory.mktemp("hub")
    for case in CASES:
        hostile.write(root / hostile.slug(case), case)
    hostile.write(root / "acme" / "tiny", CONTROL)
    cache = tmp_path_factory.mktemp("hf-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        patch.setenv("HF_HOME", str(cache))
        patch.setattr(constants, "HF_HUB_CACHE", str(cache / "hub"))
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            patch.delenv(var, raising=False)
        with LocalHub(root) as served:
            yield served


def at(hub, monkeypatch) -> None:
    """huggingface_hub's default endpoint is the local hub (as HF_ENDPOINT makes it at import): what
    ``podkit plan MODEL`` asks, with no request leaving the machine."""
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")


def cpu_host() -> HostState:
    return dataclasses.replace(HostState.blank(""), unreadable=None, volume_writable=True, free_bytes=10**12)


@pytest.mark.parametrize("case", PARAMS)
def test_podkit_plan_refuses_a_hostile_folder_with_one_line(case, tmp_path):
    folder = hostile.write(tmp_path / "model", case)
    result = CliRunner().invoke(cli, ["plan", str(folder), "--gpu", "H100", "--no-fp8-search"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    said = [line for line in result.output.splitlines() if line.startswith("Error")]
    refused_once(said, case)


@pytest.mark.parametrize("case", PARAMS)
def test_podkit_plan_refuses_a_hostile_hub_repo_with_one_line(case, hub, monkeypatch):
    at(hub, monkeypatch)
    result = CliRunner().invoke(cli, ["plan", hostile.slug(case), "--gpu", "H100", "--no-fp8-search"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    said = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert hostile.slug(case) in refused_once(said, case)
    weights = [r for r in hub.request_log if r["method"] == "GET" and r["path"].endswith(".safetensors")]
    assert all(r["range"] for r in weights)  # headers only (Range requests), never the weights


@pytest.mark.parametrize("case", PARAMS)
def test_the_deploys_preflight_refuses_a_hostile_hub_repo_before_the_download(case, hub):
    """On a CPU host, as the sandbox is: the reader is the same on GPUs (one such case below)."""
    result = plan(hub, hostile.slug(case), cpu_host(), vllm_tool_call_parser="hermes", vllm_reasoning_parser=None)
    refused_once(result.problems, case)
    assert result.fetch is None and result.plan is None


def test_on_gpus_too(hub):
    case = CASES[0]
    result = plan(hub, hostile.slug(case), host(), vllm_tool_call_parser="hermes", vllm_reasoning_parser=None)
    refused_once(result.problems, case)


@pytest.mark.parametrize("case", PARAMS)
def test_the_deploys_preflight_refuses_a_hostile_folder_on_the_host(case, tmp_path):
    folder = hostile.write(tmp_path / "model", case)
    state = dataclasses.replace(cpu_host(), model_dir=json.loads(json.dumps(podctl.model_dir(str(folder)))))
    chosen = settings(vllm_model=str(folder), vllm_tool_call_parser="hermes", vllm_reasoning_parser=None)
    result = plan_host(chosen, state, vllm_version="0.32.0")
    line = refused_once(result.problems, case)
    assert str(folder) in line


@pytest.mark.parametrize("where", ["folder", "hub", "host"])
def test_the_tiny_model_itself_passes_every_reader(where, tmp_path, hub, monkeypatch):
    folder = hostile.write(tmp_path / "model", CONTROL)
    if where == "folder":
        found = checkpoints.from_directory(folder)
    elif where == "hub":
        at(hub, monkeypatch)
        found = checkpoints.from_hub("acme/tiny")
    else:
        found = checkpoints.from_probe(str(folder), json.loads(json.dumps(podctl.model_dir(str(folder)))))
    assert found.config["num_attention_heads"] == 4 and sum(found.params_by_dtype.values()) > 300_000


def test_every_config_field_the_plan_reads_is_checked():
    from podkit.plan.architecture import CONFIG_KEYS

    assert set(CONFIG_KEYS) | set(checkpoints.POSITION_KEYS) <= set(modelfiles.CONFIG_FIELDS)


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1e999}', "1e999 is past what a number can hold"),
        ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
    ],
    ids=["NaN", "a float past its reach", "an integer of 5000 digits", "nesting past the recursion limit", "not UTF-8"],
)
def test_strict_json_refuses_what_json_cannot_write(text, said):
    with pytest.raises(modelfiles.ModelError, match="use another model or revision") as refused:
        modelfiles.load_json("acme/m", "config.json", text)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_refused_value_is_shown_clipped_and_safe_on_a_terminal():
    with pytest.raises(modelfiles.ModelError) as refused:
        modelfiles.config("acme/m", {"model_type": "\x1b]52;c;aGk=\x07" + "x" * 500, "num_hidden_layers": "\x1b[2J"})
    line = str(refused.value)
    assert "\x1b" not in line and len(line) < 300
