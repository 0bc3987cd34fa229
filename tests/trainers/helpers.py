"""What the lerobot-marked trainer tests share: the shipped train_cmd and the launch's environment."""

from __future__ import annotations

from importlib import metadata

TRAIN_CMD = [
    "{python}", "-m", "pipeline.trainers.lerobot_train", "--seed", "{seed}", "--steps", "{steps}",
    "--out", "{out}", "--config", "{training}", "--dataset", "{dataset}",
]  # fmt: skip
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def train_cmd_override() -> str:
    return "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in TRAIN_CMD) + "]"


def not_installed_here() -> list[str]:
    """This checkout runs from PYTHONPATH where the venv lacks its metadata (scripts/test_lerobot.sh
    installs it; a venv that only carries the dependencies does not): container_check would rightly say
    `hpc-preflight is not installed`, a fact about the test venv, not about the files judged."""
    try:
        metadata.version("hpc-preflight")
    except metadata.PackageNotFoundError:
        return ["~stages.container_check.packages.hpc-preflight"]
    return []
