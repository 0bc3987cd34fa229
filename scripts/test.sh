#!/usr/bin/env bash
# The test command: set up everything, start the local Slurm cluster, lint, run pytest, and stop the
# cluster even when a test fails. Extra arguments go to pytest (e.g. scripts/test.sh -k gate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
scripts/slurm_local.sh up
trap 'scripts/slurm_local.sh down' EXIT
eval "$(scripts/slurm_local.sh env)"
export MUJOCO_GL=${MUJOCO_GL:-egl}

.venv/bin/ruff check pipeline tests benchmarks
.venv/bin/python -m pytest -q -ra --durations=15 "$@"
