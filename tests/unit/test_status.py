"""podkit status, down and up (issue #14): a host's status from what ``podctl status`` said and
its RunPod pod, on the host's clock; stopping and resuming pods through the real runpod package
against the RunPod replay; the three commands through CliRunner on the states that need no SSH;
and inventories/runpod.py read for its ``select`` alone."""

import json
import math
import runpy

import pytest
from click.testing import CliRunner

from podkit import project_path
from podkit.host.status import describe, host_status, parse_status
from podkit.runpod.pods import PodsError, _quiet_cpuinfo, by_prefix, resume_pod, selected, stop_pod
from podkit_cli import cli
from podkit_cli.output import dumps
from testing.runpod_api import NO_FREE_GPUS, RunPodReplay, running_pod
from tests.helpers import ROOT, settings

HOST_NOW = 1_795_000_000.0  # the host's clock when podctl status ran
CONTROLLER_NOW = HOST_NOW + 3 * 3600  # a controller whose clock is three hours off the host's
BARE = "inventories/baremetal.py"
#: vLLM 0.32's log of a start whose config.json has num_attention_heads 0 (tests/fixtures/vllm_logs/)
ZERO_HEADS = (ROOT / "tests" / "fixtures" / "vllm_logs" / "model_config_zero_heads.log").read_text().splitlines()
RUNPOD = "inventories/runpod.py"
EXITED_AT = "Exited by user: Sun Nov 22 2026 21:04:10 GMT+0000 (Coordinated Universal Time)"


# --- what the host and RunPod say ------------------------------------------------------------


def watcher(**changes):
    """The idle watcher's state file (``Watcher.state``): 2 requests running, the last one 3 min
    ago, a 30 min idle stop due in 27 min, all on the host's clock."""
    return {
        "checked_at": HOST_NOW - 4,
        "server": "up",
        "in_flight": 2,
        "finished": 14,
        "last_request_at": HOST_NOW - 180,
        "idle_since": HOST_NOW - 180,
        "idle_stop_seconds": 1800.0,
        "deadline": HOST_NOW - 180 + 1800,
        "action": "server",
        "stopped": None,
        "error": None,
        "pid": 5120,
        **changes,
    }


def podctl_status(**changes):
    """``podctl status`` of a supervisord host serving ``coder`` with a 64k context since an hour,
    booted two hours ago (host clock), with the watcher's reading above."""
    return {
        "podctl": 1,
        "now": HOST_NOW,
        "boot_at": HOST_NOW - 7200,
        "supervisor_pid": 4101,
        "programs": {"vllm": "RUNNING", "edge": "RUNNING", "idle": "RUNNING"},
        "vllm_pid": 4230,
        "vllm_started_at": HOST_NOW - 3600,
        "crashes": 0,
        "served": {"health": 200, "models": ["coder"], "max_model_len": 65536},
        "idle": watcher(),
        "stopped": None,
        **changes,
    }


IDLE_MARKER = {"by": "idle", "at": HOST_NOW - 1200, "why": "no request for 30 min", "action": "server", "host": "box-1"}
DOWN_MARKER = {"by": "podkit down", "at": HOST_NOW - 600, "why": "stopped with podkit down", "host": "box-1"}
#: the last wake's record (podkit/remote/wake.py), 5 min ago, from an idle stop 20 min before it
WAKE = {
    "at": HOST_NOW - 300,
    "woke_at": HOST_NOW - 275.7,
    "seconds": 24.3,
    "how": "start",
    "ok": True,
    "said": "a 8-token completion",
    "proof": {"tokens": 8, "digest": "0123456789abcdef"},
    "requests_held": 2,
    "from": {**IDLE_MARKER, "how": "stop", "at": HOST_NOW - 1500},
}
NOT_SERVING = {"health": None, "models": None, "max_model_len": None}
#: what podctl status says after vLLM was stopped: no pid, nothing served, the watcher waits
STOPPED_SERVER = {
    "programs": {"vllm": "STOPPED", "edge": "RUNNING", "idle": "RUNNING"},
    "vllm_pid": None,
    "vllm_started_at": None,
    "served": NOT_SERVING,
    "idle": watcher(server="down", in_flight=0, deadline=None),
}


def pod(pod_id="k3x9pq2m7a1b4c", name="coder-1", uptime=7200, cost=0.79, **changes):
    return {
        **running_pod(pod_id, name, "203.0.113.10", 40122, "/workspace", cost_per_hr=cost, uptime_seconds=uptime),
        **changes,
    }


def exited(entry):
    """A pod as get_pods() lists it after a stop: EXITED, no runtime, no uptime."""
    return {**entry, "desiredStatus": "EXITED", "runtime": None, "uptimeSeconds": 0, "lastStatusChange": EXITED_AT}


# --- host_status and describe -----------------------------------------------------------------

# Each case: the host's settings (overrides of the defaults, or None for a pod the inventory left
# out), what podctl status said (None: not asked), the RunPod pod (None: bare metal), the fields
# expected, and what the human lines must and must not say.
CASES = {
    "bare metal serving, a request 3 min ago, idle stop at 30 min": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(),
        pod=None,
        expect=dict(
            state="up",
            since=CONTROLLER_NOW - 3600,  # the host's time, moved onto the controller's clock
            model="coder",
            context=65536,
            in_flight=2,
            minutes_since_request=3.0,
            idle_minutes=3.0,
            idle_stop_minutes=30,
            idle_stop_in_minutes=27.0,
            usd_per_hour=None,
            spend_usd=None,
            spend_basis="unknown: set podkit_usd_per_hour for this host",
            pod_id=None,
            error=None,
            notes=[],
        ),
        says=[
            "box-1: up since ",
            "  serves coder, context 65536 tokens; 2 request(s) in flight",
            "  last request 3 min ago",
            "  idle stop: the server stops at ",
            " (in 27 min) unless a request comes",
            "  spend: unknown: set podkit_usd_per_hour for this host",
        ],
        never=["start it", "stopped on purpose"],
    ),
    "bare metal at podkit_usd_per_hour 1.5, booted 2 h ago on its own clock: $3": dict(
        settings={"podkit_idle_stop_minutes": 30, "podkit_usd_per_hour": 1.5},
        remote=podctl_status(),
        pod=None,
        expect=dict(
            state="up",
            usd_per_hour=1.5,
            spend_usd=3.0,
            spend_basis="since the host booted, at podkit_usd_per_hour",
        ),
        says=["  spend: $3.00 at $1.5/h (since the host booted, at podkit_usd_per_hour)"],
        never=["unknown"],
    ),
    "bare metal up with no request since the watcher started": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(
            idle=watcher(in_flight=0, last_request_at=None, idle_since=HOST_NOW - 600, deadline=HOST_NOW + 1200)
        ),
        pod=None,
        expect=dict(state="up", in_flight=0, minutes_since_request=None, idle_minutes=10.0, idle_stop_in_minutes=20.0),
        says=[
            "  serves coder, context 65536 tokens; 0 request(s) in flight",
            "  no request since the server came up 10 min ago",
            " (in 20 min) unless a request comes",
        ],
        never=["last request"],
    ),
    "bare metal with the idle stop off": dict(
        settings={"podkit_idle_stop_minutes": 0},
        remote=podctl_status(idle=watcher(idle_stop_seconds=0.0, deadline=None)),
        pod=None,
        expect=dict(state="up", idle_stop_minutes=0, idle_stop_in_minutes=None, idle_stop_at=None),
        says=["  idle stop: off (podkit_idle_stop_minutes = 0)"],
        never=["stops at"],
    ),
    "bare metal stopped by the idle watcher": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(**STOPPED_SERVER, stopped=IDLE_MARKER),
        pod=None,
        expect=dict(
            state="stopped",
            since=CONTROLLER_NOW - (HOST_NOW - IDLE_MARKER["at"]),
            stopped=IDLE_MARKER,
            model="Qwen3-Coder-30B-A3B-Instruct",  # nothing served: the settings' name
            context=None,
            in_flight=None,
            minutes_since_request=None,
            idle_stop_in_minutes=None,
        ),
        says=[
            "box-1: stopped since ",
            "  stopped on purpose: no request for 30 min",
            f"  start it: podkit up {BARE} --host box-1",
        ],
        never=["serves", "request(s) in flight", "idle stop"],
    ),
    "bare metal stopped by the idle watcher, which a request wakes": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(**STOPPED_SERVER, stopped={**IDLE_MARKER, "how": "stop"}),
        pod=None,
        expect=dict(state="stopped", wake=None),
        says=["  stopped for idleness: the next request with the key wakes it (the edge holds it meanwhile)"],
        never=["last wake"],
    ),
    "bare metal asleep (GPU build with sleep mode): vLLM answers, the marker says asleep": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(stopped={**IDLE_MARKER, "how": "sleep"}),
        pod=None,
        expect=dict(state="asleep"),
        says=["box-1: asleep", "  asleep for idleness: the next request with the key wakes it"],
        never=["stopped for idleness"],
    ),
    "bare metal woken by a request after an idle stop": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(wake=WAKE),
        pod=None,
        expect=dict(
            state="up",
            wake={
                "at": CONTROLLER_NOW - 300,
                "seconds": 24.3,
                "how": "start",
                "ok": True,
                "said": "a 8-token completion",
                "requests_held": 2,
                "answer_changed": False,
                "from": {"by": "idle", "how": "stop", "why": "no request for 30 min", "at": CONTROLLER_NOW - 1500},
            },
        ),
        says=[
            "after a stop (idle) at ",
            ": a request started it, proven by a 8-token completion 24.3 s later; 2 request(s) held meanwhile",
        ],  # fmt: skip
        never=["stopped for idleness", "FAILED"],
    ),
    "bare metal whose wake failed": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(
            **STOPPED_SERVER,
            stopped=IDLE_MARKER,
            wake={**WAKE, "ok": False, "said": "vLLM did not answer /health within 600 s", "seconds": "600\x1b[2J"},
        ),
        pod=None,
        expect=dict(state="stopped"),
        says=["  last wake FAILED: ", ": vLLM did not answer /health within 600 s"],
        never=["x1b"],
    ),
    "bare metal stopped with podkit down": dict(
        settings={},
        remote=podctl_status(**STOPPED_SERVER, stopped=DOWN_MARKER),
        pod=None,
        expect=dict(state="stopped", since=CONTROLLER_NOW - (HOST_NOW - DOWN_MARKER["at"]), stopped=DOWN_MARKER),
        says=["  stopped on purpose: stopped with podkit down", f"  start it: podkit up {BARE} --host box-1"],
        never=["serves"],
    ),
    "vLLM FATAL under supervisord: crashed, a problem with the cause from its log": dict(
        settings={},
        remote=podctl_status(
            **{**STOPPED_SERVER, "programs": {"vllm": "FATAL", "edge": "RUNNING", "idle": "RUNNING"}},
            crashes=5,
            program_said={"vllm": "2025-11-29T03:33:10Z podkit: vLLM exited with status 1"},
            server_tail=ZERO_HEADS,
        ),
        pod=None,
        expect=dict(
            state="crashed",
            since=None,
            stopped=None,
            in_flight=None,
            problems=[
                "vLLM is FATAL under supervisord (its supervisor gave up on it): clients get 503; vLLM raised "
                "ZeroDivisionError at start: if it is about the model (its config.json), use another model or "
                "revision; else fix the setting it names and re-apply (log: ZeroDivisionError: integer division "
                "or modulo by zero); fix that and re-apply (podkit up)"
            ],
        ),
        says=[
            "box-1: crashed",
            "  problem: vLLM is FATAL under supervisord",
            f"  start it: podkit up {BARE} --host box-1",
        ],
        never=["stopped on purpose", "serves"],
    ),
    "vLLM FATAL for an empty key file: the line launch.sh wrote is the cause": dict(
        settings={},
        remote=podctl_status(
            **{**STOPPED_SERVER, "programs": {"vllm": "FATAL", "edge": "RUNNING", "idle": "RUNNING"}},
            server_tail=[
                "2025-11-29T03:00:00Z podkit: starting vLLM (local time +0000)",
                "podkit: the API key file /v/podkit/secrets/api_key is empty; refusing to start",
            ],
        ),
        pod=None,
        expect=dict(state="crashed"),
        says=["  problem: vLLM is FATAL under supervisord", "the API key file on the host is empty"],
        never=[],
    ),
    "the vLLM unit failed under systemd: crashed": dict(
        settings={},
        remote=podctl_status(
            **{**STOPPED_SERVER, "programs": {"vllm": "FAILED", "edge": "ACTIVE", "idle": "ACTIVE"}},
            supervisor_pid=None,
            supervisor="systemd",
        ),
        pod=None,
        expect=dict(state="crashed"),
        says=["  problem: vLLM is FAILED under systemd", f"  start it: podkit up {BARE} --host box-1"],
        never=[],
    ),
    "vLLM loading (a pid, no health yet): starting since its start": dict(
        settings={},
        remote=podctl_status(served=NOT_SERVING, vllm_started_at=HOST_NOW - 90, idle=watcher(server="down")),
        pod=None,
        expect=dict(state="starting", since=CONTROLLER_NOW - 90, in_flight=None, context=None),
        says=["box-1: starting since "],
        never=["start it", "serves"],
    ),
    "vLLM in BACKOFF under supervisord: starting again, a problem with the cause": dict(
        settings={},
        remote=podctl_status(
            **{**STOPPED_SERVER, "programs": {"vllm": "BACKOFF", "edge": "RUNNING", "idle": "RUNNING"}},
            server_tail=ZERO_HEADS,
        ),
        pod=None,
        expect=dict(state="starting"),
        says=["box-1: starting", "  problem: vLLM is BACKOFF under supervisord (it exited and is retried)"],
        never=["start it"],
    ),
    "the idle watcher FATAL (a config it cannot read): no deadline, a problem with its last line and the fix": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(
            programs={"vllm": "RUNNING", "edge": "RUNNING", "idle": "FATAL"},
            program_said={"idle": "idle.py: /v/podkit/bin/idle.json: idle_seconds must be finite (got nan)"},
        ),
        pod=None,
        expect=dict(
            state="up",
            idle_stop_in_minutes=None,
            idle_stop_at=None,
            problems=[
                "the idle watcher is FATAL under supervisord: nothing stops the server (or the pod) when it is "
                "idle: it bills until stopped by hand; its log says: idle.py: /v/podkit/bin/idle.json: "
                "idle_seconds must be finite (got nan); fix that and re-apply (podkit up)"
            ],
        ),
        says=["  problem: the idle watcher is FATAL under supervisord: nothing stops"],
        never=["in 27 min", "idle stop:"],
    ),
    "the edge backing off under supervisord: a problem": dict(
        settings={},
        remote=podctl_status(programs={"vllm": "RUNNING", "edge": "BACKOFF", "idle": "RUNNING"}, program_said={}),
        pod=None,
        expect=dict(
            problems=[
                "the edge (Caddy) is BACKOFF under supervisord: clients cannot reach the server; fix that and "
                "re-apply (podkit up)"
            ]
        ),
        says=["  problem: the edge (Caddy) is BACKOFF"],
        never=[],
    ),
    "supervisord killed, its programs serving unsupervised: up, and two problems": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(
            supervisor_pid=None,
            programs={},
            leftovers=[
                {
                    "pid": 4300,
                    "start": "9",
                    "program": "edge",
                    "stray": True,
                    "title": "the edge (Caddy)",
                    "command": "caddy run --config Caddyfile --adapter caddyfile",
                    "pids": [4300],
                    "rss_bytes": 2**25,
                }
            ],
        ),
        pod=None,
        expect=dict(state="up", idle_stop_in_minutes=None),
        says=[
            "  problem: supervisord does not run: nothing restarts a program that exits",
            "  problem: the edge (Caddy) pid 4300 (caddy run --config Caddyfile --adapter caddyfile) runs from "
            "this volume's files outside the supervisor",
            "with the key it started with; the deploy stops it before starting its own (or: kill 4300)",
        ],
        never=["in 27 min"],
    ),
    "an unreachable bare-metal host": dict(
        settings={"podkit_usd_per_hour": 1.5},
        remote={"error": "box-1: cannot run the command over SSH (timed out)"},
        pod=None,
        expect=dict(
            state="unreachable", error="box-1: cannot run the command over SSH (timed out)", since=None, spend_usd=None
        ),
        says=["box-1: unreachable", "  box-1: cannot run the command over SSH (timed out)"],
        never=["serves"],
    ),
    "a RunPod pod serving, 2 h up at $0.79/h: $1.58, ages on the host's clock": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(idle=watcher(action="pod")),
        pod=pod(),
        expect=dict(
            state="up",
            pod_id="k3x9pq2m7a1b4c",
            since=CONTROLLER_NOW - 7200,  # the pod's uptime, on the controller's clock
            model="coder",
            context=65536,
            in_flight=2,
            minutes_since_request=3.0,
            idle_stop_in_minutes=27.0,
            usd_per_hour=0.79,
            spend_usd=1.58,
            spend_basis="the pod's uptime since it last started (RunPod's costPerHr x uptimeSeconds)",
            notes=[],
        ),
        says=[
            "coder-1: up since ",
            "  idle stop: the pod stops at ",
            " (in 27 min) unless a request comes",
            "  spend: $1.58 at $0.79/h (the pod's uptime since it last started",
        ],
        never=["start it"],
    ),
    "a RunPod pod stopped: RunPod's lastStatusChange, nothing spent": dict(
        settings=None,
        remote=None,
        pod=exited(pod()),
        expect=dict(
            state="stopped",
            since=None,
            since_text=EXITED_AT,
            spend_usd=0.0,
            spend_basis="stopped: RunPod bills only its volume",
            usd_per_hour=0.79,
            model=None,
            notes=[],
        ),
        says=[
            f"coder-1: stopped ({EXITED_AT})",
            f"  start it: podkit up {RUNPOD} --host coder-1",
            "  spend: $0.00 at $0.79/h (stopped: RunPod bills only its volume)",
        ],
        never=["serves", "idle stop"],
    ),
    "a RunPod pod asked to start, no runtime yet": dict(
        settings=None,
        remote=None,
        pod=pod(uptime=0, runtime=None),
        expect=dict(state="starting", since=CONTROLLER_NOW, spend_usd=0.0),
        says=["coder-1: starting since "],
        never=["start it"],
    ),
    "a RunPod pod that runs but whose SSH fails: RunPod's state, and the error": dict(
        settings={},
        remote={"error": "coder-1: cannot run the command over SSH (Connection refused)"},
        pod=pod(),
        expect=dict(state="up", error="coder-1: cannot run the command over SSH (Connection refused)", spend_usd=1.58),
        says=["  coder-1: cannot run the command over SSH (Connection refused)"],
        never=[],
    ),
    "a RunPod pod running with zero GPUs: a note to migrate it": pytest.param(
        dict(
            settings=None,  # the inventory leaves a zero-GPU pod out: no settings, no remote
            remote=None,
            pod=pod(pod_id="z3r0g9p8u7a6b5", name="coder-4", uptime=64, cost=0.0, gpuCount=0),
            expect=dict(
                state="up",
                spend_usd=0.0,
                notes=["it runs with zero GPUs (its GPU was taken while it was stopped): migrate it"],
            ),
            says=["  it runs with zero GPUs (its GPU was taken while it was stopped): migrate it"],
            never=["None", "idle stop: off"],
        ),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_hosts_status_and_its_lines(case):
    host = "coder-1" if case["pod"] is not None else "box-1"
    chosen = None if case["settings"] is None else settings(**case["settings"])
    status = host_status(host, chosen, case["remote"], case["pod"], CONTROLLER_NOW)
    found = status.as_dict()
    assert {key: found[key] for key in case["expect"]} == case["expect"]
    inventory = RUNPOD if case["pod"] is not None else BARE
    lines = describe(status, inventory)
    said = "\n".join(lines)
    assert lines[0].startswith(f"{host}: {status.state}")
    for part in case["says"]:
        assert part in said, said
    for part in case["never"]:
        assert part not in said, said
    json.dumps(found)  # what status --json prints


def test_host_ages_follow_the_hosts_clock_whatever_the_controllers():
    """The same host reading gives the same minutes with the controller's clock hours off either way."""
    chosen = settings(podkit_idle_stop_minutes=30, podkit_usd_per_hour=1.5)
    seen = {
        offset: host_status("box-1", chosen, podctl_status(), None, HOST_NOW + offset)
        for offset in (-5 * 3600, 0, 3 * 3600)
    }
    for status in seen.values():
        assert (status.minutes_since_request, status.idle_minutes, status.idle_stop_in_minutes) == (3.0, 3.0, 27.0)
        assert status.spend_usd == 3.0


def test_the_idle_stop_deadline_is_dated_on_the_controllers_clock_it_was_given():
    status = host_status("box-1", settings(podkit_idle_stop_minutes=30), podctl_status(), None, CONTROLLER_NOW)
    assert status.idle_stop_at == CONTROLLER_NOW + 27 * 60


PARSED = {
    "the last line of podctl's output": ("note: pid file is stale\n" + json.dumps(podctl_status()), podctl_status()),
    "an error podctl printed": (
        '{"ok": false, "error": "no such file: /workspace/.podkit"}',
        {"error": "no such file: /workspace/.podkit"},
    ),
    "nothing": ("", {"error": "podctl status printed nothing"}),
    "a traceback's last line": (
        "Traceback (most recent call last):\nKeyError: 'idle_state'",
        {"error": "podctl status printed no JSON: KeyError: 'idle_state'"},
    ),
    "JSON that is not an object": ("[1, 2]", {"error": "podctl status answered something else: [1, 2]"}),
    "an object podctl did not write": (
        '{"ok": true}',
        {"error": 'podctl status answered something else: {"ok": true}'},
    ),
}


@pytest.mark.parametrize("output, expected", PARSED.values(), ids=PARSED.keys())
def test_podctl_status_output_is_parsed_or_an_error(output, expected):
    assert parse_status(output) == expected


# --- stop_pod, resume_pod and selected against the RunPod replay -----------------------------

ACCOUNT_KEY = "rp-account-key-7f3c"
A, B, Z = "poda0000000001", "podb0000000001", "podz0000000001"


@pytest.fixture
def runpod_module(monkeypatch):
    """The runpod package, its global key put back after the test (the product sets it)."""
    _quiet_cpuinfo()
    import runpod

    monkeypatch.setattr(runpod, "api_key", None)
    return runpod


@pytest.fixture
def replay(monkeypatch, runpod_module):
    """The replay with pod A running, pod B stopped and pod Z stopped with its GPUs gone, plus a
    notebook that no inventory selects."""
    pods = [
        pod(A, "tst-a"),
        exited(pod(B, "tst-b")),
        exited(pod(Z, "tst-z")),
        pod("podn0000000001", "notebook", cost=0.44),
    ]
    for entry in pods:  # SSH at a closed local port: were a test to reach for it, it fails at once
        for port in (entry["runtime"] or {}).get("ports", []):
            port["ip"] = "127.0.0.1"
        if entry["runtime"]:
            entry["runtime"]["ports"][0]["publicPort"] = 9
    server = RunPodReplay(api_key=ACCOUNT_KEY, pods=pods, pod_keys={A: "rp-pod-key-a"}, no_gpu={Z})
    monkeypatch.setenv("RUNPOD_API_BASE_URL", server.url)
    with server:
        yield server


def status_of(replay, pod_id):
    return next(p for p in replay.pods if p["id"] == pod_id)["desiredStatus"]


def mutations(replay):
    return [
        (r["key"], "podStop" if "podStop" in r["query"] else "podResume")
        for r in replay.requests
        if "mutation" in r["query"]
    ]


def test_stop_pod_exits_the_pod(replay):
    assert stop_pod(ACCOUNT_KEY, A, "tst-a") == "EXITED"
    assert status_of(replay, A) == "EXITED" and mutations(replay) == [("account", "podStop")]


def test_resume_pod_runs_a_stopped_pod(replay):
    assert resume_pod(ACCOUNT_KEY, B, "tst-b", 1) == "RUNNING"
    assert status_of(replay, B) == "RUNNING" and mutations(replay) == [("account", "podResume")]


def test_a_pod_whose_gpus_are_gone_cannot_come_back_and_says_the_fix(replay):
    with pytest.raises(PodsError) as caught:
        resume_pod(ACCOUNT_KEY, Z, "tst-z", 1)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"pod tst-z ({Z}) cannot come back: its machine has no free GPU now ")
    assert NO_FREE_GPUS in line
    assert line.endswith("wait and run podkit up again, or migrate it: a new pod on the same network volume")
    assert status_of(replay, Z) == "EXITED"


FAILURES = {
    "stop with another account's key": (
        lambda: stop_pod("rp-someone-elses-key", A, "tst-a"),
        f"pod tst-a ({A}): RunPod did not stop it: AuthenticationError: Unauthorized request, please check your API key.",
    ),
    "resume with another account's key": (
        lambda: resume_pod("rp-someone-elses-key", B, "tst-b", 1),
        f"pod tst-b ({B}): RunPod did not resume it: AuthenticationError: Unauthorized request, please check your API key.",
    ),
    "resume of a pod that runs": (
        lambda: resume_pod(ACCOUNT_KEY, A, "tst-a", 1),
        f"pod tst-a ({A}): RunPod did not resume it: QueryError: pod {A} is already running",
    ),
    "stop of another pod with a pod's own key": (
        lambda: stop_pod("rp-pod-key-a", B, "tst-b"),
        f"pod tst-b ({B}): RunPod did not stop it: QueryError: forbidden: this API key belongs to pod {A} "
        "and may only read and stop that pod",
    ),
    "stop without a key": (
        lambda: stop_pod(None, A, "tst-a"),
        "RUNPOD_API_KEY is not set: export your RunPod API key (Settings > API Keys) and re-run",
    ),
    "resume without a key": (
        lambda: resume_pod("", B, "tst-b", 1),
        "RUNPOD_API_KEY is not set: export your RunPod API key (Settings > API Keys) and re-run",
    ),
}


@pytest.mark.parametrize("call, message", FAILURES.values(), ids=FAILURES.keys())
def test_a_stop_or_resume_that_fails_is_one_line_without_the_key(replay, call, message):
    with pytest.raises(PodsError) as caught:
        call()
    assert str(caught.value) == message
    assert "rp-someone-elses-key" not in str(caught.value) and "rp-pod-key-a" not in str(caught.value)
    assert status_of(replay, A) == "RUNNING" and status_of(replay, B) == "EXITED"


SELECTIONS = {
    "every state, in the API's order": (
        [pod("p1", "tst-a"), exited(pod("p2", "tst-b")), pod("p3", "notebook")],
        by_prefix("tst-"),
        [("tst-a", "p1"), ("tst-b", "p2")],
    ),
    "two pods with one name get their ids": (
        [pod("p1", "coder"), exited(pod("p2", "coder")), pod("p3", "coder-2")],
        by_prefix(""),
        [("coder-p1", "p1"), ("coder-p2", "p2"), ("coder-2", "p3")],
    ),
    "a name no host name may carry, and no name at all": (
        [pod("p1", "my coder/1"), pod("p2", None)],
        lambda entry: True,
        [("my-coder-1", "p1"), ("p2", "p2")],
    ),
    "nothing selected": ([pod("p1", "notebook")], by_prefix("tst-"), []),
}


@pytest.mark.parametrize("pods, select, expected", SELECTIONS.values(), ids=SELECTIONS.keys())
def test_selected_names_every_selected_pod(pods, select, expected):
    assert [(name, entry["id"]) for name, entry in selected(pods, select)] == expected


# --- the CLI: podkit status, down and up, on states that need no SSH -------------------------


@pytest.fixture
def account(replay, monkeypatch, tmp_path):
    """inventories/runpod.py selecting the tst- pods of the replay, with the account's key."""
    monkeypatch.setenv("RUNPOD_API_KEY", ACCOUNT_KEY)
    monkeypatch.setenv("PODKIT_POD_PREFIX", "tst-")
    monkeypatch.setenv("PODKIT_STATE_DIR", str(tmp_path / "state"))
    for name in ("PODKIT_POD_STRICT", "PODKIT_ACCEPT_NEW_HOST_KEY"):
        monkeypatch.delenv(name, raising=False)
    return replay


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def no_traceback(result):
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def test_status_of_stopped_pods_says_since_when_and_how_to_start_them(account):
    account.pods[0] = exited(account.pods[0])
    result = invoke("status", RUNPOD, "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert sorted(found) == ["tst-a", "tst-b", "tst-z"]  # the notebook is not selected
    for name, row in found.items():
        assert row["host"] == name and row["state"] == "stopped" and row["error"] is None
        assert row["spend_usd"] == 0.0 and row["spend_basis"] == "stopped: RunPod bills only its volume"
        assert row["since_text"] == EXITED_AT and row["since"] is None
    assert found["tst-a"]["pod_id"] == A

    human = invoke("status", RUNPOD)
    assert human.exit_code == 0, human.output
    for name in found:
        assert f"{name}: stopped ({EXITED_AT})" in human.output
        assert f"  start it: podkit up {RUNPOD} --host {name}" in human.output
    assert not mutations(account)


def test_status_of_one_host(account):
    result = invoke("status", RUNPOD, "--host", "tst-b", "--json")
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)) == ["tst-b"]


def test_status_of_a_running_pod_with_zero_gpus_shows_it_with_the_note(account):
    account.pods[0] = exited(account.pods[0])  # the one pod that runs has no GPU: nothing to reach
    zero = pod("podq0000000001", "tst-q", uptime=64, cost=0.0, gpuCount=0)
    zero["runtime"]["ports"][0].update(ip="127.0.0.1", publicPort=9)  # nothing to reach, were it tried
    zero["runtime"]["ports"][1]["ip"] = "127.0.0.1"
    account.pods.append(zero)
    result = invoke("status", RUNPOD, "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["tst-q"]
    assert row["state"] == "up" and row["notes"] == [
        "it runs with zero GPUs (its GPU was taken while it was stopped): migrate it"
    ]


def test_down_stops_a_running_pod_with_the_account_key_and_says_how_to_start_it(account):
    result = invoke("down", RUNPOD, "--host", "tst-a")
    assert result.exit_code == 0, result.output
    assert result.output == (f"tst-a: stopped (RunPod says EXITED); start it again: podkit up {RUNPOD} --host tst-a\n")
    assert mutations(account) == [("account", "podStop")]
    assert status_of(account, A) == "EXITED" and status_of(account, "podn0000000001") == "RUNNING"
    after = json.loads(invoke("status", RUNPOD, "--host", "tst-a", "--json").stdout)["tst-a"]
    assert after["state"] == "stopped" and after["since_text"].startswith("Exited by user: ")


def test_down_of_a_stopped_pod_says_so_and_stops_nothing(account):
    result = invoke("down", RUNPOD, "--host", "tst-b")
    assert result.exit_code == 0, result.output
    assert result.output == "tst-b: already exited\n"
    assert not mutations(account)


def test_down_of_every_selected_pod_stops_only_those_that_run(account):
    result = invoke("down", RUNPOD)
    assert result.exit_code == 0, result.output
    assert "tst-a: stopped (RunPod says EXITED)" in result.output
    assert "tst-b: already exited" in result.output and "tst-z: already exited" in result.output
    assert mutations(account) == [("account", "podStop")]
    assert status_of(account, "podn0000000001") == "RUNNING"  # not selected: left alone


def test_up_of_a_pod_whose_gpus_are_gone_names_it_and_the_fix(account):
    result = invoke("up", RUNPOD, "--host", "tst-z")
    assert result.exit_code == 1
    no_traceback(result)
    lines = result.output.strip().splitlines()
    assert len(lines) == 2, result.output
    assert lines[0].startswith(f"pod tst-z ({Z}) cannot come back: its machine has no free GPU now ")
    assert lines[0].endswith("wait and run podkit up again, or migrate it: a new pod on the same network volume")
    assert lines[1] == "Error: no pod is running to deploy to"
    assert mutations(account) == [("account", "podResume")] and status_of(account, Z) == "EXITED"


def test_up_resumes_a_stopped_pod_and_says_when_it_gets_no_ssh_address(account):
    """The replay brings tst-b back without a runtime (as RunPod shows a pod whose container has not
    started): with --wait 0 it is resumed once, then named with the fix, and nothing is deployed."""
    result = invoke("up", RUNPOD, "--host", "tst-b", "--wait", "0")
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output.splitlines() == [
        f"tst-b: resuming pod {B}",
        f"pod tst-b ({B}) has no SSH address after 0 s: re-run podkit up",
        "Error: no pod is running to deploy to",
    ]
    assert mutations(account) == [("account", "podResume")] and status_of(account, B) == "RUNNING"


@pytest.mark.parametrize("command", ["status", "down", "up"])
def test_an_unknown_host_is_bad_input_in_one_line(account, command):
    result = invoke(command, RUNPOD, "--host", "tst-nope")
    assert result.exit_code == 2
    no_traceback(result)
    assert (
        result.output.strip().splitlines()[-1]
        == "Error: Invalid value for --host: no pod named tst-nope in the inventory"
    )
    assert not mutations(account)


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
    assert result.output == "Error: RunPod refused RUNPOD_API_KEY (401): make a new key under Settings > API Keys\n"


@pytest.mark.parametrize("command", ["status", "down", "up"])
def test_a_missing_inventory_is_bad_input(command, tmp_path):
    result = invoke(command, str(tmp_path / "nowhere.py"))
    assert result.exit_code == 2 and "no such inventory file" in result.output


# --- inventories/runpod.py ---------------------------------------------------------------------


def test_the_runpod_inventory_read_as_podkit_pods_defines_select_without_asking_the_api(account):
    namespace = runpy.run_path(str(project_path(RUNPOD)), run_name="podkit.pods")
    assert callable(namespace["select"]) and "runpod" not in namespace
    assert [name for name, _ in selected(account.pods, namespace["select"])] == ["tst-a", "tst-b", "tst-z"]
    assert account.requests == []


def test_the_runpod_inventory_loaded_normally_still_builds_the_runpod_group(account, capsys):
    # nothing listens on 127.0.0.1:9 (the replay's fixture): the host-key scan fails at once, the pod is kept
    namespace = runpy.run_path(str(project_path(RUNPOD)))
    assert [name for name, _ in namespace["runpod"]] == ["tst-a"]  # the stopped pods are left out
    data = dict(namespace["runpod"])["tst-a"]
    assert (data["ssh_hostname"], data["ssh_port"], data["runpod_pod_id"]) == ("127.0.0.1", 9, A)
    assert any("myself" in r["query"] for r in account.requests)
    said = capsys.readouterr().err
    assert f"pod tst-b ({B}): is exited, not running" in said


def test_up_of_a_pod_running_with_zero_gpus_names_it_and_deploys_nothing(account):
    zero = pod("podq0000000001", "tst-q", uptime=64, cost=0.0, gpuCount=0)
    zero["runtime"]["ports"][0].update(ip="127.0.0.1", publicPort=9)  # nothing to reach, were it tried
    account.pods.append(zero)
    result = invoke("up", RUNPOD, "--host", "tst-q")
    assert result.exit_code == 1
    no_traceback(result)
    assert result.output.splitlines() == [
        "pod tst-q (podq0000000001) came back with zero GPUs (its GPU was taken while it was stopped): "
        "migrate it to a new pod on the same network volume, or stop it and run podkit up later",
        "Error: no pod is running to deploy to",
    ]
    assert not mutations(account)


NOT_A_NUMBER = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "past a float": "1e400",
    "past a float's integers": "9" * 30,
}


@pytest.mark.parametrize("literal", NOT_A_NUMBER.values(), ids=NOT_A_NUMBER.keys())
def test_a_host_number_that_is_not_finite_is_no_reading(literal):
    """A watcher's state or podctl's answer with NaN, Infinity or an overflowing number (a forged or
    broken file on the host): status shows nothing for it, never $nan or a traceback."""
    template = json.dumps(podctl_status(idle=watcher(idle_stop_seconds=0, deadline=0, usd_per_hour=0), boot_at=0))
    for field in ('"idle_stop_seconds": 0', '"deadline": 0', '"usd_per_hour": 0', '"boot_at": 0'):
        answer = parse_status(template.replace(field, field[:-1] + literal))
        status = host_status("box-1", settings(podkit_usd_per_hour=1.5), answer, None, HOST_NOW)
        text = "\n".join(describe(status, BARE))
        assert "nan" not in text and "inf" not in text.replace("in flight", ""), text
        json.loads(dumps(status.as_dict()), parse_constant=pytest.fail)


def test_a_pod_price_that_is_not_finite_is_no_price():
    pod = {"id": "p", "desiredStatus": "RUNNING", "runtime": {}, "costPerHr": float("nan"), "uptimeSeconds": 60}
    status = host_status("tst-a", None, None, pod, HOST_NOW)
    assert status.usd_per_hour is None and status.spend_usd is None


def test_status_json_stays_strict_json_when_runpod_gives_no_finite_price(account):
    account.pods[1] = {**account.pods[1], "costPerHr": float("nan")}
    result = invoke("status", RUNPOD, "--json")
    no_traceback(result)
    found = json.loads(result.stdout, parse_constant=pytest.fail)
    assert all(row["spend_usd"] is None or math.isfinite(row["spend_usd"]) for row in found.values())


def test_podctl_answers_the_failed_starts_lines_while_the_server_does_not_run(tmp_path):
    from tests.helpers import podctl

    log = tmp_path / "vllm.log"
    failed = ["2025-11-29T03:33:00Z podkit: starting vLLM (local time +0000)", *ZERO_HEADS]
    exited = "2025-11-29T03:33:10Z podkit: vLLM exited with status 1"
    retry = "2025-11-29T03:33:11Z podkit: starting vLLM (local time +0000)"
    log.write_text("\n".join(["an earlier run's line", *failed, exited, retry, "INFO loading"]) + "\n")
    cfg = {"program_logs": {"vllm": str(log), "edge": str(tmp_path / "edge.log")}}
    tail = podctl.server_tail(cfg, {"programs": {"vllm": "BACKOFF", "edge": "RUNNING"}})
    assert tail == [*ZERO_HEADS, exited]  # the start that exited, not the retry under way
    assert podctl.server_tail(cfg, {"programs": {"vllm": "RUNNING", "edge": "RUNNING"}}) is None
    lines = describe(
        host_status(
            "box-1",
            settings(),
            podctl_status(
                **{**STOPPED_SERVER, "programs": {"vllm": "BACKOFF", "edge": "RUNNING", "idle": "RUNNING"}},
                server_tail=tail,
            ),
        ),
        BARE,
    )
    assert any("vLLM raised ZeroDivisionError at start" in line for line in lines)
