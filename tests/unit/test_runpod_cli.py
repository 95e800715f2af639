"""podkit status, down, up (and its move) and create on RunPod, through CliRunner against the replay of
RunPod's REST API v2, on the states that need no SSH: what each asks RunPod, and the one line it says
when RunPod says no. GraphQL and REST v1 answer 410 throughout (the replay's default): nothing here
needs them. The move and create that end in a deploy and verify are in tests/e2e/test_migration.py."""

import json
import runpy

import pytest
from click.testing import CliRunner

from podkit import project_path
from podkit.runpod.pods import selected
from podkit_cli import cli
from testing import runpod_pods as pods
from testing.runpod_api import NO_FREE_GPUS, RunPodReplay

RUNPOD = "inventories/runpod.py"
KEY = "rp-account-key-7f3c"
A, B, Z, N = "poda0000000001", "podb0000000001", "podz0000000001", "podn0000000001"
H100 = "NVIDIA H100 80GB HBM3"


def pod(pod_id, name, network=True, cost=0.79):
    """A pod at a closed local port (were a test to reach for SSH, it fails at once)."""
    return pods.pod(
        pod_id,
        name,
        "127.0.0.1",
        9,
        "/workspace",
        cost=cost,
        gpu=H100,
        network_volume=f"vol-{pod_id}" if network else None,
    )


def exited(raw):
    pods.stopped(raw)
    return raw


@pytest.fixture
def account(monkeypatch, tmp_path):
    """The replay with tst-a running, tst-b stopped, tst-z stopped with its GPU gone and on its own disk,
    and a notebook no inventory selects; inventories/runpod.py selecting the tst- pods."""
    listed = [
        pod(A, "tst-a"),
        exited(pod(B, "tst-b")),
        exited(pod(Z, "tst-z", network=False)),
        pod(N, "notebook", cost=0.44),
    ]
    with RunPodReplay(KEY, listed) as server:
        server.no_gpu = {Z}
        server.volumes = [pods.network_volume(f"vol-{p}") for p in (A, B, N)]
        server.catalog = [pods.gpu_type(H100, "H100 SXM", 80, 2.69, {pods.DATA_CENTER: "NONE"})]
        monkeypatch.setenv("RUNPOD_API_BASE_URL", server.url)
        monkeypatch.setenv("RUNPOD_API_KEY", KEY)
        monkeypatch.setenv("PODKIT_POD_PREFIX", "tst-")
        monkeypatch.setenv("PODKIT_STATE_DIR", str(tmp_path / "state"))
        for name in ("PODKIT_POD_STRICT", "PODKIT_ACCEPT_NEW_HOST_KEY", "PODKIT_POD_SETTINGS"):
            monkeypatch.delenv(name, raising=False)
        yield server


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def no_traceback(result):
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def actions(replay):
    """What the commands asked of RunPod that changes something: (key kind, method, path, action)."""
    return [
        (r["key"], r["method"], r["path"], (r.get("body") or {}).get("action"))
        for r in replay.requests
        if r["method"] != "GET" and r["path"] != "/graphql"  # the balance (a read, GraphQL's only use)
    ]


def asked(replay, method, path):
    return [r for r in replay.requests if r["method"] == method and r["path"] == path]


def status_of(replay, pod_id):
    return replay.pod(pod_id)["status"]


def test_status_of_stopped_pods_says_when_they_last_started_and_how_to_start_them(account):
    exited(account.pod(A))
    account.billing = {A: [1.25, 2.5]}
    result = invoke("status", RUNPOD, "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert sorted(found) == ["tst-a", "tst-b", "tst-z"]  # the notebook is not selected
    for name, row in found.items():
        assert row["host"] == name and row["state"] == "stopped" and row["error"] is None
        assert row["spend_usd"] == 0.0 and row["spend_basis"] == "stopped: RunPod bills only its volume"
        assert row["since_text"].startswith("last started 20") and row["since"] is None
    assert found["tst-a"]["billed_usd"] == 3.75 and found["tst-b"]["billed_usd"] == 0
    human = invoke("status", RUNPOD)
    assert human.exit_code == 0, human.output
    for name in found:
        assert f"  start it: podkit up {RUNPOD} --host {name}" in human.output
    assert "  billed by RunPod over the last 30 days: $3.75" in human.output
    assert not actions(account)
    assert [r["status"] for r in asked(account, "POST", "/graphql")] == [410, 410]  # the balance: gone, and fine


def test_status_of_a_pod_running_without_its_gpu_shows_the_move(account):
    exited(account.pod(A))
    lost = pod("podq0000000001", "tst-q", cost=0.0)
    lost["runtime"]["gpus"] = []
    account.pods.append(lost)
    result = invoke("status", RUNPOD, "--host", "tst-q", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["tst-q"]
    assert row["state"] == "up" and row["notes"] == [
        "it runs without its GPU (taken while it was stopped): move it (podkit up --move)"
    ]


def test_down_stops_a_running_pod_through_v2_with_the_account_key(account):
    result = invoke("down", RUNPOD, "--host", "tst-a")
    assert result.exit_code == 0, result.output
    assert result.output == f"tst-a: stopped (RunPod says EXITED); start it again: podkit up {RUNPOD} --host tst-a\n"
    assert [(r["key"], r["path"]) for r in account.requests if r["method"] == "POST"] == [
        ("account", f"/v2/pods/{A}/action")
    ]
    assert status_of(account, A) == "EXITED" and status_of(account, N) == "RUNNING"


def test_down_of_every_selected_pod_stops_only_those_that_run(account):
    result = invoke("down", RUNPOD)
    assert result.exit_code == 0, result.output
    assert "tst-a: stopped (RunPod says EXITED)" in result.output
    assert "tst-b: already stopped (RunPod says EXITED)" in result.output
    assert len(asked(account, "POST", f"/v2/pods/{A}/action")) == 1 and status_of(account, N) == "RUNNING"


def test_up_of_a_pod_whose_gpu_is_gone_says_so_and_offers_the_move(account):
    result = invoke("up", RUNPOD, "--host", "tst-z")
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output.splitlines() == [
        f"pod tst-z ({Z}) cannot get its GPU back: its machine has no free GPU now (RunPod says: {NO_FREE_GPUS}); "
        f"move it to a new pod on the same volume: podkit up {RUNPOD} --host tst-z --move",
        "Error: no pod is running to deploy to",
    ]
    assert status_of(account, Z) == "EXITED" and not asked(account, "POST", "/v2/pods")


def test_up_names_a_pod_that_gets_no_ssh_address_in_time(account):
    account.on_start = lambda pod_id: None  # RunPod shows the pod STARTING, its container not up yet
    result = invoke("up", RUNPOD, "--host", "tst-b", "--wait", "0")
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output.splitlines() == [
        f"tst-b: starting pod {B}",
        "tst-b: RunPod says STARTING",
        f"pod tst-b ({B}) has no SSH address after 0 s (RunPod says STARTING): re-run podkit up, or look at the "
        "pod's logs",
        "Error: no pod is running to deploy to",
    ]


def test_a_pod_on_its_own_disk_cannot_move_and_nothing_is_created(account):
    result = invoke("up", RUNPOD, "--host", "tst-z", "--move")
    assert result.exit_code == 1
    no_traceback(result)
    assert (
        f"pod tst-z ({Z}) keeps its volume on its own disk (100 GB), which stays with its machine: it cannot move to "
        "another one. Wait for its GPU (podkit up again later), or next time create the pod on a network volume "
        "(podkit create does), which any new pod in the same data center can mount"
    ) in result.output.splitlines()
    assert not asked(account, "POST", "/v2/pods") and status_of(account, Z) == "EXITED"


def test_a_move_waits_when_its_gpu_type_is_not_in_stock_where_its_volume_is(account):
    moved = exited(pod("podm0000000001", "tst-m"))
    account.pods.append(moved)
    account.volumes.append(pods.network_volume("vol-podm0000000001"))
    account.no_gpu.add("podm0000000001")
    result = invoke("up", RUNPOD, "--host", "tst-m", "--move")
    assert result.exit_code == 1
    no_traceback(result)
    assert (
        f"pod tst-m (podm0000000001): no {H100} x1 is free in {pods.DATA_CENTER} now (RunPod's catalog), where its "
        f"volume is: run podkit up {RUNPOD} --host tst-m --move again later, or add --any-gpu to take any GPU type "
        "there that the plan says fits"
    ) in result.output.splitlines()
    assert not asked(account, "POST", "/v2/pods")


@pytest.mark.parametrize("command", ["status", "down", "up"])
def test_an_unknown_host_is_bad_input_in_one_line(account, command):
    result = invoke(command, RUNPOD, "--host", "tst-nope")
    assert result.exit_code == 2
    no_traceback(result)
    assert (
        result.output.strip().splitlines()[-1]
        == "Error: Invalid value for --host: no pod named tst-nope in the inventory"
    )
    assert not actions(account)


@pytest.mark.parametrize("command", ["status", "down", "up"])
def test_without_runpod_api_key_every_command_says_so_in_one_line(account, monkeypatch, command):
    monkeypatch.delenv("RUNPOD_API_KEY")
    result = invoke(command, RUNPOD)
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output == (
        "Error: RUNPOD_API_KEY is not set: export your RunPod API key (Settings > API Keys) and re-run\n"
    )
    assert account.requests == []


def test_a_wrong_account_key_is_one_line_without_it(account, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-someone-elses-key")
    result = invoke("status", RUNPOD)
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output == (
        "Error: cannot list pods from RunPod (GET /v2/pods: HTTP 401: Unauthorized: invalid bearer token): RunPod "
        "refused RUNPOD_API_KEY: make a new key under Settings > API Keys\n"
    )
    assert "rp-someone-elses-key" not in result.output


@pytest.mark.parametrize("command", ["status", "down", "up", "create"])
def test_a_missing_inventory_is_bad_input(command, tmp_path):
    args = [command, str(tmp_path / "nowhere.py")] + (
        ["acme/Coder-7B", "--context", "4096"] if command == "create" else []
    )
    result = invoke(*args)
    assert result.exit_code == 2 and "no such inventory file" in result.output


# --- inventories/runpod.py --------------------------------------------------------------------


def test_the_runpod_inventory_read_as_podkit_pods_defines_select_without_asking_the_api(account):
    namespace = runpy.run_path(str(project_path(RUNPOD)), run_name="podkit.pods")
    assert callable(namespace["select"]) and "runpod" not in namespace
    assert [name for name, _ in selected(account.pods, namespace["select"])] == ["tst-a", "tst-b", "tst-z"]
    assert account.requests == []


def test_the_runpod_inventory_builds_its_group_from_every_page_of_pods(account, capsys):
    account.page_size = 1  # every pod on a page of its own
    namespace = runpy.run_path(str(project_path(RUNPOD)))
    assert [name for name, _ in namespace["runpod"]] == ["tst-a"]  # the stopped pods are left out
    data = dict(namespace["runpod"])["tst-a"]
    assert (data["ssh_hostname"], data["ssh_port"], data["runpod_pod_id"]) == ("127.0.0.1", 9, A)
    assert len(asked(account, "GET", "/v2/pods")) == 4
    said = capsys.readouterr().err
    assert f"pod tst-b ({B}): is stopped (EXITED): start it with podkit up" in said


def test_the_inventory_with_graphql_and_v1_gone_asks_neither(account):
    runpy.run_path(str(project_path(RUNPOD)))
    assert {r["path"].split("/")[1] for r in account.requests} == {"v2"}


# --- podkit create --dry ----------------------------------------------------------------------


@pytest.fixture
def catalog(account, hub, monkeypatch):
    """Three GPU types: the cheapest out of stock everywhere, the next in stock in one data center."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    account.catalog = [
        pods.gpu_type("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.34, {"US-TX-3": "NONE", "EU-RO-1": "NONE"}),
        pods.gpu_type("NVIDIA L40S", "L40S", 48, 0.86, {"US-TX-3": "NONE", "EU-RO-1": "MEDIUM"}),
        pods.gpu_type(H100, "H100 SXM", 80, 2.69, {"US-TX-3": "HIGH"}),
    ]
    account.ssh_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk me@laptop"]
    return account


def test_create_dry_picks_the_cheapest_gpu_in_stock_that_fits_and_sizes_the_volume(catalog):
    result = invoke("create", RUNPOD, "acme/Coder-7B", "--context", "4096", "--name", "tst-new", "--dry", "--json")
    assert result.exit_code == 0, result.output
    choice = json.loads(result.stdout)
    assert (choice["gpu"], choice["count"], choice["usd_per_hour"]) == ("L40S", 1, 0.86)
    assert (choice["data_center"], choice["availability"]) == ("EU-RO-1", "MEDIUM")
    # the plan serves the FP8 sibling on a card that runs FP8 (an L40S does), as the deploy will
    assert choice["context"] == 4096 and choice["checkpoint"] == "RedHatAI/Coder-7B-FP8-dynamic"
    assert choice["volume_gb"] == 30 and choice["volume_usd_per_month"] == 2.1  # the download, vLLM and caches
    assert "pod_id" not in choice
    assert not actions(catalog)  # --dry creates nothing
    human = invoke("create", RUNPOD, "acme/Coder-7B", "--context", "4096", "--name", "tst-new", "--dry")
    assert "L40S x1 (NVIDIA L40S, SECURE), $0.86/h" in human.output and "30 GB network volume" in human.output


def test_create_with_no_gpu_in_stock_says_which_would_fit(catalog):
    for gpu in catalog.catalog:
        gpu["_stock"] = {dc: "NONE" for dc in gpu["_stock"]}
    result = invoke("create", RUNPOD, "acme/Coder-7B", "--context", "4096", "--name", "tst-new", "--dry")
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output.strip().startswith("Error: no GPU type that fits acme/Coder-7B with 4096 tokens is in stock")


def test_create_without_an_ssh_key_on_the_account_creates_nothing(catalog):
    catalog.ssh_keys = []
    result = invoke("create", RUNPOD, "acme/Coder-7B", "--context", "4096", "--name", "tst-new")
    assert result.exit_code == 1
    no_traceback(result)
    assert "your RunPod account has no SSH public key" in result.output and "nothing was created" in result.output
    assert not actions(catalog)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--name", "notebook"], "the inventory does not select a pod named notebook"),
        (["--name", "tst-a"], "a pod named tst-a exists already"),
        (["--name", "tst-new", "--gpu", "TPU v5"], "no GPU type 'TPU v5' in RunPod's catalog"),
    ],
)
def test_create_refuses_bad_input_before_anything_is_created(catalog, args, said):
    result = invoke("create", RUNPOD, "acme/Coder-7B", "--context", "4096", *args)
    assert result.exit_code == 2, result.output
    no_traceback(result)
    assert said in result.output and not actions(catalog)


def test_the_balance_comes_from_graphql_while_it_lasts_and_its_end_breaks_nothing(account):
    exited(account.pod(A))  # nothing to read over SSH
    account.graphql_balance = 12.5
    result = CliRunner().invoke(cli, ["status", RUNPOD, "--json"])
    assert result.exit_code == 0 and "RunPod account balance: $12.50" in result.stderr
    json.loads(result.stdout)  # stdout stays the JSON alone
    account.graphql_balance = None  # GraphQL answers 410, as it will from early 2027
    result = CliRunner().invoke(cli, ["status", RUNPOD])
    assert result.exit_code == 0 and "balance" not in result.output
    assert [r["status"] for r in asked(account, "POST", "/graphql")] == [200, 410]


def test_a_move_with_any_gpu_takes_the_cheapest_type_in_stock_there_that_fits_and_keeps_the_old_pod(catalog):
    """The same GPU type is out of stock where the volume is: --any-gpu plans the pod's own model and
    context (its PODKIT_DATA) on each type in stock there. The new pod never gets an SSH address
    (--wait 0): the old pod is kept, stopped, and the line says what exists."""
    moved = exited(pod("podm0000000001", "tst-m"))
    moved["env"]["PODKIT_DATA"] = json.dumps({"vllm_model": "acme/Coder-7B", "vllm_max_model_len": 4096})
    catalog.pods.append(moved)
    catalog.volumes.append(pods.network_volume("vol-podm0000000001"))
    catalog.no_gpu.add("podm0000000001")
    catalog.catalog[2]["_stock"] = {pods.DATA_CENTER: "NONE"}  # its own type (H100): none
    catalog.catalog[1]["_stock"] = {pods.DATA_CENTER: "LOW"}  # an L40S is free there
    result = invoke("up", RUNPOD, "--host", "tst-m", "--move", "--any-gpu", "--wait", "0")
    assert result.exit_code == 1
    no_traceback(result)
    (created,) = [p for p in catalog.pods if p["name"] == "tst-m" and p["id"] != "podm0000000001"]
    assert created["gpu"] == {"id": "NVIDIA L40S", "count": 1} and created["dataCenterId"] == pods.DATA_CENTER
    assert created["mounts"] == {"network": [{"volumeId": "vol-podm0000000001", "path": "/workspace"}]}
    assert "L40S x1, $0.86/h: the cheapest free there that the plan fits" in result.output
    assert (
        f"the old pod podm0000000001 is kept (stopped) with the volume: terminate pod {created['id']} or run the "
        "move again"
    ) in result.output
    assert catalog.pod("podm0000000001")["status"] == "EXITED"  # never terminated
