"""What the deploy does against one host: read it in one command (probe), refuse what cannot
work before anything changes (preflight), render its files, install vLLM, fetch the checkpoint,
and start the server (a room of its own: ``start/``).

Reading the host:

    shell        what running one command on a host gives back, whoever runs it
    shipped      a program shipped to the host as one file, put together from its parts in podkit/remote/
    podctl       podctl seen from the controller: the one command that runs it, the one reader of its answer
    probe        what a host is like, read in one round trip
    hoststate    the probe's snapshot: GPUs, vLLM installs, units, and what follows from them
    supervision  what the supervision promises, checked against what runs
    access       what the edge refused lately, and why, from its access log

Deciding, before anything changes:

    preflight    what stops a probed host, and which vLLM it runs
    hostplan     the deploy's plan for one host, the same as podkit plan's, from its probe
    measure      a measured plan: vLLM's start without the weights says whether the flags fit
    cluster      one model across several hosts: the nodes, the head, whether they agree

Its files and what gets them there:

    programs     the programs podkit runs on a host, and the files each one reads
    render       the files podkit writes on a host, rendered on the controller from templates/
    filters      the filters every value a template receives goes through
    edge         the edge's sites: the addresses Caddy serves and binds, the names a certificate carries
    router       a router host: vLLM's router in front of a group of replicas
    idlefiles    the idle watcher's files: its program and config, and whether its stop is a sleep
    install      the shell command that puts a pinned vLLM into the venv on the volume
    fetch        fetching a checkpoint on the host: the commands, and reading their progress

The rooms:

    start/       one vLLM start: its launch checked, its profile, readiness, the diagnosis, the
                 rollback, what it logged and its phases

What a client reads of the host the deploy left (``podkit status``, ``verify``) is in ``podkit/client/``.
"""
