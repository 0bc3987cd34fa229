"""What the lerobot-marked trainer tests share: the shipped train_cmd and the launch's environment."""

from __future__ import annotations

import importlib.util
from importlib import metadata

import pytest

TRAIN_CMD = [
    "{python}", "-m", "pipeline.trainers.lerobot_train", "--seed", "{seed}", "--steps", "{steps}",
    "--out", "{out}", "--config", "{training}", "--dataset", "{dataset}",
]  # fmt: skip
# the marks of a test module that needs lerobot itself (scripts/test_lerobot.sh runs them in its venv)
LEROBOT_ONLY = [
    pytest.mark.lerobot,
    pytest.mark.skipif(
        importlib.util.find_spec("lerobot") is None,
        reason="optional package 'lerobot' not installed (scripts/test_lerobot.sh builds a venv with it)",
    ),
]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def train_cmd_override() -> str:
    return "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in TRAIN_CMD) + "]"


def environment_rows() -> set[str]:
    """Rows that are about this test venv, not the files judged: where the checkout runs from
    PYTHONPATH and the venv lacks its metadata (scripts/test_lerobot.sh installs it; a venv that only
    carries the dependencies does not), container_check rightly says `hpc-preflight is not installed`.
    A default package cannot be dropped from the check by an override, so the tests allow that row."""
    try:
        metadata.version("hpc-preflight")
    except metadata.PackageNotFoundError:
        return {"container_check.package:hpc-preflight"}
    return set()


def blocking(gate: dict) -> list[str]:
    """The ids of the rows that block the gate, less the environment's own (`environment_rows`)."""
    ids = [reason.partition(": ")[0] for reason in gate["reasons"]]
    return [i for i in ids if i not in environment_rows()]


def hard_findings(gate: dict) -> list[str]:
    """Hard mismatch or error rows in any stage, less the environment's own."""
    checks = [c for s in gate["stages"] for c in s["checks"]]
    found = [c["id"] for c in checks if c["severity"] == "hard" and c["verdict"] in ("mismatch", "error")]
    return [i for i in found if i not in environment_rows()]
