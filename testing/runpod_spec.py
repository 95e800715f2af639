"""The parts of RunPod's OpenAPI document for REST v2 that podkit uses, and checks against them.

``tests/fixtures/runpod/openapi-v2-subset.json`` is a copy of those parts of RunPod's own document
(``api-reference-v2/openapi.json`` in RunPod's public docs repository, August 2026): the operations
in :data:`OPERATIONS` and every component they reach, unchanged. The replay of RunPod's API
(``testing/runpod_api.py``) checks each request body against it (422 as RunPod answers an invalid
one) and the tests check each of its answers, so neither the replay nor podkit's requests can drift
from the API. Make the copy again from a newer document with:

    python -m testing.runpod_spec path/to/openapi.json

(standard library for the copy; the checks use ``jsonschema``, JSON Schema 2020-12 as OpenAPI 3.1 says).
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

SUBSET = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "runpod" / "openapi-v2-subset.json"
SOURCE = (
    "RunPod's OpenAPI 3.1 document for REST v2 (github.com/runpod/docs, api-reference-v2/openapi.json, "
    "August 2026): the operations podkit uses and every component they reference, unchanged"
)

#: (method, path template): every call podkit makes, and the ones the replay answers for it.
OPERATIONS = (
    ("get", "/v2/pods"),
    ("post", "/v2/pods"),
    ("get", "/v2/pods/{id}"),
    ("delete", "/v2/pods/{id}"),
    ("post", "/v2/pods/{id}/action"),
    ("get", "/v2/network-volumes"),
    ("post", "/v2/network-volumes"),
    ("get", "/v2/network-volumes/{id}"),
    ("get", "/v2/catalog/gpus"),
    ("get", "/v2/account/ssh-keys"),
    ("put", "/v2/account/ssh-keys"),
    ("get", "/v2/billing/pods"),
)


def make_subset(document: dict[str, Any]) -> dict[str, Any]:
    """The operations of :data:`OPERATIONS` and the components they reach, from the whole document."""
    paths: dict[str, Any] = {}
    for method, path in OPERATIONS:
        item = document["paths"][path]
        kept = paths.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})
        kept[method] = item[method]
    subset = {
        "openapi": document["openapi"],
        "info": {**document["info"], "x-podkit-source": SOURCE},
        "paths": paths,
        "components": {},
    }
    wanted = list(_refs(paths))
    while wanted:
        ref = wanted.pop()
        section, name = ref.split("/")[-2:]
        if name in subset["components"].setdefault(section, {}):
            continue
        part = document["components"][section][name]
        subset["components"][section][name] = part
        wanted += list(_refs(part))
    for section in subset["components"].values():
        section_sorted = dict(sorted(section.items()))
        section.clear()
        section.update(section_sorted)
    return subset


def _refs(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#/components/"):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def load() -> dict[str, Any]:
    return json.loads(SUBSET.read_text())


class Spec:
    """Checks of bodies against the subset: requests (what a client may send) and answers."""

    def __init__(self, document: dict[str, Any] | None = None) -> None:
        self.document = document or load()

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        """The path template and operation a concrete request path matches (KeyError: none)."""
        for template, item in self.document["paths"].items():
            pattern = "^" + re.sub(r"\\\{[^/]+\\\}", "[^/]+", re.escape(template)) + "$"
            if re.match(pattern, path) and method.lower() in item:
                return template, item[method.lower()]
        raise KeyError(f"{method.upper()} {path} is not among the operations podkit uses")

    def request_errors(self, method: str, path: str, body: Any) -> list[str]:
        """What is wrong with a request body, as RunPod's validation would name it ([] when valid)."""
        _, operation = self.operation(method, path)
        content = (operation.get("requestBody") or {}).get("content") or {}
        schema = (content.get("application/json") or {}).get("schema")
        if schema is None:
            return [] if body is None else ["$: this operation takes no body"]
        return self.errors(schema, body)

    def answer_errors(self, method: str, path: str, status: int, content_type: str | None, body: Any) -> list[str]:
        """What is wrong with an answer: its status, content type or body against the document."""
        template, operation = self.operation(method, path)
        responses = operation["responses"]
        response = responses.get(str(status)) or responses.get("default")
        if response is None:
            return [f"{method.upper()} {template} may not answer {status}"]
        response = self.resolve(response)
        content = response.get("content") or {}
        if not content:
            return [] if body is None else [f"{status} has no body in the document, got one"]
        media = (content_type or "").split(";")[0].strip()
        if media not in content:
            return [f"{status} answered as {media or 'no content type'}, the document says {sorted(content)}"]
        return self.errors(content[media]["schema"], body)

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            section, name = node["$ref"].split("/")[-2:]
            node = self.document["components"][section][name]
        return node

    def errors(self, schema: dict[str, Any], value: Any) -> list[str]:
        from jsonschema import Draft202012Validator

        root = {**copy.deepcopy(schema), "components": self.document["components"]}
        validator = Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)
        found = sorted(validator.iter_errors(value), key=lambda error: list(error.absolute_path))
        return [f"$.{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"[:300] for error in found]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m testing.runpod_spec OPENAPI.json", file=sys.stderr)
        return 2
    subset = make_subset(json.loads(Path(argv[1]).read_text()))
    SUBSET.write_text(json.dumps(subset, indent=1, ensure_ascii=False) + "\n")
    print(f"{SUBSET}: {len(subset['paths'])} paths, {sum(map(len, subset['components'].values()))} components")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
