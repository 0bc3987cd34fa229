#!/usr/bin/env bash
# Set up everything on a fresh Debian 12 machine: system packages (as root), a venv in .venv,
# torch 2.13.0 first (the CPU wheel on this disk; a bare `torch` would pull a multi-GB CUDA build),
# then the project with its test extra. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ${EUID} -eq 0 ]]; then
    scripts/install_system.sh
else
    echo "setup: not root, skipping system packages (scripts/install_system.sh needs root)" >&2
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    "${PYTHON}" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    pip install "torch==2.13.0"
fi
if ! .venv/bin/python -c "import pipeline, pytest, jsonschema, xdist" 2>/dev/null \
        || [[ pyproject.toml -nt .venv/.preflight-installed ]]; then
    pip install -e ".[test]"
    touch .venv/.preflight-installed
fi
# this checkout's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (this machine and its CI
# copy) no import writes it, so every launch and job process compiled the package from source again
# (importing the launcher, a job and the contract stage: 1.8 s -> 1.0 s); a stale file is only ignored
.venv/bin/python -m compileall -q -j 0 pipeline tests benchmarks > /dev/null
echo "setup: ready (.venv/bin/python -m pipeline.launch --help)"
