"""idle.py: podkit's idle watcher, run on the host by the same supervisor as vLLM.

    python3 idle.py /workspace/podkit/bin/idle.json

Every ``poll_seconds`` it reads vLLM's own counters over loopback (``/metrics``:
requests running and waiting, requests finished, prompt and generated tokens)
and keeps an idle clock: any request running or waiting, or any counter that
moved since the last read, is activity. The clock runs only while vLLM answers
(a server that is starting, loading a model or stopped is never idle), and
starts again whenever the server comes (back) up.

After ``idle_seconds`` of no activity (0: never; the clock is still kept, for
``podkit status``) it reads the counters once more and, if nothing runs or
waits and no deploy holds the host (its flock on the volume folder, podctl's
deploy lock: the stop waits for the deploy's end), stops what costs money:

- ``action = "runpod"``: the pod itself, through RunPod's REST API v2 (``POST
  /v2/pods/<id>/action`` ``{"action": "stop"}``), the pod's runpodctl where
  that fails (``pod stop <id>``, then the old ``stop pod <id>``). The pod's id
  and its pod-scoped API key come from the container's environment (PID 1's, as
  RunPod sets it; ``/etc/rp_environment`` as a fallback); the key goes in a
  header or runpodctl's environment, never argv, and never the user's account
  key, which is not on the pod. Before any stop is due the watcher proves the
  way (a read of the pod with that key, the same ways: at start, then every few
  hours) and keeps the outcome in its state file (``self_stop``), which the
  deploy, ``podkit status`` and ``podkit verify`` read.
- ``action = "server"``: vLLM alone (bare metal), freeing the GPU: put to sleep
  where it runs with sleep mode (``sleep``), else ``supervisorctl stop vllm`` or
  ``systemctl stop``. The edge keeps answering; a request with the key wakes it
  again through the wake hook (``wake``).

Before it stops anything it writes ``stopped_file`` (why and when), which the
edge reads to say why it answers 503 and the launch script removes at the next
start. Every read leaves ``state_file`` (JSON: in flight, last request, the
deadline) for ``podkit status``; every decision is logged on stdout.

``idle.py CONFIG.json --stop`` is the same stop on purpose for ``podkit down`` (bare metal):
the marker, then the server, one JSON line out.

On a cluster's follower (``follow``: the head's address and store port) there are no counters
of its own to read: its vLLM runs headless for the head. It follows the head instead: once the
head's port answered, the clock runs while it does not (a TCP connect every poll, nothing sent),
and after ``idle_seconds`` (at most :data:`FOLLOW_GRACE_SECONDS`) the follower stops what costs
money the same way. So the head's idle stop (or ``podkit down``) stops the whole cluster.

Standard library only, any Python 3.8+; it reads the API key only to prove a wake.

The parts, in the order they are put together into the one program the supervisor runs
(``podkit.host.shipped.program``; each imports the standard library and the parts before it):

    clock    vLLM's counters, what counts as activity, the idle clock (a follower's follows the head)
    stops    what is stopped and how: the pod with its own key, or vLLM; the marker and the state file
    config   the config checked at start, one line for what is wrong
    wake     bare metal: sleep instead of a stop where vLLM can, and the wake hook the edge asks
    watcher  the watcher's loop, and main (watch, or --stop)
"""

#: The parts, in the order they are put together.
PARTS = ("clock", "stops", "config", "wake", "watcher")
