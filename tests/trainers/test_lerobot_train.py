"""The shipped `train_cmd` for lerobot-train (`pipeline.trainers.lerobot_train`), against the real package.

The fixture ACT (`lerobot-0.4.4/act_trained`, trained by lerobot-train on the demo dataset) is retrained
for a few steps from its own `train_config.json`: same seed, bit-identical streams and a checkpoint where
the stage reads it; another seed, another stream; and the determinism stage on those inputs, launched as
a user would, with that train_cmd. Optional: only where `lerobot` is importable (scripts/test_lerobot.sh).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DemoCache, gate_of, launch, run_dir_of

pytestmark = [
    pytest.mark.lerobot,
    pytest.mark.skipif(
        importlib.util.find_spec("lerobot") is None,
        reason="optional package 'lerobot' not installed (scripts/test_lerobot.sh builds a venv with it)",
    ),
]
TRAIN_CMD = [
    "{python}", "-m", "pipeline.trainers.lerobot_train", "--seed", "{seed}", "--steps", "{steps}",
    "--out", "{out}", "--config", "{training}", "--dataset", "{dataset}",
]  # fmt: skip
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def act(real_data: Path) -> Path:
    folder = real_data / "lerobot-0.4.4" / "act_trained" / "pretrained_model"
    if not folder.is_dir():
        pytest.skip(f"fixture ACT not present: {folder}")
    return folder


def train(out: Path, config: Path, dataset: Path, seed: int) -> Path:
    argv = [a.format(python=sys.executable, seed=seed, steps=3, out=out, training=config, dataset=dataset)
            for a in TRAIN_CMD]  # fmt: skip
    proc = subprocess.run(
        argv[:1] + argv[1:], env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_same_seed_streams_are_identical_and_another_seed_differs(tmp_path, act, demo_cache: DemoCache):
    dataset = demo_cache.seed(tmp_path / "seed") / "dataset"
    config = act / "train_config.json"
    a, b, c = (train(tmp_path / n, config, dataset, s) for n, s in (("a", 0), ("b", 0), ("c", 1)))
    lines = (a / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"loss"' in lines[0] and "param_digest" in lines[0]
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    assert (a / "metrics.jsonl").read_bytes() != (c / "metrics.jsonl").read_bytes()
    assert (a / "checkpoint" / "model.safetensors").is_file()
    assert (a / "checkpoint" / "config.json").is_file()


def test_the_determinism_stage_runs_the_users_lerobot_training(tmp_path, act, demo_cache: DemoCache):
    dataset = demo_cache.seed(tmp_path / "seed") / "dataset"
    cmd = "stages.determinism.train_cmd=[" + ",".join(f"'{i}'" for i in TRAIN_CMD) + "]"
    os.environ.update(OFFLINE)  # the jobs inherit the launch's environment
    proc = launch(
        _folder(tmp_path / "run"),
        "stage=determinism",
        "launcher=local",
        f"model.path={act}",
        f"dataset.path={dataset}",
        f"training.path={act / 'train_config.json'}",
        cmd,
        "stages.determinism.steps=3",
        "stages.determinism.job_pair=false",
        "stages.determinism.reload.enabled=false",  # no LeRobot reload loader is shipped (yet)
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    gate = gate_of(run_dir_of(tmp_path / "run", proc))
    stage = next(s for s in gate["stages"] if s["stage"] == "determinism")
    rows = {c["id"].removeprefix("determinism."): c for c in stage["checks"]}
    assert rows["twins"]["verdict"] == "match" and rows["control"]["verdict"] == "match"
    assert gate["gate"] == "clear" and not any(k.startswith("reload.") for k in rows)
    assert "pipeline.trainers.lerobot_train" in rows["twins"]["evidence"]["twin_a"]["argv"]


def _folder(path: Path) -> Path:
    path.mkdir()
    return path
