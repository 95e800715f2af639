"""The local hub's server: where repos are read from, the token, the request log, the lifecycle."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from testing.hub.handler import HubHandler
from testing.hub.repos import (
    HUB_JSON,
    SHA_RE,
    HashCache,
    HubFile,
    HubRepo,
    git_blob_sha1,
    is_lfs,
    iter_file,
    lfs_pointer,
    read_safetensors_header,
    safetensors_parameter_counts,
)


class LocalHub:
    """A Hub-protocol HTTP server over ``root/<org>/<name>/`` folders (see :mod:`testing.hub`)."""

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
        self._hashes = HashCache()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()  # set on stop: in-flight bodies end short

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
        self.stopping.clear()
        httpd = ThreadingHTTPServer((self.host, self.port), HubHandler)
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
        self.stopping.set()
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

        def _terminate(_signum, _frame):  # shutdown() waits for serve_forever: never call it from its thread
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
            self.stopping.set()
            httpd.server_close()
            self._httpd = None

    def __enter__(self) -> LocalHub:
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
            if not isinstance(revision, str) or not SHA_RE.fullmatch(revision):
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
        if is_lfs(rel, st.st_size):

            def compute():
                h = hashlib.sha256()
                for chunk in iter_file(abspath):
                    h.update(chunk)
                sha256 = h.hexdigest()
                pointer = lfs_pointer(sha256, st.st_size)
                return sha256, git_blob_sha1([pointer], len(pointer)), len(pointer)

            sha256, blob_id, pointer_size = self._hashes.get(("lfs",) + key, compute)
            return HubFile(rel, abspath, st.st_size, blob_id, sha256, pointer_size)
        blob_id = self._hashes.get(("git",) + key, lambda: git_blob_sha1(iter_file(abspath), st.st_size))
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
            try:  # a hostile repo's index is served as it is, and counted as none here
                weight_map = json.loads(Path(index.abspath).read_text()).get("weight_map", {})
                names = sorted(set(name for name in weight_map.values() if isinstance(name, str)))
            except (OSError, ValueError, AttributeError, TypeError):
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
            try:  # a hostile header is served as it is (the client reads it), and counted as none here
                parameters = safetensors_parameter_counts(self._safetensors_header(f))
            except (OSError, ValueError, LookupError):
                continue
            found = True
            for dtype, n in parameters.items():
                counts[dtype] = counts.get(dtype, 0) + n
        if not found:
            return None
        return {"parameters": counts, "total": sum(counts.values())}

    # ---- auth

    def authorized(self, authorization: str | None) -> bool:
        """True for a bearer token this hub accepts (any, when it was given none)."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return False
        given = authorization[7:].strip()
        if not given:
            return False
        return self.token is None or given == self.token

    def record(self, method: str, raw_path: str, headers) -> dict:
        """Log one request; the handler fills in the returned entry's ``status``."""
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
