#!/usr/bin/env bash
# Install the Debian 12 system packages hpc-preflight needs (tests + demo).
#
# Idempotent: when every package is already installed (checked with dpkg -s)
# it does nothing, not even `apt-get update`. Must run as root.
#
# Usage: scripts/install_system.sh
set -euo pipefail

PACKAGES=(
    # Local one-node Slurm cluster (scripts/slurm_local.sh). submitit polls
    # job state with `sacct` only, so accounting (slurmdbd + MariaDB) is needed.
    slurm-wlm      # slurmctld, slurmd, client commands
    slurmdbd
    munge
    mariadb-server
    # Container images: squashfs build/mount, sandboxing, SIF inspection.
    squashfs-tools
    squashfuse
    fuse3          # fusermount3, needed to unmount squashfuse mounts
    bubblewrap
    siftool        # Debian ships it as its own package (bookworm: 2.8.3)
    busybox-static # the root filesystem of the tests' tiny SIF images (tests/sif_images.py)
    # Headless rendering (MuJoCo EGL / OSMesa backends).
    libegl1
    libgl1-mesa-dri
    libosmesa6
    # pgrep/pkill/ps, used by slurm_local.sh.
    procps
    # The audit pages' browser tests (tests/record/test_html_browser.py): headless Chromium driven
    # through Debian's chromedriver, so nothing is downloaded when the tests run.
    chromium
    chromium-driver
    # FFmpeg 5.1's shared libraries, which torchcodec's core (libtorchcodec_core5.so) links against:
    # lerobot 0.4.4 decodes videos with torchcodec wherever it is importable, so the lerobot venv of
    # scripts/test_lerobot.sh cannot train on a video dataset without them (container_check's
    # training_runtime row names them). Libraries only, no ffmpeg CLI.
    libavcodec59
    libavformat59
    libavutil57
    libswscale6
    libswresample4
    libavdevice59
    libavfilter8
)

if [[ ${EUID} -ne 0 ]]; then
    echo "install_system.sh: must run as root" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive

is_installed() {
    # "install ok installed" only; a removed-but-config-left package does not count.
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    is_installed "${pkg}" || missing+=("${pkg}")
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install_system.sh: all ${#PACKAGES[@]} packages already installed"
    exit 0
fi
echo "install_system.sh: missing: ${missing[*]}"

# Refresh the package lists only when they cannot provide every missing package
# (fresh machine, or lists emptied by an image cleanup). A third-party source
# that is unreachable makes `apt-get update` exit non-zero even though the
# Debian lists were refreshed, so a failure is only a warning here; the
# install below fails loudly if a package really is unavailable.
need_update=0
for pkg in "${missing[@]}"; do
    candidate="$(apt-cache policy "${pkg}" 2>/dev/null | awk '/Candidate:/ {print $2}')"
    if [[ -z "${candidate}" || "${candidate}" == "(none)" ]]; then
        need_update=1
        break
    fi
done
if [[ ${need_update} -eq 1 ]]; then
    echo "install_system.sh: apt-get update"
    apt-get update || echo "install_system.sh: warning: apt-get update reported errors; continuing" >&2
fi

# Packages such as mariadb-server, munge and slurmd start their services from
# their postinst scripts. slurm_local.sh runs its own daemons with state in a
# temp dir, so stop invoke-rc.d from starting system copies (they would hold
# the default ports/sockets). Docker-style images already ship this file; we
# only add it (and remove it again) when it is absent.
POLICY=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e ${POLICY} ]]; then
    printf '#!/bin/sh\n# temporary, added by hpc-preflight install_system.sh\nexit 101\n' > "${POLICY}"
    chmod 755 "${POLICY}"
    added_policy=1
fi
cleanup() {
    if [[ ${added_policy} -eq 1 ]]; then
        rm -f "${POLICY}"
    fi
}
trap cleanup EXIT

apt-get install -y --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}"

echo "install_system.sh: done"
