"""Shared by the determinism tests: run the reference trainer for real, and the test trainer's argv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TINY_TRAINER = Path(__file__).resolve().parent / "tiny_trainer.py"


def tiny_cmd(*extra: str) -> str:
    """A Hydra override setting train_cmd to the test trainer (a user's own script)."""
    items = [
        "{python}",
        str(TINY_TRAINER),
        "--seed",
        "{seed}",
        "--steps",
        "{steps}",
        "--out",
        "{out}",
        *extra,
    ]
    return "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in items) + "]"


def reference_runs(root: Path, dataset: Path, runs: dict[str, tuple[str, ...]]) -> dict[str, Path]:
    """Real reference-trainer runs (side by side), as the stage starts them: determinism env set.

    `runs` maps a name to extra trainer flags; every run gets `--steps 3` and `--seed 0` unless given.
    """
    env = {**os.environ, "PREFLIGHT_DETERMINISTIC": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    procs = {}
    for name, extra in runs.items():
        flags = {"--seed": "0", "--steps": "3", **dict(zip(extra[::2], extra[1::2], strict=True))}
        cmd = [
            sys.executable,
            "-m",
            "pipeline.demo.reference_trainer",
            "--out",
            str(root / name),
            "--dataset",
            str(dataset),
            *[x for kv in flags.items() for x in kv],
        ]
        procs[name] = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, proc in procs.items():
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, f"{name}: {output}"
    return {name: root / name for name in runs}
