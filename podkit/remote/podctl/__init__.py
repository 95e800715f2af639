"""podctl: the one program podkit runs on a host to read its state and act on it.

It is sent inline with each remote command (``python3 - probe '<json>'``), so it
must run on any Python 3.8+ with the standard library alone and must never print
a secret: it reads the API key from its file to query ``/v1/models`` locally,
and only says whether the answer was right. Each verb prints one line of JSON,
its answer, which the controller reads with ``podkit.host.podctl.read_answer``.

The verbs, and the part each lives in:

    probe      (verbs)        everything the deploy needs, in one round trip: GPUs, the volume,
                              installed vLLM builds, managed files' checksums, modes and owners,
                              supervisor, server and edge, vLLM engines that outlived their server;
                              and it takes the deploy lock (one deploy per host at a time)
    wait       (verbs)        poll the local server for up to ``window`` seconds; report readiness,
                              the supervisor's state, the last log line, and on trouble the log tail
    describe   (verbs)        what is serving, for the records of verify, bench and eval: the
                              running server's argv (the key is never on it), the vLLM version,
                              the recorded checkpoint and the served model's architecture, and
                              where the API key leaked (process argv, server logs, scripts: pids,
                              programs, files and line numbers, never the key)
    status     (verbs)        what ``podkit status`` shows: programs, vLLM's start, model and context,
                              the idle watcher's last reading, why the server is stopped
    reap       (processes)    stop the orphaned engines and stray programs a probe listed (that very
                              pid and start time)
    supervise  (control)      start supervisord, or restart the programs it runs (over its own
                              XML-RPC socket, without waiting for a start to finish), strays first
    down       (control)      stop vLLM on purpose (``podkit down`` on bare metal), under the deploy
                              lock: the edge stays up and answers 503 saying so
    restore    (control)      put back the files that served before a failed start, and restart vLLM
    self-stop  (control)      wait for the idle watcher's proof that the pod can stop itself (a read
                              of the pod with its own key), after the deploy restarted the watcher
    cache      (checkpoints)  list the hub cache, or clean its partial downloads and stale locks
    fetch-status (checkpoints) how the detached download of a checkpoint is going

The parts, in the order they are put together (each imports only the standard library and the
parts before it):

    base         reading files and JSON, a process's start time, a local HTTP request
    machine      GPUs, the volume, the SSH user and sudo, installed distributions, modes and owners
    processes    the process table, orphaned engines, who listens on a port; reap
    lock         the deploy lock and its holder
    supervisor   systemd's units, supervisord over its socket, the recorded server state, each
                 program's last log line, programs running outside the supervisor (strays)
    control      supervise, down, restore
    checkpoints  a model folder, the fetch record, the hub cache; cache, fetch-status
    cluster      a cluster node's variables, addresses and way to the head
    server       the server and the edge on loopback, vLLM's starts, what it serves, key leaks
    verbs        probe, wait, describe, status, and main

Each part is a module of its own (its tests import it through the assembled program).
``podkit.host.podctl.podctl_source`` ships them as one program: this text, every part's
standard-library imports, then each part's body in this order, without the parts' imports
of each other (in one program they share one namespace).
"""

#: The parts, in the order they are put together.
PARTS = ("base", "machine", "processes", "lock", "supervisor", "control", "checkpoints", "cluster", "server", "verbs")
