"""Trust on first use, per pod: the project's own known_hosts for RunPod pods.

A migrated pod is a new pod (new id) at a new address with a new host key; a
stopped and restarted pod keeps its id but may come back at another address
and port. So keys are remembered **by pod id**, not by address, in
``<state dir>/host_keys.json``, and each run writes ``<state dir>/known_hosts``
for the pods' current addresses, which pyinfra then checks strictly.

For each pod, one SSH handshake (no login) reads the key it offers now:

- a pod id seen for the first time: its key is trusted and remembered;
- a known pod id offering its remembered key: nothing to say;
- a known pod id offering another key after its container restarted (the API's
  uptime says it started after the key was recorded, or its ``startedAt``
  differs from the one recorded with the key: a stop and a start since, however
  soon after the key was seen): trusted, with a note. A
  RunPod stop wipes the container disk, and the pod's start script makes new
  host keys; the authenticated API vouches for the restart, as it does for a
  migrated pod's new id;
- a known pod id offering another key without such a restart: left out of the
  run with one line that says why and how to accept it
  (``PODKIT_ACCEPT_NEW_HOST_KEY=<pod id>``);
- a pod that does not answer: kept, with its remembered key if any, so pyinfra
  reports it as unreachable and goes on with the other pods.

The state dir is ``.podkit/`` in the project (git-ignored) unless
``$PODKIT_STATE_DIR`` says otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko

from podkit import state_dir
from podkit.runpod.pods import PodHost, Skipped

ACCEPT_ENV = "PODKIT_ACCEPT_NEW_HOST_KEY"
#: seconds of slack between the API's uptime and our clock when dating a restart
RESTART_SLACK_S = 120


@dataclass(frozen=True)
class HostKey:
    type: str
    key: str  # base64, as in known_hosts

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(base64.b64decode(self.key)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def scan(address: str, port: int, timeout: float = 5.0) -> HostKey | str:
    """The host key ``address:port`` offers (an SSH handshake, no login), or why there is none."""
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        return f"cannot connect to {address}:{port} ({exc.strerror or exc})"
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return HostKey(key.get_name(), key.get_base64())
    except (paramiko.SSHException, OSError, EOFError) as exc:
        return f"no SSH handshake with {address}:{port} ({type(exc).__name__}: {exc})"
    finally:
        transport.close()


def accepted_from_env() -> set[str]:
    return {part.strip() for part in os.environ.get(ACCEPT_ENV, "").split(",") if part.strip()}


class PodKeys:
    """The remembered keys (``host_keys.json``) and the known_hosts file made from them."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory or state_dir())
        self.store = self.directory / "host_keys.json"
        self.known_hosts = self.directory / "known_hosts"

    def load(self) -> dict[str, dict]:
        try:
            return json.loads(self.store.read_text())
        except (OSError, ValueError):
            return {}

    def check(
        self, hosts: Iterable[PodHost], accept: set[str] | None = None, timeout: float = 5.0
    ) -> tuple[list[PodHost], list[Skipped], list[str]]:
        """Scan every pod at once; return the hosts to deploy to (with ``ssh_known_hosts_file``
        and strict checking set), the pods left out, and notes to print (one line each)."""
        hosts = list(hosts)
        accept = accepted_from_env() if accept is None else accept
        remembered = self.load()
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
            offered = list(pool.map(lambda h: scan(h.address[0], h.address[1], timeout=timeout), hosts))
        kept: list[PodHost] = []
        skipped: list[Skipped] = []
        notes: list[str] = []
        lines: list[str] = []
        for host, now in zip(hosts, offered):
            address, port = host.address
            known = remembered.get(host.pod_id) or {}  # {}: the pod's key was never recorded
            known_key = HostKey(known["type"], known["key"]) if known else None
            where = f"{address}:{port}"
            if isinstance(now, str):
                notes.append(f"pod {host.name} ({host.pod_id}): {now}; pyinfra will report it, the other pods go on")
                key = known_key
            elif known_key is None:
                notes.append(
                    f"pod {host.name} ({host.pod_id}): new pod, trusting its host key {now.fingerprint} (first use)"
                )
                key = now
            elif now != known_key:
                restarted = (
                    host.started_at is not None
                    and known.get("started_at") is not None
                    and host.started_at > known["started_at"] + RESTART_SLACK_S
                ) or (
                    # the API says the pod was stopped or started since the key was recorded: exact, where
                    # the uptime needs slack and misses a restart within RESTART_SLACK_S
                    host.status_change is not None
                    and known.get("status_change") is not None
                    and host.status_change != known["status_change"]
                )
                if restarted:
                    notes.append(
                        f"pod {host.name} ({host.pod_id}): restarted since its host key was recorded "
                        f"(RunPod API), and a restarted container makes a new key: trusting {now.fingerprint}"
                    )
                elif host.pod_id not in accept and "all" not in accept:
                    skipped.append(
                        Skipped(
                            host.name,
                            host.pod_id,
                            (
                                f"its SSH host key changed ({known_key.fingerprint} -> {now.fingerprint} at {where}) "
                                "although the RunPod API shows no restart since the key was recorded. "
                                f"If you know why (e.g. sshd's keys were regenerated), re-run with {ACCEPT_ENV}={host.pod_id}; "
                                "otherwise something else may answer at that address: do not connect"
                            ),
                        )
                    )
                    continue
                else:
                    notes.append(
                        f"pod {host.name} ({host.pod_id}): accepting its new host key {now.fingerprint} ({ACCEPT_ENV})"
                    )
                key = now
            else:
                key = now
            if key is not None:
                same_key = known_key == key
                remembered[host.pod_id] = {
                    "type": key.type,
                    "key": key.key,
                    "address": where,
                    "first_seen": known["first_seen"]
                    if same_key
                    else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    # dated only when the key was seen now: an unreachable pod's restart must
                    # not vouch for an older key
                    "started_at": (known or {}).get("started_at")
                    if isinstance(now, str) or host.started_at is None
                    else host.started_at,
                    "status_change": (known or {}).get("status_change")
                    if isinstance(now, str) or host.status_change is None
                    else host.status_change,
                }
                name = address if port == 22 else f"[{address}]:{port}"
                lines.append(f"{name} {key.type} {key.key}")
            host.data.update(ssh_known_hosts_file=str(self.known_hosts), ssh_strict_host_key_checking="yes")
            kept.append(host)
        self._write(remembered, lines)
        return kept, skipped, notes

    def _write(self, remembered: dict[str, dict], lines: list[str]) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for path, text in (
            (self.store, json.dumps(remembered, indent=2, sort_keys=True) + "\n"),
            (self.known_hosts, "".join(line + "\n" for line in lines)),
        ):
            temporary = path.with_name(path.name + ".tmp")
            temporary.write_text(text)
            temporary.chmod(0o600)
            temporary.replace(path)
