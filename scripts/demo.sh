#!/usr/bin/env bash
# Set up everything, then run the main job on the embedded demo (data generated locally, no
# downloads): every stage, the gate, a record in audit_logs/ (markdown, JSON and an HTML page),
# audit_logs/timeline.md and audit_logs/index.html; the last two lines printed are the page and the index.
# Extra arguments are Hydra overrides, e.g. scripts/demo.sh demo=faulty (the gate blocks: exit 3).
#
# The stage jobs run inside a small SIF image the demo builds once (preflight/demo/image/, with
# siftool + mksquashfs + busybox from scripts/install_system.sh), through the Apptainer stand-in
# (containers/standin/apptainer: squashfuse + bubblewrap; Apptainer itself is not packaged for
# Debian 12), so the record shows container_check's image rows from inside it. Where those tools are
# missing the demo says so in one line and runs without an image.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
export MUJOCO_GL=${MUJOCO_GL:-egl}
image_args=()
missing=()
for tool in squashfuse bwrap fusermount3; do
    command -v "${tool}" >/dev/null || missing+=("${tool}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "demo: runs without an image: the Apptainer stand-in needs ${missing[*]} (scripts/install_system.sh)" >&2
elif image=$(.venv/bin/python -m pipeline.demo image); then
    export APPTAINER_STANDIN_BIND="${PWD}/.venv"
    image_args=(container=apptainer "container.binary=${PWD}/containers/standin/apptainer"
                "container.image=${image}" "container.python=${PWD}/.venv/bin/python")
fi
audit_dir=audit_logs
for arg in "$@"; do
    case ${arg} in audit_dir=*) audit_dir=${arg#audit_dir=} ;; esac
done
started=$(mktemp)
status=0
.venv/bin/python -m pipeline.launch stage=full "${image_args[@]}" "$@" || status=$?
# the record's page (written by this launch's gate, so newer than `started`) and the history's index
page=$(find "${audit_dir}" -maxdepth 1 -name '*_audit.html' -newer "${started}" 2>/dev/null | sort | tail -n 1 || true)
rm -f "${started}"
if [[ -n ${page} ]]; then
    echo "demo: page $(realpath "${page}")"
else
    echo "demo: page not written yet: the gate job writes it into $(realpath -m "${audit_dir}")/"
fi
echo "demo: index $(realpath -m "${audit_dir}/index.html")"
exit "${status}"
