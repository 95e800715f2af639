"""A local server that speaks the Hugging Face Hub's HTTP protocol for model repos.

Why this exists: the tests and the local sandbox must exercise the real
``huggingface_hub`` client (``HfApi``, ``hf_hub_download``,
``snapshot_download``, ``get_safetensors_metadata``, the ``hf`` CLI) with no
access to huggingface.co.  Point the client at this server with
``endpoint=hub.start()`` (``HfApi(endpoint=...)``, ``hf_hub_download(...,
endpoint=...)``, ``snapshot_download(..., endpoint=...)``) or, for a child
process, ``HF_ENDPOINT=http://127.0.0.1:PORT`` (read at import time).

Standard library only; it must not import pyinfra or click.

Layout served (one plain folder per repo)::

    ROOT/<org>/<name>/...files...      # every file under it, recursively
    ROOT/<org>/<name>/.hub.json        # optional: {"gated": true,
                                       #   "private": true,
                                       #   "revision": "<40-hex commit sha>"}

Defaults: public, not gated, and a commit sha that is the sha1 of the sorted
``(path, git blob id)`` list, so it changes exactly when a file's name or
content does.  ``.hub.json`` and anything under ``.git/`` are not repo files.
Revisions accepted: ``main`` and the commit sha; anything else is
``RevisionNotFound``.

Like the real Hub:

* metadata (``/api/models/...``: info, tree, paths-info) of a *gated* repo is
  public; only file contents (``/resolve/``) need ``Authorization: Bearer
  <token>``: without one -> 401, with a wrong one -> 403, both with
  ``X-Error-Code: GatedRepo``.  With ``token=None`` any bearer token is
  accepted.  A *private* repo answers every route with 401 ``RepoNotFound``
  unless the token matches.
* files are "LFS" when they are >= 10 MiB or have a weights suffix
  (``.safetensors``, ``.bin``, ...): their ETag is the content's sha256 (also
  in ``X-Linked-Etag``, with ``X-Linked-Size``); other files' ETag is their
  git blob sha1.  Files are served directly (200/206), never through a
  redirect, and never with any ``X-Xet-*`` header or a ``Link: rel="xet-auth"``
  (either would switch the client to the Xet protocol).
* errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
  ``EntryNotFound``, ``GatedRepo``), ``X-Error-Message`` and a JSON body
  ``{"error": ...}``: the client maps errors by that header, not by status.

``requests`` records ``(method, path)`` (path without the query string, as
sent, percent-encoding kept) of every request received, so a test can assert
that no request reached the hub; ``request_log`` has the details (query,
status, Range, whether an Authorization header came).

``bytes_per_second`` throttles file bodies (``/resolve/`` GETs), so a test
can kill a download midway; it may be changed while the server runs.

Command line: ``python -m testing.hub ROOT [--host H] [--port N]
[--token T] [--bytes-per-second B]`` prints one line with the endpoint URL
and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mimetypes
import os
import re
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from podkit.plan.checkpoints import safetensors_dtypes

__all__ = ["LocalHub", "LFS_THRESHOLD", "LFS_SUFFIXES", "main"]

LFS_THRESHOLD = 10 * 1024 * 1024
LFS_SUFFIXES = (
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz", ".tar", ".zip",
)
HUB_JSON = ".hub.json"
DEFAULT_BRANCH = "main"
_SHA_RE = re.compile(r"[0-9a-f]{40}")
_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)
_MAX_SAFETENSORS_HEADER = 100_000_000
_CHUNK = 64 * 1024
# Bytes per element of each safetensors dtype (only used by the test helpers, kept here as the reference).
SAFETENSORS_DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


# --------------------------------------------------------------------------- repo model


@dataclass(frozen=True)
class HubFile:
    path: str  # repo-relative, "/"-separated
    abspath: str
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files)
    lfs_sha256: str | None  # content sha256 when the file is LFS
    pointer_size: int | None

    @property
    def etag(self) -> str:
        return self.lfs_sha256 or self.blob_id

    def tree_entry(self) -> dict:
        entry: dict = {"type": "file", "oid": self.blob_id, "size": self.size, "path": self.path}
        if self.lfs_sha256 is not None:
            entry["lfs"] = {"oid": self.lfs_sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry


@dataclass
class HubRepo:
    repo_id: str
    folder: Path
    sha: str
    gated: bool
    private: bool
    files: dict[str, HubFile]
    last_modified: float
    created: float
    extra_tags: list[str] = field(default_factory=list)

    def resolve_revision(self, revision: str) -> str | None:
        return self.sha if revision in (DEFAULT_BRANCH, self.sha) else None

    def directories(self) -> set[str]:
        dirs: set[str] = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        return dirs


class _HashCache:
    """Content hashes keyed by (path, size, mtime): big weight files are hashed once per change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[tuple, object] = {}

    def get(self, key: tuple, compute):
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = compute()
        with self._lock:
            self._cache[key] = value
        return value


def _git_blob_sha1(data_iter, size: int) -> str:
    h = hashlib.sha1(b"blob %d\0" % size)
    for chunk in data_iter:
        h.update(chunk)
    return h.hexdigest()


def _iter_file(path: str, chunk: int = 1024 * 1024):
    with open(path, "rb") as f:
        while data := f.read(chunk):
            yield data


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _is_lfs(path: str, size: int) -> bool:
    return size >= LFS_THRESHOLD or path.lower().endswith(LFS_SUFFIXES)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def read_safetensors_header(path: str | os.PathLike) -> dict:
    """The JSON header of a local safetensors file (``__metadata__`` included)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path}: too small to be a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path}: safetensors header too big ({n} bytes)")
        data = f.read(n)
    if len(data) != n:
        raise ValueError(f"{path}: truncated safetensors header")
    return json.loads(data)


safetensors_parameter_counts = safetensors_dtypes


# --------------------------------------------------------------------------- server


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class LocalHub:
    """A Hub-protocol HTTP server over ``root/<org>/<name>/`` folders (see the module docstring)."""

    def __init__(
        self,
        root: str | os.PathLike,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        bytes_per_second: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port
        self.token = token
        self.bytes_per_second = bytes_per_second
        self.requests: list[tuple[str, str]] = []
        self.request_log: list[dict] = []
        self._log_lock = threading.Lock()
        self._hashes = _HashCache()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # ---- lifecycle

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("LocalHub is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def _bind(self) -> None:
        if self._httpd is not None:
            raise RuntimeError("LocalHub is already started")
        self._stopping.clear()
        httpd = ThreadingHTTPServer((self.host, self.port), _Handler)
        httpd.daemon_threads = True
        httpd.hub = self  # type: ignore[attr-defined]
        self._httpd = httpd

    def start(self) -> str:
        """Serve in a background thread; return the endpoint URL ``http://HOST:PORT``."""
        self._bind()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="podkit-hubserver", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving; in-flight (throttled) downloads are cut off."""
        self._stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def serve_forever_in_foreground(self, ready=None) -> None:
        """Serve in this thread until SIGTERM/SIGINT (for ``python -m testing.hub``).

        ``ready(url)`` is called once the socket is bound (with ``port=0`` that is when the port is known).
        """
        self._bind()
        httpd = self._httpd

        def _terminate(signum, frame):  # shutdown() waits for serve_forever: never call it from its thread
            threading.Thread(target=httpd.shutdown, daemon=True).start()

        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            if ready is not None:
                ready(self.url)
            httpd.serve_forever(poll_interval=0.05)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            self._stopping.set()
            httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "LocalHub":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def clear_log(self) -> None:
        with self._log_lock:
            self.requests.clear()
            self.request_log.clear()

    # ---- repos

    def load_repo(self, repo_id: str) -> HubRepo | None:
        """Scan ``root/<repo_id>``; None when it is not a repo folder."""
        parts = repo_id.split("/")
        if len(parts) != 2 or any(not p or p in (".", "..") or p.startswith(".") for p in parts):
            return None
        folder = self.root / parts[0] / parts[1]
        if not folder.is_dir():
            return None
        options: dict = {}
        hub_json = folder / HUB_JSON
        if hub_json.is_file():
            options = json.loads(hub_json.read_text() or "{}")
        files: dict[str, HubFile] = {}
        mtimes: list[float] = []
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d != ".git")
            for filename in sorted(filenames):
                abspath = os.path.join(dirpath, filename)
                rel = os.path.relpath(abspath, folder).replace(os.sep, "/")
                if rel == HUB_JSON or not os.path.isfile(abspath):
                    continue
                st = os.stat(abspath)
                mtimes.append(st.st_mtime)
                files[rel] = self._hub_file(rel, abspath, st)
        revision = options.get("revision")
        if revision is not None:
            if not isinstance(revision, str) or not _SHA_RE.fullmatch(revision):
                raise ValueError(f"{hub_json}: 'revision' must be a 40-hex commit sha, got {revision!r}")
            sha = revision
        else:
            h = hashlib.sha1()
            for rel in sorted(files):
                h.update(f"{rel}\0{files[rel].blob_id}\n".encode())
            sha = h.hexdigest()
        st_folder = folder.stat()
        return HubRepo(
            repo_id=repo_id,
            folder=folder,
            sha=sha,
            gated=bool(options.get("gated", False)),
            private=bool(options.get("private", False)),
            files=files,
            last_modified=max(mtimes, default=st_folder.st_mtime),
            created=min(mtimes, default=st_folder.st_mtime),
            extra_tags=list(options.get("tags", [])),
        )

    def _hub_file(self, rel: str, abspath: str, st: os.stat_result) -> HubFile:
        key = (abspath, st.st_size, st.st_mtime_ns)
        if _is_lfs(rel, st.st_size):
            def compute():
                h = hashlib.sha256()
                for chunk in _iter_file(abspath):
                    h.update(chunk)
                sha256 = h.hexdigest()
                pointer = _lfs_pointer(sha256, st.st_size)
                return sha256, _git_blob_sha1([pointer], len(pointer)), len(pointer)

            sha256, blob_id, pointer_size = self._hashes.get(("lfs",) + key, compute)
            return HubFile(rel, abspath, st.st_size, blob_id, sha256, pointer_size)
        blob_id = self._hashes.get(("git",) + key, lambda: _git_blob_sha1(_iter_file(abspath), st.st_size))
        return HubFile(rel, abspath, st.st_size, blob_id, None, None)

    def _safetensors_header(self, f: HubFile) -> dict:
        st = os.stat(f.abspath)
        return self._hashes.get(
            ("st", f.abspath, st.st_size, st.st_mtime_ns), lambda: read_safetensors_header(f.abspath)
        )

    def safetensors_info(self, repo: HubRepo) -> dict | None:
        """``{"parameters": {dtype: count}, "total": n}`` like the Hub's ``safetensors`` field.

        From the shards named by ``model.safetensors.index.json`` when there is one, else from
        ``model.safetensors``, else from every top-level ``*.safetensors`` file; None without any.
        """
        names: list[str] = []
        index = repo.files.get("model.safetensors.index.json")
        if index is not None:
            try:
                weight_map = json.loads(Path(index.abspath).read_text()).get("weight_map", {})
                names = sorted(set(weight_map.values()))
            except (OSError, ValueError):
                names = []
        if not names and "model.safetensors" in repo.files:
            names = ["model.safetensors"]
        if not names:
            names = sorted(p for p in repo.files if "/" not in p and p.endswith(".safetensors"))
        counts: dict[str, int] = {}
        found = False
        for name in names:
            f = repo.files.get(name)
            if f is None:
                continue
            try:
                header = self._safetensors_header(f)
            except (OSError, ValueError):
                continue
            found = True
            for dtype, n in safetensors_parameter_counts(header).items():
                counts[dtype] = counts.get(dtype, 0) + n
        if not found:
            return None
        return {"parameters": counts, "total": sum(counts.values())}

    # ---- auth

    def _authorized(self, authorization: str | None) -> bool:
        if not authorization or not authorization.lower().startswith("bearer "):
            return False
        given = authorization[7:].strip()
        if not given:
            return False
        return self.token is None or given == self.token

    def _record(self, method: str, raw_path: str, headers) -> dict:
        split = urlsplit(raw_path)
        entry = {
            "method": method,
            "path": split.path,
            "query": split.query,
            "status": None,
            "range": headers.get("Range"),
            "authorization": headers.get("Authorization") is not None,
        }
        with self._log_lock:
            self.requests.append((method, split.path))
            self.request_log.append(entry)
        return entry


# --------------------------------------------------------------------------- request handling


def _truthy(values: list[str] | None) -> bool:
    return bool(values) and values[-1].lower() in ("1", "true", "yes")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "podkit-hubserver"
    sys_version = ""

    @property
    def hub(self) -> LocalHub:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format, *args):  # noqa: A002 - quiet: the hub keeps its own request log
        pass

    def send_response(self, code, message=None):
        if getattr(self, "_entry", None) is not None:
            self._entry["status"] = code
        super().send_response(code, message)

    # ---- dispatch

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        self._entry = self.hub._record(method, self.path, self.headers)
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)
        split = urlsplit(self.path)
        query = parse_qs(split.query, keep_blank_values=True)
        segments = split.path.split("/")[1:]  # raw (still percent-encoded) segments
        try:
            self._route(method, segments, query, body)
        except _HubError as e:
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - a bug or a bad .hub.json must answer, not hang the client
            self._send_error(_HubError(500, None, f"{type(e).__name__}: {e}"))

    def _route(self, method: str, seg: list[str], query: dict, body: bytes) -> None:
        if seg[:2] == ["api", "agent-harnesses"] and len(seg) == 2 and method == "GET":
            # fetched by huggingface_hub's user-agent code from {HF_ENDPOINT}/api/agent-harnesses
            return self._send_json({"standardEnvVars": [], "harnesses": {}})
        if len(seg) >= 4 and seg[0] == "api" and seg[1] == "models":
            repo_id = f"{unquote(seg[2])}/{unquote(seg[3])}"
            rest = seg[4:]
            if not rest and method == "GET":
                return self._model_info(repo_id, DEFAULT_BRANCH, query)
            if len(rest) == 2 and rest[0] == "revision" and method == "GET":
                return self._model_info(repo_id, unquote(rest[1]), query)
            if len(rest) >= 2 and rest[0] == "tree" and method == "GET":
                path = unquote("/".join(rest[2:])).strip("/")
                return self._tree(repo_id, unquote(rest[1]), path, query)
            if len(rest) == 2 and rest[0] == "paths-info" and method == "POST":
                return self._paths_info(repo_id, unquote(rest[1]), body)
        elif len(seg) >= 5 and seg[2] == "resolve" and seg[0] != "api" and method in ("GET", "HEAD"):
            repo_id = f"{unquote(seg[0])}/{unquote(seg[1])}"
            return self._resolve(method, repo_id, unquote(seg[3]), unquote("/".join(seg[4:])))
        raise _HubError(404, None, "Not Found")

    # ---- repo / revision checks

    def _repo(self, repo_id: str) -> HubRepo:
        repo = self.hub.load_repo(repo_id)
        if repo is None:
            raise _HubError(404, "RepoNotFound", "Repository not found")
        if repo.private and not self.hub._authorized(self.headers.get("Authorization")):
            raise _HubError(401, "RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: HubRepo, revision: str) -> str:
        sha = repo.resolve_revision(revision)
        if sha is None:
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha

    # ---- routes

    def _model_info(self, repo_id: str, revision: str, query: dict) -> None:
        repo = self._repo(repo_id)
        sha = self._commit(repo, revision)
        blobs = _truthy(query.get("blobs"))
        siblings = []
        for f in repo.files.values():
            sib: dict = {"rfilename": f.path}
            if blobs:
                sib["size"] = f.size
                sib["blobId"] = f.blob_id
                if f.lfs_sha256 is not None:
                    sib["lfs"] = {"sha256": f.lfs_sha256, "size": f.size, "pointerSize": f.pointer_size}
            siblings.append(sib)
        config = self._trimmed_config(repo)
        tags = []
        if "config.json" in repo.files:
            tags.append("transformers")
        safetensors = self.hub.safetensors_info(repo)
        if safetensors is not None:
            tags.append("safetensors")
        if config.get("model_type"):
            tags.append(config["model_type"])
        tags += [t for t in repo.extra_tags if t not in tags]
        org = repo_id.split("/")[0]
        info = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": org,
            "sha": sha,
            "lastModified": _iso(repo.last_modified),
            "createdAt": _iso(repo.created),
            "private": repo.private,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers" if "config.json" in repo.files else None,
            "tags": tags,
            "config": config,
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(f.size for f in repo.files.values()),
        }
        if safetensors is not None:
            info["safetensors"] = safetensors
        expand = (query.get("expand") or []) + (query.get("expand[]") or [])
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        self._send_json(info)

    def _trimmed_config(self, repo: HubRepo) -> dict:
        config: dict = {}
        f = repo.files.get("config.json")
        if f is not None:
            try:
                full = json.loads(Path(f.abspath).read_text())
                for key in ("architectures", "model_type"):
                    if key in full:
                        config[key] = full[key]
            except (OSError, ValueError):
                pass
        f = repo.files.get("tokenizer_config.json")
        if f is not None:
            try:
                tok = json.loads(Path(f.abspath).read_text())
                trimmed = {
                    k: tok[k]
                    for k in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template")
                    if k in tok
                }
                if trimmed:
                    config["tokenizer_config"] = trimmed
            except (OSError, ValueError):
                pass
        return config

    def _dir_entry(self, repo: HubRepo, path: str) -> dict:
        prefix = path + "/"
        h = hashlib.sha1(b"tree\0")
        for p in sorted(repo.files):
            if p.startswith(prefix):
                h.update(f"{p}\0{repo.files[p].blob_id}\n".encode())
        return {"type": "directory", "oid": h.hexdigest(), "size": 0, "path": path}

    def _with_commit(self, entry: dict, repo: HubRepo, sha: str) -> dict:
        entry["lastCommit"] = {"id": sha, "title": "Local hub snapshot", "date": _iso(repo.last_modified)}
        return entry

    def _tree(self, repo_id: str, revision: str, path: str, query: dict) -> None:
        repo = self._repo(repo_id)
        sha = self._commit(repo, revision)
        dirs = repo.directories()
        if path and path not in dirs:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"",
                            {"X-Repo-Commit": sha})
        recursive = _truthy(query.get("recursive"))
        expand = _truthy(query.get("expand"))
        prefix = path + "/" if path else ""
        entries: list[dict] = []
        for d in sorted(dirs):
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix):]):
                entries.append(self._dir_entry(repo, d))
        for p in sorted(repo.files):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix):]):
                entries.append(repo.files[p].tree_entry())
        entries.sort(key=lambda e: e["path"])
        if expand:
            entries = [self._with_commit(e, repo, sha) for e in entries]
        self._send_json(entries)

    def _paths_info(self, repo_id: str, revision: str, body: bytes) -> None:
        repo = self._repo(repo_id)
        sha = self._commit(repo, revision)
        ctype = (self.headers.get("Content-Type") or "").lower()
        if "json" in ctype:
            payload = json.loads(body or b"{}")
            paths = payload.get("paths", [])
            expand = bool(payload.get("expand", False))
        else:
            form = parse_qs(body.decode(), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = _truthy(form.get("expand"))
        if isinstance(paths, str):
            paths = [paths]
        dirs = repo.directories()
        entries = []
        for p in paths:
            p = p.strip("/")
            if p in repo.files:
                entries.append(repo.files[p].tree_entry())
            elif p in dirs:
                entries.append(self._dir_entry(repo, p))
        if expand:
            entries = [self._with_commit(e, repo, sha) for e in entries]
        self._send_json(entries)

    def _resolve(self, method: str, repo_id: str, revision: str, path: str) -> None:
        repo = self._repo(repo_id)
        if repo.gated:
            auth = self.headers.get("Authorization")
            if not self.hub._authorized(auth):
                status = 403 if auth else 401
                raise _HubError(
                    status,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                    "to access it. Please log in.",
                )
        sha = self._commit(repo, revision)
        f = repo.files.get(path)
        if f is None:
            raise _HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        size = f.size
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and "," not in rng:
            m = _RANGE_RE.fullmatch(rng)
            if m and (m.group(1) or m.group(2)):
                a, b = m.group(1), m.group(2)
                if a:
                    start = int(a)
                    end = min(int(b), size - 1) if b else size - 1
                else:  # suffix range: the last N bytes
                    start = max(size - int(b), 0)
                    end = size - 1
                if start >= size or start > end:
                    raise _HubError(416, None, "Range Not Satisfiable",
                                    {"Content-Range": f"bytes */{size}", "X-Repo-Commit": sha})
                status = 206
        length = end - start + 1 if size else 0
        headers = {
            "Content-Type": mimetypes.guess_type(f.path)[0] or "application/octet-stream",
            "Content-Length": str(length),
            "Accept-Ranges": "bytes",
            "ETag": f'"{f.etag}"',
            "X-Repo-Commit": sha,
            "Last-Modified": self.date_time_string(int(repo.last_modified)),
            "Cache-Control": "no-cache",
        }
        if f.lfs_sha256 is not None:
            headers["X-Linked-Etag"] = f'"{f.lfs_sha256}"'
            headers["X-Linked-Size"] = str(f.size)
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if method == "HEAD" or length == 0:
            return
        self._send_file(f.abspath, start, length)

    # ---- output

    def _send_file(self, abspath: str, start: int, length: int) -> None:
        hub = self.hub
        sent = 0
        t0 = time.monotonic()
        try:
            with open(abspath, "rb") as fh:
                fh.seek(start)
                while sent < length:
                    if hub._stopping.is_set():
                        break
                    bps = hub.bytes_per_second
                    chunk = _CHUNK if not bps else max(1, min(_CHUNK, bps // 20))
                    data = fh.read(min(chunk, length - sent))
                    if not data:
                        break
                    self.wfile.write(data)
                    sent += len(data)
                    if bps:
                        delay = t0 + sent / bps - time.monotonic()
                        if delay > 0:
                            hub._stopping.wait(delay)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if sent < length:  # cut short (stop, file shrank, client gone): the client must see a short body
            self.close_connection = True

    def _send_json(self, payload, status: int = 200, extra: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(self, e: _HubError) -> None:
        extra = dict(e.headers)
        if e.code:
            extra["X-Error-Code"] = e.code
        extra["X-Error-Message"] = e.message
        try:
            self._send_json({"error": e.message}, status=e.status, extra=extra)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testing.hub",
        description="Serve ROOT/<org>/<name>/ folders over the Hugging Face Hub HTTP protocol.",
    )
    parser.add_argument("root", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None, help="bearer token that opens gated/private repos")
    parser.add_argument("--bytes-per-second", type=int, default=None, help="throttle file bodies")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root}: not a directory")
    hub = LocalHub(args.root, host=args.host, port=args.port, token=args.token,
                   bytes_per_second=args.bytes_per_second)
    hub.serve_forever_in_foreground(
        ready=lambda url: print(f"testing.hub: serving {args.root} at {url}", flush=True)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
