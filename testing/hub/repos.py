"""The local hub's repo model: a folder is a repo, its files carry git blob ids and (LFS) sha256s.

See :mod:`testing.hub` for the layout served and how ids are derived.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from podkit.plan.checkpoints import safetensors_dtypes

LFS_THRESHOLD = 10 * 1024 * 1024
LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".gguf",
    ".h5",
    ".msgpack",
    ".onnx",
    ".npz",
    ".tar",
    ".zip",
)
HUB_JSON = ".hub.json"
DEFAULT_BRANCH = "main"
SHA_RE = re.compile(r"[0-9a-f]{40}")
_MAX_SAFETENSORS_HEADER = 100_000_000
# Bytes per element of each safetensors dtype (only used by the test helpers, kept here as the reference).
SAFETENSORS_DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}


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


class HashCache:
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


def git_blob_sha1(data_iter, size: int) -> str:
    h = hashlib.sha1(b"blob %d\0" % size)
    for chunk in data_iter:
        h.update(chunk)
    return h.hexdigest()


def iter_file(path: str, chunk: int = 1024 * 1024):
    with open(path, "rb") as f:
        while data := f.read(chunk):
            yield data


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(path: str, size: int) -> bool:
    return size >= LFS_THRESHOLD or path.lower().endswith(LFS_SUFFIXES)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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
