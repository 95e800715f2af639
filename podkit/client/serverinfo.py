"""What a host is serving, read from the host itself: the record every result carries.

``verify``, ``bench`` and ``eval`` store, with each result, the model, its
revision, the vLLM version and the running server's full launch flags, so two
results can be compared later. They come from one remote command
(``podctl describe``): the running server's own argv (the API key is never on
it: it travels in ``VLLM_API_KEY``), the venv's vLLM metadata and the
checkpoint record written by the fetch. The same command reports where the
API key shows outside its file (``leaks``), for verify's key checks, and who
listens on the served port (``listener``), so a client sends the key only to
the server podkit started there (:func:`key_refusal`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from podkit.host.podctl import PodctlError, podctl_command, read_answer
from podkit.host.probe import listener_holder, server_config
from podkit.host.programs import edge_files, managed_files, supervision_files
from podkit.host.shell import RemoteError, Run
from podkit.settings import Settings


@dataclass
class ServerInfo:
    """What serves on a host. ``error`` says why a field is unknown (e.g. the host is unreachable)."""

    host: str
    model: str | None = None
    served_model_name: str | None = None
    revision: str | None = None
    vllm_version: str | None = None
    serve_args: list[str] = field(default_factory=list)
    architectures: list[str] = field(default_factory=list)
    model_type: str | None = None  # config.json's, and its text_config's: what families.family_for reads
    text_model_type: str | None = None
    running: bool = False
    #: where the API key showed outside its file (podctl's ``key_leaks``): pids and programs
    #: under "argv", files and line numbers under "log" and "scripts"; never the key itself
    leaks: dict[str, Any] | None = None
    #: the served folder's generation_config.json: {"path", "config"} or {"path", "error"};
    #: None when the server does not serve a folder on the host
    generation_config: dict[str, Any] | None = None
    #: who listens on the served port (podctl's ``listener``): port, held, podkit (the server the
    #: edge supervisord or the unit started holds it), pid, program, user; None when the host was not read
    listener: dict[str, Any] | None = None
    #: vLLM engines of this volume that outlived their server (podctl's ``orphans``): pid, title,
    #: rss_bytes, gpu_mib; they hold memory the next server needs
    orphans: list[dict[str, Any]] = field(default_factory=list)
    #: every TCP address the vLLM server's processes listen on: [{"address", "port"}] (loopback
    #: only, or the edge is bypassed); None when no server runs
    vllm_listens: list[dict[str, Any]] | None = None
    #: the paths the running vLLM serves, from its own /openapi.json on loopback (verify only)
    routes: list[str] | None = None
    #: a router host: {"policy", "workers": [{"name", "url", "healthy"}]} or {"policy", "error"}
    router: dict[str, Any] | None = None
    #: what the edge refused lately, from its access log (podctl's ``refused``): {"file", "read",
    #: "counts": {"STATUS METHOD PATH": n}, "last": [...]}; None when there is no log
    refused: dict[str, Any] | None = None
    #: what supervises (supervisord or systemd), its pid, {program: state} as it says, and the
    #: last log line of each program it does not run; None when the host was not read
    supervisor: str | None = None
    supervisor_pid: int | None = None
    programs: dict[str, str] | None = None
    program_said: dict[str, str | None] | None = None
    #: what the idle watcher is told to stop ({"action", "pod_id", "idle_seconds"}) and its proof that a
    #: pod can stop itself ({"self_stop": ...}); None when the host was not read
    idle: dict[str, Any] | None = None
    #: the server's failed start's log lines while its supervisor does not say it runs (the cause is read from them)
    server_tail: list[str] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def flag(self, name: str) -> str | None:
        """The value of ``--name`` on the running server's command line, else None."""
        args = self.serve_args
        for index, arg in enumerate(args):
            if arg == name and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None


def describe_config(settings: Settings, leaks: bool = False) -> dict[str, Any]:
    paths = settings.paths
    router = settings.role == "router"
    written = managed_files(settings) + edge_files(settings) + supervision_files(settings)
    return {
        **server_config(settings),
        "venv": paths.venv,
        "record": paths.checkpoint_record,
        "log_file": paths.log_file,
        # every log podkit's programs write (vLLM or the router, Caddy, supervisord), with their rotated copies
        "logs": [
            paths.router_log if router else paths.log_file,
            paths.edge_log,
            paths.supervisord_log,
            paths.access_log,
        ],
        "access_log": paths.access_log,
        "scripts": sorted({f for f in written if f != paths.api_key}),
        # what Caddy writes (its CA, certificates, locks): the key must be in none of it
        "folders": [paths.edge_data],
        "leaks": leaks,
        "routes": leaks and not router,  # verify's edge check: what vLLM serves beside /v1
        **({"replicas_file": paths.replicas_file} if router else {}),
    }


def parse_describe(host: str, settings: Settings, output: str) -> ServerInfo:
    """A :class:`ServerInfo` from ``podctl describe``'s JSON line."""
    try:
        data = read_answer("describe", output)
    except PodctlError as exc:
        return ServerInfo(host, error=str(exc))
    args = data.get("serve_args") or []
    record = data.get("checkpoint") or {}
    # a hub checkpoint is served from its snapshot folder: name it by repo and revision
    from_hub = bool(args) and bool(record.get("snapshot")) and args[0] == record["snapshot"]
    info = ServerInfo(
        host,
        model=record.get("repo") if from_hub else (args[0] if args else None),
        served_model_name=settings.served_model_name,
        revision=record.get("revision") if from_hub else None,
        vllm_version=data.get("vllm_version"),
        serve_args=args,
        architectures=data.get("architectures") or [],
        model_type=data.get("model_type"),
        text_model_type=data.get("text_model_type"),
        running=bool(data.get("running")),
        leaks=data.get("leaks"),
        generation_config=data.get("generation_config"),
        listener=data.get("listener"),
        orphans=data.get("orphans") or [],
        vllm_listens=data.get("vllm_listens"),
        routes=data.get("routes"),
        router=data.get("router"),
        refused=data.get("refused") if isinstance(data.get("refused"), dict) else None,
        supervisor=data.get("supervisor"),
        supervisor_pid=data.get("supervisor_pid"),
        programs=data.get("programs"),
        program_said=data.get("program_said"),
        idle=data.get("idle") if isinstance(data.get("idle"), dict) else None,
        server_tail=data.get("server_tail") if isinstance(data.get("server_tail"), list) else None,
    )
    if not info.running:
        info.error = f"no vLLM server runs under {settings.supervisor} on this host"
    return info


def describe(host: str, settings: Settings, run: Run, leaks: bool = False) -> ServerInfo:
    """Ask ``host`` (one remote command through ``run``) what it serves; with ``leaks``, also where
    the API key shows outside its file (verify's checks). Never raises for an unreachable host."""
    try:
        result = run(podctl_command("describe", describe_config(settings, leaks)), 30)
    except RemoteError as exc:
        return ServerInfo(host, served_model_name=settings.served_model_name, error=str(exc))
    if result.status != 0:
        return ServerInfo(host, error=result.stderr.strip()[-300:] or f"exit status {result.status}")
    return parse_describe(host, settings, result.stdout)


def key_refusal(info: ServerInfo) -> str | None:
    """Why the API key must not be sent to the served port, or None when podkit's server holds it.

    Only the edge podkit's supervisor started may receive the key: a process that took
    the port meanwhile would be handed it, and would answer as if the server ran without auth.
    """
    where = info.listener
    if where is None:
        return f"cannot read {info.host} to see who holds the port ({info.error or 'no answer'}); the key was not sent"
    if where.get("podkit"):
        return None
    port = where.get("port")
    if where.get("error"):
        return f"{where['error']} on {info.host}; the key was not sent"
    if not where.get("held"):
        return (
            f"nothing listens on port {port} on {info.host}, so podkit's server is not serving: re-apply the "
            "deploy (the server log says why it stopped); the key was not sent"
        )
    return f"port {port} on {info.host} is held by {listener_holder(where)}, not by podkit's edge: stop it or change podkit_edge_port; the key was not sent"
