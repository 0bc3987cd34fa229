#!/usr/bin/env bash
# The optional real-LeRobot tests (pytest -m lerobot): builds a scratch venv beside the project's own
# (never .venv: lerobot pins an older torch and its own av/packaging), then runs them against this checkout.
# lerobot 0.4.4 needs torch < 2.11, torchvision < 0.26; the project takes torch >= 2.3, < 2.14: 2.10 fits both.
# Idempotent: a stamp in the venv records the pins, the checkout and its pyproject.toml; when they are
# unchanged, a second run only runs the tests.
# LEROBOT_VENV chooses the venv folder; extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=${LEROBOT_VENV:-/tmp/preflight-lerobot-venv}
PY=${LEROBOT_PYTHON:-python3.11}
PINS=("torch==2.10.0" "torchvision==0.25.0" "lerobot==0.4.4")
WANT="$( (printf '%s\n' "${PINS[@]}" "$ROOT"; cat pyproject.toml) | sha256sum | cut -c1-16)"

if [[ "$(cat "$VENV/.preflight-lerobot" 2>/dev/null)" != "$WANT" ]]; then
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    # one resolve, so pip cannot upgrade torch past lerobot's cap while installing the project
    "$VENV/bin/python" -m pip install -q "${PINS[@]}" -e "$ROOT[test]"
    # draccus 0.10.0 (a lerobot dependency) installs its own test suite as a top-level `tests` package,
    # which shadows this project's tests/ namespace (ModuleNotFoundError: tests.stages): drop it
    SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [[ -d "$SITE/tests/draccus_choice_plugins" ]]; then rm -r "$SITE/tests"; fi
    echo "$WANT" > "$VENV/.preflight-lerobot"
fi

# torchcodec, which lerobot decodes videos with wherever it is importable, loads FFmpeg's shared libraries
# from the system: scripts/install_system.sh installs them (as root; it installs only what is missing)
if ! ldconfig -p | grep -q 'libavutil\.so\.'; then
    if [[ ${EUID} -eq 0 ]]; then
        scripts/install_system.sh
    else
        echo "test_lerobot.sh: FFmpeg's shared libraries are missing; run scripts/install_system.sh as root" >&2
    fi
fi

# offline: nothing may reach the Hub; PYTHONPATH: this checkout even if the editable install is another
HF_HUB_OFFLINE=1 PYTHONPATH="$ROOT" "$VENV/bin/python" -m pytest -q -ra -m lerobot -p no:cacheprovider \
    tests/stages/teacher_forced tests/trainers tests/cli tests/readers/test_deploy.py \
    tests/stages/contract/test_deploy_rows.py tests/stages/contract/test_video_grid_lerobot.py \
    tests/stages/contract/test_remedies_lerobot.py \
    tests/stages/test_training_runtime_lerobot.py "$@"
