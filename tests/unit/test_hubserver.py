"""testing.hub.LocalHub against the real huggingface_hub client (no network beyond 127.0.0.1)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from testing.hub import LFS_THRESHOLD, LocalHub
from testing.hub_repos import (
    BF16_COUNTS,
    FP8_COUNTS,
    model_files,
    safetensors_bytes,
    write_repo,
)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_local_test_token"
PINNED = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def hf_env(monkeypatch, tmp_path):
    """Isolate the client: no stored/env token, telemetry off, online.

    ``constants`` is read at import, so the flags are patched there rather than in the environment.
    Telemetry off matters: otherwise the first request of a process also fetches
    ``https://huggingface.co/api/agent-harnesses`` (to fill the user agent), whatever ``endpoint=`` says.
    """
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "hf-home"
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))


@pytest.fixture
def hub_root(tmp_path) -> Path:
    root = tmp_path / "hub"
    write_repo(root, "org/tiny", model_files())
    write_repo(root, "org/tiny-fp8", model_files(fp8=True) | {"extra/notes/a.txt": "a\n", "extra/b.txt": "bb\n"})
    write_repo(root, "org/gated", model_files(), {"gated": True})
    write_repo(root, "org/private", model_files(), {"private": True})
    write_repo(root, "org/pinned", model_files(), {"revision": PINNED})
    return root


@pytest.fixture
def hub(hub_root):
    server = LocalHub(hub_root, token=TOKEN)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def api(hub) -> HfApi:
    return HfApi(endpoint=hub.url, token=False)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def raw_request(url: str, method: str, path: str, headers: dict | None = None):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


# --------------------------------------------------------------------------- metadata


def test_model_info_with_files_metadata(api, hub_root):
    info = api.model_info("org/tiny-fp8", files_metadata=True)
    folder = hub_root / "org/tiny-fp8"
    assert info.id == "org/tiny-fp8"
    assert len(info.sha) == 40
    assert info.gated is False and info.private is False
    by_name = {s.rfilename: s for s in info.siblings}
    assert set(by_name) == {
        "config.json",
        "tokenizer_config.json",
        "model.safetensors",
        "README.md",
        "extra/notes/a.txt",
        "extra/b.txt",
    }
    for name, sib in by_name.items():
        data = (folder / name).read_bytes()
        assert sib.size == len(data)
        if name.endswith(".safetensors"):
            assert sib.lfs is not None
            assert sib.lfs.sha256 == hashlib.sha256(data).hexdigest()
            assert sib.lfs.size == len(data)
            assert sib.lfs.pointer_size > 0
        else:
            assert sib.lfs is None
            assert sib.blob_id == git_blob_sha1(data)
    # trimmed config, as on the Hub: no quantization_config
    assert info.config["architectures"] == ["Qwen2ForCausalLM"]
    assert info.config["model_type"] == "qwen2"
    assert "quantization_config" not in info.config
    assert info.safetensors.parameters == FP8_COUNTS
    assert info.safetensors.total == sum(FP8_COUNTS.values())
    assert {"safetensors", "transformers", "qwen2"} <= set(info.tags)
    assert info.last_modified is not None


def test_model_info_without_blobs_lists_names_only(api):
    info = api.model_info("org/tiny")
    assert all(s.size is None and s.lfs is None for s in info.siblings)
    assert info.safetensors.parameters == BF16_COUNTS


def test_model_info_at_revision_and_expand(api):
    sha = api.model_info("org/tiny").sha
    assert api.model_info("org/tiny", revision="main").sha == sha
    assert api.model_info("org/tiny", revision=sha).sha == sha
    info = api.model_info("org/tiny", expand=["sha", "gated"])
    assert info.sha == sha and info.siblings is None


def test_sha_is_stable_content_addressed_and_pinnable(hub_root, tmp_path):
    with LocalHub(hub_root) as a, LocalHub(hub_root) as b:
        sha_a = HfApi(endpoint=a.url, token=False).model_info("org/tiny").sha
        sha_b = HfApi(endpoint=b.url, token=False).model_info("org/tiny").sha
        # same files, same sha, whichever repo holds them
        assert sha_a == sha_b == HfApi(endpoint=a.url, token=False).model_info("org/gated").sha
        (hub_root / "org/tiny/README.md").write_text("changed\n")
        assert HfApi(endpoint=a.url, token=False).model_info("org/tiny").sha != sha_a
        pinned = HfApi(endpoint=a.url, token=False)
        assert pinned.model_info("org/pinned").sha == PINNED
        assert pinned.model_info("org/pinned", revision=PINNED).sha == PINNED


def test_list_repo_tree(api):
    top = {e.path: e for e in api.list_repo_tree("org/tiny-fp8")}
    assert set(top) == {"README.md", "config.json", "extra", "model.safetensors", "tokenizer_config.json"}
    assert type(top["extra"]).__name__ == "RepoFolder"
    assert top["model.safetensors"].lfs is not None

    files = {e.path: e for e in api.list_repo_tree("org/tiny-fp8", recursive=True)}
    assert {"extra/notes/a.txt", "extra/b.txt", "extra/notes"} <= set(files)
    assert files["extra/b.txt"].size == 3

    sub = [e.path for e in api.list_repo_tree("org/tiny-fp8", path_in_repo="extra")]
    assert sub == ["extra/b.txt", "extra/notes"]
    deep = [e.path for e in api.list_repo_tree("org/tiny-fp8", path_in_repo="extra", recursive=True)]
    assert deep == ["extra/b.txt", "extra/notes", "extra/notes/a.txt"]

    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("org/tiny-fp8", path_in_repo="nope"))


def test_get_paths_info(api):
    infos = {e.path: e for e in api.get_paths_info("org/tiny-fp8", ["config.json", "extra", "missing.bin"])}
    assert set(infos) == {"config.json", "extra"}
    assert infos["config.json"].size > 0
    assert type(infos["extra"]).__name__ == "RepoFolder"


@pytest.mark.parametrize("repo, counts", [("org/tiny", BF16_COUNTS), ("org/tiny-fp8", FP8_COUNTS)])
def test_get_safetensors_metadata_reads_headers_with_ranges(api, hub, repo, counts):
    hub.clear_log()
    meta = api.get_safetensors_metadata(repo)
    assert meta.sharded is False
    assert meta.parameter_count == counts
    # file_exists() is a HEAD, then one ranged GET for the header (the file is never downloaded whole)
    gets = [e for e in hub.request_log if e["method"] == "GET"]
    assert [(e["status"], e["range"]) for e in gets] == [(206, "bytes=0-100000")]


def test_sharded_safetensors(hub_root, tmp_path):
    shard1 = safetensors_bytes({"a": ("BF16", [8, 8])})
    shard2 = safetensors_bytes({"b": ("F8_E4M3", [4, 4]), "b_scale": ("F32", [1])})
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
            "b_scale": "model-00002-of-00002.safetensors",
        },
    }
    # a second copy of the weights, Mistral-style: the Hub's count follows the index, not every file
    consolidated = safetensors_bytes({"x": ("BF16", [100, 100])})
    write_repo(
        hub_root,
        "org/sharded",
        {
            "config.json": {"architectures": ["X"], "model_type": "x"},
            "model.safetensors.index.json": index,
            "model-00001-of-00002.safetensors": shard1,
            "model-00002-of-00002.safetensors": shard2,
            "consolidated.safetensors": consolidated,
        },
    )
    with LocalHub(hub_root) as hub:
        api = HfApi(endpoint=hub.url, token=False)
        meta = api.get_safetensors_metadata("org/sharded")
        assert meta.sharded is True
        assert meta.parameter_count == {"BF16": 64, "F8_E4M3": 16, "F32": 1}
        assert api.model_info("org/sharded").safetensors.parameters == {"BF16": 64, "F8_E4M3": 16, "F32": 1}


def test_large_file_is_lfs(hub_root, tmp_path):
    big = os.urandom(1024) * (LFS_THRESHOLD // 1024 + 1)
    write_repo(hub_root, "org/big", {"data.dat": big, "small.dat": b"x"})
    with LocalHub(hub_root) as hub:
        sibs = {
            s.rfilename: s
            for s in HfApi(endpoint=hub.url, token=False).model_info("org/big", files_metadata=True).siblings
        }
        assert sibs["data.dat"].lfs.sha256 == hashlib.sha256(big).hexdigest()
        assert sibs["small.dat"].lfs is None


# --------------------------------------------------------------------------- downloads


def test_hf_hub_download(hub, hub_root, tmp_path):
    cache = tmp_path / "cache"
    path = hf_hub_download("org/tiny", "model.safetensors", endpoint=hub.url, cache_dir=cache, token=False)
    data = (hub_root / "org/tiny/model.safetensors").read_bytes()
    assert Path(path).read_bytes() == data
    # blob named by the LFS sha256 (X-Linked-Etag); a small file's blob by its git sha1 (ETag)
    assert Path(path).resolve().name == hashlib.sha256(data).hexdigest()
    cfg = hf_hub_download("org/tiny", "config.json", endpoint=hub.url, cache_dir=cache, token=False)
    assert Path(cfg).resolve().name == git_blob_sha1((hub_root / "org/tiny/config.json").read_bytes())
    assert [m for m, _ in hub.requests] == ["HEAD", "GET", "HEAD", "GET"]


def test_snapshot_download_then_offline_makes_no_request(hub, monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    patterns = ["*.json", "*.safetensors"]
    folder = Path(
        snapshot_download("org/tiny-fp8", endpoint=hub.url, cache_dir=cache, token=False, allow_patterns=patterns)
    )
    got = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert got == ["config.json", "model.safetensors", "tokenizer_config.json"]
    sha = HfApi(endpoint=hub.url, token=False).model_info("org/tiny-fp8").sha
    assert folder.name == sha
    # order: repo info at the branch, tree at the commit, then HEAD+GET per file at the commit
    assert hub.requests[0] == ("GET", "/api/models/org/tiny-fp8/revision/main")
    assert hub.requests[1] == ("GET", f"/api/models/org/tiny-fp8/tree/{sha}")
    assert sorted(p for m, p in hub.requests if m == "HEAD") == [f"/org/tiny-fp8/resolve/{sha}/{name}" for name in got]

    hub.clear_log()
    assert snapshot_download(
        "org/tiny-fp8", cache_dir=cache, endpoint=hub.url, token=False, allow_patterns=patterns, local_files_only=True
    ) == str(folder)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert snapshot_download(
        "org/tiny-fp8", cache_dir=cache, endpoint=hub.url, token=False, allow_patterns=patterns
    ) == str(folder)
    assert hf_hub_download("org/tiny-fp8", "config.json", cache_dir=cache, endpoint=hub.url, token=False)
    assert hub.requests == []


def test_second_online_snapshot_only_asks_for_the_commit(hub, tmp_path):
    kwargs = dict(endpoint=hub.url, cache_dir=tmp_path / "cache", token=False, allow_patterns=["*.json"])
    snapshot_download("org/tiny", **kwargs)
    hub.clear_log()
    snapshot_download("org/tiny", **kwargs)
    # the tree listing is cached on disk (trees/<sha>.json) and every file is there: one request
    assert hub.requests == [("GET", "/api/models/org/tiny/revision/main")]


# --------------------------------------------------------------------------- errors and access


def test_unknown_repo(api, hub, tmp_path):
    with pytest.raises(RepositoryNotFoundError) as e:
        api.model_info("org/nope")
    assert not isinstance(e.value, GatedRepoError)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/nope", "config.json", endpoint=hub.url, cache_dir=tmp_path / "c", token=False)
    with pytest.raises(RepositoryNotFoundError):
        list(api.list_repo_tree("nope/nope"))


def test_unknown_revision(api, hub, tmp_path):
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/tiny", revision="v9")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(
            "org/tiny", "config.json", revision="v9", endpoint=hub.url, cache_dir=tmp_path / "c", token=False
        )
    with pytest.raises(RevisionNotFoundError):
        snapshot_download("org/tiny", revision="f" * 40, endpoint=hub.url, cache_dir=tmp_path / "c", token=False)


def test_unknown_entry(api, hub, tmp_path):
    cache = tmp_path / "c"
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("org/tiny", "nope.json", endpoint=hub.url, cache_dir=cache, token=False)
    assert api.file_exists("org/tiny", "nope.json") is False
    assert api.file_exists("org/tiny", "config.json") is True
    # the client caches the miss under .no_exist/<commit> thanks to X-Repo-Commit on the 404
    sha = api.model_info("org/tiny").sha
    assert (cache / "models--org--tiny" / ".no_exist" / sha / "nope.json").exists()


def test_gated_repo(api, hub, tmp_path):
    cache = tmp_path / "c"
    # metadata stays public, as on the Hub
    info = api.model_info("org/gated", files_metadata=True)
    assert info.gated == "auto"
    assert list(api.list_repo_tree("org/gated"))
    with pytest.raises(GatedRepoError) as e:
        hf_hub_download("org/gated", "config.json", endpoint=hub.url, cache_dir=cache, token=False)
    assert e.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as e:
        hf_hub_download("org/gated", "config.json", endpoint=hub.url, cache_dir=cache, token="hf_wrong")
    assert e.value.response.status_code == 403
    with pytest.raises(GatedRepoError):
        snapshot_download("org/gated", endpoint=hub.url, cache_dir=cache, token=False)
    with pytest.raises(GatedRepoError):
        api.get_safetensors_metadata("org/gated")

    assert Path(hf_hub_download("org/gated", "config.json", endpoint=hub.url, cache_dir=cache, token=TOKEN)).is_file()
    authed = HfApi(endpoint=hub.url, token=TOKEN)
    assert authed.get_safetensors_metadata("org/gated").parameter_count == BF16_COUNTS
    folder = snapshot_download("org/gated", endpoint=hub.url, cache_dir=cache, token=TOKEN)
    assert (Path(folder) / "model.safetensors").is_file()


def test_gated_repo_with_env_token(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # read on every call (not at import)
    assert hf_hub_download("org/gated", "config.json", endpoint=hub.url, cache_dir=tmp_path / "c")


def test_private_repo(api, hub):
    with pytest.raises(RepositoryNotFoundError) as e:
        api.model_info("org/private")
    assert not isinstance(e.value, GatedRepoError)
    assert HfApi(endpoint=hub.url, token=TOKEN).model_info("org/private").private is True


def test_no_token_configured_accepts_any_bearer(hub_root, tmp_path):
    with LocalHub(hub_root) as open_hub:
        with pytest.raises(GatedRepoError):
            hf_hub_download("org/gated", "config.json", endpoint=open_hub.url, cache_dir=tmp_path / "c", token=False)
        assert hf_hub_download(
            "org/gated", "config.json", endpoint=open_hub.url, cache_dir=tmp_path / "c", token="anything"
        )


# --------------------------------------------------------------------------- raw protocol


def test_resolve_headers_and_ranges(hub, hub_root):
    data = (hub_root / "org/tiny/model.safetensors").read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    status, h, body = raw_request(hub.url, "HEAD", "/org/tiny/resolve/main/model.safetensors")
    assert status == 200 and body == b""
    assert h["etag"] == f'"{sha256}"'
    assert h["x-linked-etag"] == f'"{sha256}"'
    assert h["x-linked-size"] == str(len(data))
    assert h["content-length"] == str(len(data))
    assert h["accept-ranges"] == "bytes"
    assert len(h["x-repo-commit"]) == 40

    status, h, body = raw_request(hub.url, "GET", "/org/tiny/resolve/main/model.safetensors", {"Range": "bytes=8-15"})
    assert (status, body, h["content-range"]) == (206, data[8:16], f"bytes 8-15/{len(data)}")
    status, h, body = raw_request(hub.url, "GET", "/org/tiny/resolve/main/model.safetensors", {"Range": "bytes=-4"})
    assert (status, body) == (206, data[-4:])
    status, h, body = raw_request(
        hub.url, "GET", "/org/tiny/resolve/main/model.safetensors", {"Range": f"bytes={len(data) - 3}-"}
    )
    assert (status, body) == (206, data[-3:])
    status, h, _ = raw_request(
        hub.url, "GET", "/org/tiny/resolve/main/model.safetensors", {"Range": f"bytes={len(data)}-"}
    )
    assert status == 416 and h["content-range"] == f"bytes */{len(data)}"

    cfg = (hub_root / "org/tiny/config.json").read_bytes()
    status, h, body = raw_request(hub.url, "GET", "/org/tiny/resolve/main/config.json")
    assert (status, body) == (200, cfg)
    assert h["etag"] == f'"{git_blob_sha1(cfg)}"' and "x-linked-etag" not in h

    status, h, body = raw_request(hub.url, "GET", "/org/tiny/resolve/main/missing.txt")
    assert status == 404 and h["x-error-code"] == "EntryNotFound" and "x-repo-commit" in h
    assert "error" in json.loads(body)


def test_never_sends_xet_headers(hub, api, tmp_path):
    paths = [
        ("GET", "/api/models/org/tiny?blobs=true"),
        ("GET", "/api/models/org/tiny/tree/main?recursive=true"),
        ("HEAD", "/org/tiny/resolve/main/model.safetensors"),
        ("GET", "/org/tiny/resolve/main/model.safetensors"),
        ("HEAD", "/org/gated/resolve/main/model.safetensors"),
    ]
    for method, path in paths:
        _, headers, _ = raw_request(hub.url, method, path)
        assert not [k for k in headers if "xet" in k], (method, path, headers)
        assert "link" not in headers


def test_requests_are_recorded(hub, api):
    assert hub.requests == []
    api.model_info("org/tiny", files_metadata=True)
    assert hub.requests == [("GET", "/api/models/org/tiny")]
    assert hub.request_log[0]["query"] == "blobs=true" and hub.request_log[0]["status"] == 200


# --------------------------------------------------------------------------- slow mode, stop, command line


@pytest.mark.proc
def test_throttled_download_killed_midway_leaves_an_orphan(hub, hub_root, tmp_path):
    """The slow mode lets a test SIGKILL a download; with huggingface_hub 2.4.0 the next run starts over."""
    payload = os.urandom(400_000)
    write_repo(hub_root, "org/slow", {"weights.bin": payload})
    hub.bytes_per_second = 100_000
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "child-home"),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        env.pop(var, None)
    # The client writes the body in DOWNLOAD_CHUNK_SIZE (10 MiB) pieces: shrink it so that a small file
    # shows on disk partially (read at call time by http_get).
    code = textwrap.dedent(f"""
        from huggingface_hub import constants, hf_hub_download
        constants.DOWNLOAD_CHUNK_SIZE = 16 * 1024
        hf_hub_download("org/slow", "weights.bin", cache_dir={str(cache)!r})
    """)
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    blobs = cache / "models--org--slow" / "blobs"
    try:
        deadline = time.monotonic() + 30
        partial: list[Path] = []
        while time.monotonic() < deadline:
            partial = [p for p in blobs.glob("*.incomplete") if p.stat().st_size > 0] if blobs.is_dir() else []
            if partial:
                break
            assert child.poll() is None, "download finished or failed before it could be killed"
            time.sleep(0.05)
        assert partial, "no partial download appeared"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert 0 < partial[0].stat().st_size < len(payload)
    # with HF_ENDPOINT set, the client's user-agent code asks this hub for the agent-harness registry
    assert ("GET", "/api/agent-harnesses") in hub.requests

    hub.bytes_per_second = None
    hub.clear_log()
    path = hf_hub_download("org/slow", "weights.bin", cache_dir=cache, endpoint=hub.url, token=False)
    assert Path(path).read_bytes() == payload
    gets = [e for e in hub.request_log if e["method"] == "GET"]
    assert len(gets) == 1 and gets[0]["range"] is None  # no resume across processes
    assert partial[0].exists()  # the killed process's <etag>.<8 hex>.incomplete is left behind


def test_stop_cuts_off_a_throttled_download(hub_root):
    write_repo(hub_root, "org/slow", {"weights.bin": bytes(1_000_000)})
    hub = LocalHub(hub_root, bytes_per_second=10_000)
    url = hub.start()
    result: dict = {}

    def fetch():
        try:
            result["status"] = raw_request(url, "GET", "/org/slow/resolve/main/weights.bin")[0]
        except Exception as e:  # noqa: BLE001 - a cut connection is the expected outcome
            result["error"] = e

    t = threading.Thread(target=fetch)
    t.start()
    time.sleep(0.3)
    started = time.monotonic()
    hub.stop()
    t.join(timeout=10)
    assert not t.is_alive()
    assert time.monotonic() - started < 5
    assert "error" in result  # short body: IncompleteRead


@pytest.mark.proc
def test_module_does_not_import_pyinfra_or_click():
    code = "import sys, testing.hub; sys.exit(bool({'pyinfra', 'click'} & set(sys.modules)))"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.proc
def test_command_line(hub_root):
    proc = subprocess.Popen(
        [sys.executable, "-m", "testing.hub", str(hub_root), "--port", "0", "--token", TOKEN],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        assert HfApi(endpoint=url, token=False).model_info("org/tiny").id == "org/tiny"
        status, _, _ = raw_request(
            url, "HEAD", "/org/gated/resolve/main/config.json", {"Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
