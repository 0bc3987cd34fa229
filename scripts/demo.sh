#!/usr/bin/env bash
# Set up everything, then run the main job on the embedded demo (data generated locally, no
# downloads): every stage, the gate, a record in audit_logs/ and audit_logs/timeline.md.
# Extra arguments are Hydra overrides, e.g. scripts/demo.sh demo=faulty (the gate blocks: exit 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
export MUJOCO_GL=${MUJOCO_GL:-egl}
exec .venv/bin/python -m pipeline.launch stage=full "$@"
