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
from pathlib import Path

from testing.hub.repos import LFS_SUFFIXES, LFS_THRESHOLD, SAFETENSORS_DTYPE_SIZES
from testing.hub.server import LocalHub

__all__ = ["LocalHub", "LFS_THRESHOLD", "LFS_SUFFIXES", "SAFETENSORS_DTYPE_SIZES", "main"]


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
    hub = LocalHub(args.root, host=args.host, port=args.port, token=args.token, bytes_per_second=args.bytes_per_second)
    hub.serve_forever_in_foreground(ready=lambda url: print(f"testing.hub: serving {args.root} at {url}", flush=True))
    return 0
