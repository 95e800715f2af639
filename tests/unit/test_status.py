"""podkit status (issue #14): a host's status from what ``podctl status`` said and its RunPod pod
(REST v2's, as ``podkit.runpod.pods.status_of`` reads it), on the host's clock. The RunPod commands
themselves are in test_runpod_cli.py."""

import json

import pytest

from podkit.client.status import describe, host_status, parse_status
from podkit.runpod.pods import Pod, status_of
from podkit_cli.output import dumps
from testing import runpod_pods as pods
from tests.helpers import ROOT, settings

HOST_NOW = 1_795_000_000.0  # the host's clock when podctl status ran
CONTROLLER_NOW = HOST_NOW + 3 * 3600  # a controller whose clock is three hours off the host's
BARE = "inventories/baremetal.py"
#: vLLM 0.32's log of a start whose config.json has num_attention_heads 0 (tests/fixtures/vllm_logs/)
ZERO_HEADS = (ROOT / "tests" / "fixtures" / "vllm_logs" / "model_config_zero_heads.log").read_text().splitlines()
RUNPOD = "inventories/runpod.py"
STARTED = "2026-11-22T21:04:10Z"  # when RunPod says the pod last started


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


#: the idle watcher's proof that pod k3x9pq2m7a1b4c can stop itself (a read of it with its own key)
PROVEN = {"ok": True, "via": "v2", "why": None, "pod_id": "k3x9pq2m7a1b4c", "checked_at": HOST_NOW - 60}


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


def raw_pod(pod_id="k3x9pq2m7a1b4c", name="coder-1", uptime=7200, cost=0.79):
    raw = pods.pod(pod_id, name, "127.0.0.1", 40122, "/workspace", cost=cost, uptime=uptime)
    raw["startedAt"] = STARTED
    return raw


def pod(pod_id="k3x9pq2m7a1b4c", name="coder-1", uptime=7200, cost=0.79, lost_gpu=False, starting=False):
    """What status reads of a running pod (or one asked to start, no address yet; or back without its GPU)."""
    raw = raw_pod(pod_id, name, uptime, cost)
    if lost_gpu:
        raw["runtime"]["gpus"] = []
    if starting:
        raw.update(status="STARTING", runtime=None)
        raw["ssh"]["direct"] = None
    return status_of(Pod.of(raw))


def exited(pod_id="k3x9pq2m7a1b4c", name="coder-1"):
    """What status reads of a pod after a stop: EXITED, no runtime, nothing billed but the volume."""
    raw = raw_pod(pod_id, name)
    pods.stopped(raw)
    return status_of(Pod.of(raw))


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
        remote=podctl_status(idle=watcher(action="runpod", self_stop=PROVEN)),
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
            spend_basis="since it last started (RunPod's cost an hour x the container's uptime)",
            notes=[],
        ),
        says=[
            "coder-1: up since ",
            "  idle stop: the pod stops at ",
            " (in 27 min) unless a request comes (proven: RunPod answers its own key, v2)",
            "  spend: $1.58 at $0.79/h (since it last started",
        ],
        never=["start it"],
    ),
    "a RunPod pod that cannot stop itself: a problem, never the promise of a stop": dict(
        settings={"podkit_idle_stop_minutes": 30},
        remote=podctl_status(
            idle=watcher(
                action="runpod",
                self_stop={
                    **PROVEN,
                    "ok": False,
                    "via": None,
                    "why": "REST v2 answered GET /v2/pods/k3x9pq2m7a1b4c with HTTP 403 (RunPod refused the pod's key)",
                },
            )
        ),
        pod=pod(),
        expect=dict(
            state="up",
            problems=[
                "pod k3x9pq2m7a1b4c cannot stop itself, so its idle stop after 30 minutes would not happen (REST v2 "
                "answered GET /v2/pods/k3x9pq2m7a1b4c with HTTP 403 (RunPod refused the pod's key)): RunPod refused "
                "the pod's own key: restart the pod (RunPod gives it a new one); or set podkit_idle_stop_minutes = 0 "
                "and stop it with podkit down"
            ],
        ),
        says=["  problem: pod k3x9pq2m7a1b4c cannot stop itself"],
        never=["idle stop: the pod stops at"],
    ),
    "a RunPod pod stopped: when it last started, nothing spent": dict(
        settings=None,
        remote=None,
        pod=exited(),
        expect=dict(
            state="stopped",
            since=None,
            since_text=f"last started {STARTED}",
            spend_usd=0.0,
            spend_basis="stopped: RunPod bills only its volume",
            usd_per_hour=0.0,
            model=None,
            notes=[],
        ),
        says=[
            f"coder-1: stopped (last started {STARTED})",
            f"  start it: podkit up {RUNPOD} --host coder-1",
            "  spend: $0.00 at $0/h (stopped: RunPod bills only its volume)",
        ],
        never=["serves", "idle stop"],
    ),
    "a RunPod pod asked to start, no runtime yet": dict(
        settings=None,
        remote=None,
        pod=pod(uptime=0, starting=True),
        expect=dict(state="starting", since=None, since_text="RunPod says STARTING", spend_usd=None),
        says=["coder-1: starting (RunPod says STARTING)"],
        never=["start it", "spend"],
    ),
    "a RunPod pod that runs but whose SSH fails: RunPod's state, and the error": dict(
        settings={},
        remote={"error": "coder-1: cannot run the command over SSH (Connection refused)"},
        pod=pod(),
        expect=dict(state="up", error="coder-1: cannot run the command over SSH (Connection refused)", spend_usd=1.58),
        says=["  coder-1: cannot run the command over SSH (Connection refused)"],
        never=[],
    ),
    "a RunPod pod running without its GPU: a note to move it": pytest.param(
        dict(
            settings=None,  # the inventory leaves such a pod out: no settings, no remote
            remote=None,
            pod=pod(pod_id="z3r0g9p8u7a6b5", name="coder-4", uptime=64, cost=0.0, lost_gpu=True),
            expect=dict(
                state="up",
                spend_usd=0.0,
                notes=["it runs without its GPU (taken while it was stopped): move it (podkit up --move)"],
            ),
            says=["  it runs without its GPU (taken while it was stopped): move it (podkit up --move)"],
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
    raw = {**raw_pod(), "cost": float("nan")}
    status = host_status("tst-a", None, None, status_of(Pod.of(raw)), HOST_NOW)
    assert status.usd_per_hour is None and status.spend_usd is None


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
