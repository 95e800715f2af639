#!/usr/bin/env bash
# Make this machine ready to run podkit and its tests: OpenSSH server (for the
# sandbox pod and the end-to-end tests) and the project's virtualenv at .venv.
# Idempotent; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# openssh-server: the sandbox pod's sshd; iproute2: the migration test's network
# namespaces (ip netns); sudo: the bare-metal test's non-root user; bubblewrap:
# eval's cage for model-written code (bwrap). apt runs beside the venv's pip install
# (one waits on the mirror while the other unpacks); both must succeed.
apt_pid=
if { ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; } || [ ! -x /usr/bin/sudo ] \
    || { ! command -v ip >/dev/null 2>&1 && [ ! -x /usr/sbin/ip ] && [ ! -x /sbin/ip ]; } \
    || ! command -v bwrap >/dev/null 2>&1; then
    echo "setup: installing openssh-server, iproute2, sudo and bubblewrap" >&2
    {
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openssh-server iproute2 sudo bubblewrap >/dev/null
    } &
    apt_pid=$!
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
if ! .venv/bin/python -c "import podkit, podkit_cli, pyinfra, click, openai, huggingface_hub, pytest, mkdocs, material" 2>/dev/null \
    || [ ! -x .venv/bin/podkit ] \
    || [ pyproject.toml -nt .venv/.podkit-installed ]; then
    echo "setup: installing podkit and its pinned dependencies into .venv" >&2
    # --no-compile: Python compiles what is imported when it is first imported, not all of every
    # package now (a quarter of the install's time on 2 cores)
    .venv/bin/python -m pip install -q --no-compile --disable-pip-version-check -e '.[test,docs]'
    # ... but what every pyinfra run and podkit command imports is compiled now (about 5 s): where
    # the environment sets PYTHONDONTWRITEBYTECODE, or under pyinfra (which turns writing off for
    # the deploy), each run would compile it again (a converged re-apply: 1.1 CPU-seconds, not 0.6)
    .venv/bin/python scripts/compile_imports.py
    touch .venv/.podkit-installed
fi

if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
    echo "setup: apt-get could not install openssh-server, iproute2, sudo and bubblewrap; run it by hand to see why" >&2
    exit 1
fi
