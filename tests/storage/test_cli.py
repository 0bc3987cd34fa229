"""`python -m pipeline.storage status|promote|prune`, run as a user would, on a real full tmpfs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from pipeline.storage import save_checkpoint
from tests.storage.conftest import fill

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="250")
    return subprocess.run(
        [sys.executable, "-m", "pipeline.storage", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def save(step: int, primary: Path, scratch: Path):
    w = np.full(64 * 1024, step, np.float32)  # 256 KiB
    return save_checkpoint({"w": w}, {"step": step}, primary=primary, fallbacks=[scratch])


def test_status_promote_prune(small_fs, tmp_path):
    primary, scratch = small_fs("1m") / "ckpt", tmp_path / "scratch"
    scratch.mkdir()
    save(1, primary, scratch)
    filler = fill(primary.parent)
    moved = [save(step, primary, scratch) for step in (2, 3)]
    assert all(s.fallback for s in moved)

    done = cli("status", str(primary))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "step_0000000" in line]
    assert len(lines) == 3 and "primary" in lines[0] and all("fallback" in line for line in lines[1:])

    done = cli("promote", str(primary))
    assert done.returncode == 0 and done.stdout.count("no room yet") == 2  # still full: says so, moves none
    filler.unlink()
    done = cli("promote", str(primary))
    assert done.returncode == 0 and done.stdout.count("promoted") == 2
    assert sorted(p.name for p in primary.glob("*.safetensors")) == [
        f"step_00000000{i}.safetensors" for i in (1, 2, 3)
    ]

    done = cli("prune", str(primary), "--keep", "1")
    assert done.returncode == 0 and "deleted 2" in done.stdout
    assert [p.name for p in primary.glob("*.safetensors")] == ["step_000000003.safetensors"]
    assert cli("prune", str(primary)).returncode == 2  # --keep is required

    newest = primary / "step_000000003.safetensors"
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x00")  # same size, other bytes
    done = cli("status", str(primary))
    assert done.returncode == 1 and "BAD" in done.stdout and "sha256" in done.stdout
