"""Hostile checkpoints for the tests: the sandbox's tiny model with one file changed the way a careless or
hostile publisher could change it (``tests/fixtures/hostile_checkpoints.json``, one case an entry).

A case changes the tiny model's files (``podkit.sandbox.tinymodel``) in one of these ways:

    set      {file: {field: value}}   fields of a JSON file set to a JSON value
    drop     {file: [field, ...]}     fields removed
    raw      {file: {field: text}}    fields set to text written as it is: NaN, Infinity, 1e400,
                                      which JSON has no way to write
    whole    {file: value}            the file is this JSON value (a list, an object of its own)
    header   {file: value}            a safetensors file whose header is this JSON value (no data)

``says``: what every refusal of the case holds (the file, the field, the value), whichever reader met it.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from pathlib import Path
from typing import Any

from podkit.sandbox.tinymodel import tiny_model_files

_MARK = "@@podkit-raw-{}@@"


def load(path: Path) -> list[dict[str, Any]]:
    """The cases in ``path``."""
    return json.loads(path.read_text())


def slug(case: dict[str, Any]) -> str:
    """The case as a hub repo name: ``acme/hostile-num-attention-heads-0``."""
    return "acme/hostile-" + re.sub(r"[^a-z0-9]+", "-", case["id"].lower()).strip("-")


def _json_file(data: Any, raw: dict[str, str]) -> bytes:
    data = dict(data) if isinstance(data, dict) else data
    for index, (field, _) in enumerate(raw.items()):
        data[field] = _MARK.format(index)
    text = json.dumps(data, indent=2)
    for index, (_, literal) in enumerate(raw.items()):
        text = text.replace(json.dumps(_MARK.format(index)), literal)
    return text.encode()


def header_file(header: Any) -> bytes:
    """A safetensors file holding ``header`` (any JSON value) and no tensor data."""
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


@functools.cache
def _tiny() -> dict[str, bytes]:
    return tiny_model_files()  # its weights take a while to draw: once a process


def files(case: dict[str, Any]) -> dict[str, bytes]:
    """The case's checkpoint: every file's bytes."""
    out = dict(_tiny())
    names = set(case.get("set", {})) | set(case.get("drop", {})) | set(case.get("raw", {}))
    for name in sorted(names):
        data = json.loads(out[name]) if name in out else {}
        data.update(case.get("set", {}).get(name, {}))
        for field in case.get("drop", {}).get(name, []):
            data.pop(field, None)
        out[name] = _json_file(data, case.get("raw", {}).get(name, {}))
    for name, value in case.get("whole", {}).items():
        out[name] = json.dumps(value, indent=2).encode()
    for name, value in case.get("header", {}).items():
        out[name] = header_file(value)
    return out


def write(folder: Path, case: dict[str, Any]) -> Path:
    """The case's checkpoint written into ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files(case).items():
        (folder / name).write_bytes(data)
    return folder
