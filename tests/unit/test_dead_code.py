"""No dead code that vulture is sure of (80% confidence and up: unused imports, variables,
arguments, unreachable code) in the product, its test doubles or its tests. Lower confidences are
mostly names called by a framework (pyinfra's facts, click's commands, the docs hook), so they are
not checked here; ``.venv/bin/vulture --min-confidence 60 podkit`` lists them."""

import vulture

from tests.helpers import ROOT

CHECKED = ("podkit", "podkit_cli", "operations", "roles", "deploy.py", "cli.py", "testing", "tests", "benchmarks")
CONFIDENCE = 80


def test_vulture_finds_no_dead_code():
    found = vulture.Vulture()
    found.scavenge([str(ROOT / name) for name in CHECKED], exclude=["*/podkit/client/eval/tasks/*"])
    unused = [item.get_report() for item in found.get_unused_code(min_confidence=CONFIDENCE)]
    assert unused == [], "remove it, or rename an argument a caller needs as _name:\n" + "\n".join(unused)
