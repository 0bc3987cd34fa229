#!/usr/bin/env bash
# The test command: set up everything, start the local Slurm cluster, lint, run pytest, and stop the
# cluster even when a test fails. Extra arguments go to pytest (e.g. scripts/test.sh -k gate).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

started=${SECONDS}
# the total, setup and cluster included (CI's budget is 12 minutes on two cores), even when a test fails
finish() {
    local rc=$?
    scripts/slurm_local.sh down || true
    echo "test.sh: total $((SECONDS - started)) s wall (setup, cluster, lint, pytest), exit ${rc}"
    exit "${rc}"
}
scripts/setup.sh
trap finish EXIT
scripts/slurm_local.sh up
eval "$(scripts/slurm_local.sh env)"
export MUJOCO_GL=${MUJOCO_GL:-egl}

.venv/bin/ruff check pipeline tests benchmarks
# two workers, split by scope (tests/xdist_scope.py; `-n 0` after it runs in one process); every test's
# time kept for benchmarks/suite_durations.py (by file and by kind)
.venv/bin/python -m pytest -q -ra --durations=15 -n 2 --dist loadgroup --junitxml=build/test-junit.xml "$@"
