"""The console scripts the README names, as pip installs them from the wheel: `preflight-launch` (a
Hydra main, so overrides must pass through) and `preflight-status`, in a fresh venv that sees this venv's
packages but not this checkout (as tests/test_wheel.py does; PYTHONPATH is dropped so pip does not
take the checkout for an installed copy and skip the scripts)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.test_wheel import REPO, clean_env, run

SCRIPTS = {"preflight-launch": "pipeline.launch:main", "preflight-status": "pipeline.status:main"}


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scripts")
    env = clean_env()
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        root,
        REPO,
        env=env,
    )
    (wheel,) = root.glob("hpc_preflight-*.whl")
    run(sys.executable, "-m", "venv", "--without-pip", root / "venv", env=env)
    python = root / "venv" / "bin" / "python"
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
        env=env,
    )
    site = run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", env=env
    ).stdout.strip()
    (Path(site) / "_preflight_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python.parent


def test_the_wheel_declares_the_entry_points(venv_bin: Path) -> None:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({e.name: e.value for e in m.entry_points(group='console_scripts')}))"
    )
    out = json.loads(run(venv_bin / "python", "-c", code, env=clean_env()).stdout)
    assert {k: v for k, v in out.items() if k.startswith("preflight-")} == SCRIPTS


def test_console_scripts_take_overrides_and_arguments(venv_bin: Path, tmp_path: Path) -> None:
    bin_dir = venv_bin
    env = clean_env(PREFLIGHT_OUTPUT_ROOT=str(tmp_path / "out"))
    launch = subprocess.run(
        [str(bin_dir / "preflight-launch"), "stage=full", "dry_run=true", "~demo", "launcher=slurm"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert launch.returncode == 0, launch.stdout[-2000:] + launch.stderr[-2000:]
    assert "#SBATCH --dependency=afterany:" in launch.stdout and "dry run: nothing submitted" in launch.stdout
    status = subprocess.run(
        [str(bin_dir / "preflight-status"), "no-such-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert status.returncode == 2 and status.stderr.startswith("status: "), status.stderr
