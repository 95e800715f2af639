"""What podkit ships to a host as one program, written here as a package of parts.

A program that runs on the host (podctl, sent inline with each remote command) must be one
file of standard-library Python there; a reader here wants rooms of one job. So the program is
a package under ``podkit/remote/``: its ``__init__.py`` holds the table of contents and
``PARTS``, the order; each part is a module that imports the standard library and earlier parts.
:func:`program` puts them together. ``tests/unit/test_podctl_parts.py`` checks that what it
puts together runs each part's code as written.
"""

from __future__ import annotations

import ast
import functools
import importlib
from importlib import resources


@functools.cache
def program(package: str) -> str:
    """The one program ``package`` (``podkit.remote.podctl``) is written as parts of: the package's
    docstring (its table of contents), every part's standard-library imports, then each part's body
    in the package's ``PARTS`` order, without the parts' imports of each other (one program, one
    namespace).

    **Example:**

    .. code:: python

        source = program("podkit.remote.podctl")  # sent inline: python3 - probe '<json>'
    """
    folder = resources.files(package)
    head, _, _ = _part(folder.joinpath("__init__.py").read_text())
    imports: set[str] = set()
    bodies = []
    for part in importlib.import_module(package).PARTS:
        doc, needs, body = _part(folder.joinpath(f"{part}.py").read_text())
        imports |= needs
        title = doc.strip('"').strip().splitlines()[0]
        bodies.append(f"# --- {part}: {title}\n\n{body}")
    ordered = sorted(imports, key=lambda line: (line.startswith("from "), line))
    return head + "\n\n" + "\n".join(ordered) + "\n\n\n" + "\n\n\n".join(bodies)


def _part(text: str) -> tuple[str, set[str], str]:
    """A part's docstring (as written), its standard-library imports (one statement each), and the
    rest of it: its imports of the other parts dropped."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    doc, imports, dropped = "", set[str](), set[int]()
    for index, node in enumerate(tree.body):
        span = range(node.lineno - 1, node.end_lineno or node.lineno)
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            doc = "".join(lines[line] for line in span).strip()
        elif isinstance(node, ast.Import):
            imports |= {
                f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "") for alias in node.names
            }
        elif isinstance(node, ast.ImportFrom):
            if not (node.level or (node.module or "").startswith("podkit")):  # another part's: one namespace
                imports |= {
                    f"from {node.module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    for alias in node.names
                }
        else:
            continue
        dropped.update(span)
    body = "".join(line for number, line in enumerate(lines) if number not in dropped)
    return doc, imports, body.strip() + "\n"
