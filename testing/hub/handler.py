"""The local hub's request handler: the Hub's routes (model info, tree, paths-info, resolve), its
error headers, byte ranges and throttled file bodies."""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from testing.hub.repos import DEFAULT_BRANCH, HubRepo, iso

if TYPE_CHECKING:
    from testing.hub.server import LocalHub

_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)
_CHUNK = 64 * 1024


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def _truthy(values: list[str] | None) -> bool:
    return bool(values) and values[-1].lower() in ("1", "true", "yes")


class HubHandler(BaseHTTPRequestHandler):
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
        self._entry = self.hub.record(method, self.path, self.headers)
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
        if repo.private and not self.hub.authorized(self.headers.get("Authorization")):
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
            "lastModified": iso(repo.last_modified),
            "createdAt": iso(repo.created),
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
                    k: tok[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template") if k in tok
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
        entry["lastCommit"] = {"id": sha, "title": "Local hub snapshot", "date": iso(repo.last_modified)}
        return entry

    def _tree(self, repo_id: str, revision: str, path: str, query: dict) -> None:
        repo = self._repo(repo_id)
        sha = self._commit(repo, revision)
        dirs = repo.directories()
        if path and path not in dirs:
            raise _HubError(404, "EntryNotFound", f'{path} does not exist on "{revision}"', {"X-Repo-Commit": sha})
        recursive = _truthy(query.get("recursive"))
        expand = _truthy(query.get("expand"))
        prefix = path + "/" if path else ""
        entries: list[dict] = []
        for d in sorted(dirs):
            if d.startswith(prefix) and (recursive or "/" not in d[len(prefix) :]):
                entries.append(self._dir_entry(repo, d))
        for p in sorted(repo.files):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :]):
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
            if not self.hub.authorized(auth):
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
                    raise _HubError(
                        416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}", "X-Repo-Commit": sha}
                    )
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
                    if hub.stopping.is_set():
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
                            hub.stopping.wait(delay)
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
