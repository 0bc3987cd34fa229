"""The shipped `train_cmd` for lerobot-train (`pipeline.trainers.lerobot_train`), against the real package.

The fixture ACT (`lerobot-0.4.4/act_trained`, trained by lerobot-train on the demo dataset) is retrained
for a few steps from its own `train_config.json`: same seed, bit-identical streams and a checkpoint where
the stage reads it; another seed, another stream; its reload round trip through LeRobot's loader, and a
copy whose saved normalizer stats no longer equal training's; and `stage=full` on its files, launched as a
user would with that train_cmd: clear. Optional: only where `lerobot` is importable
(scripts/test_lerobot.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pipeline.stages.determinism import reload
from pipeline.stages.determinism.config import ReloadConfig
from pipeline.stages.determinism.lerobot_reload import LOADER
from tests.conftest import DemoCache, gate_of, launch, run_dir_of
from tests.trainers.helpers import (
    LEROBOT_ONLY,
    OFFLINE,
    TRAIN_CMD,
    blocking,
    hard_findings,
    train_cmd_override,
)

pytestmark = LEROBOT_ONLY
PRE_STATE = "policy_preprocessor_step_3_normalizer_processor.safetensors"


@pytest.fixture(scope="module")
def act(real_data: Path) -> Path:
    folder = real_data / "lerobot-0.4.4" / "act_trained" / "pretrained_model"
    if not folder.is_dir():
        pytest.skip(f"fixture ACT not present: {folder}")
    return folder


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory, demo_cache: DemoCache) -> Path:
    return demo_cache.seed(tmp_path_factory.mktemp("seed")) / "dataset"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, act: Path, dataset: Path) -> dict[str, Path]:
    """Three 3-step runs of the shipped train_cmd: seeds 0, 0 and 1."""
    root = tmp_path_factory.mktemp("runs")
    config = act / "train_config.json"
    return {n: train(root / n, config, dataset, s) for n, s in (("a", 0), ("b", 0), ("c", 1))}


def train(out: Path, config: Path, dataset: Path, seed: int) -> Path:
    argv = [a.format(python=sys.executable, seed=seed, steps=3, out=out, training=config, dataset=dataset)
            for a in TRAIN_CMD]  # fmt: skip
    proc = subprocess.run(argv, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_same_seed_streams_are_identical_and_another_seed_differs(runs: dict[str, Path]) -> None:
    a, b, c = runs["a"], runs["b"], runs["c"]
    lines = (a / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"loss"' in lines[0] and "param_digest" in lines[0]
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes()
    assert (a / "metrics.jsonl").read_bytes() != (c / "metrics.jsonl").read_bytes()
    assert (a / "checkpoint" / "model.safetensors").is_file()
    assert (a / "checkpoint" / "config.json").is_file()
    assert (a / "normalization_intent.safetensors").is_file()  # what training normalized with


def test_the_reload_round_trip_through_lerobots_loader(runs: dict[str, Path], dataset: Path) -> None:
    found = reload.round_trip(runs["a"] / "checkpoint", dataset, ReloadConfig(), LOADER, told=False)
    rows = {r.id.removeprefix("determinism.reload."): r for r in found}
    assert set(rows) == {"saved_stats_finite", "load", "stats_populated", "stats_match_training", "forward"}
    assert all(r.verdict == "match" for r in found), {k: r.message for k, r in rows.items()}
    assert "observation.state.mean" in rows["stats_populated"].evidence["keys"]
    assert rows["forward"].actual == {"shape": [1, 5], "finite": True}


def test_saved_stats_other_than_trainings_are_named(runs: dict[str, Path], dataset: Path, tmp_path) -> None:
    """Two state dims' mean exchanged in the saved normalizer state: eval would normalize with stats
    training never used; the reload names the key."""
    copy = Path(shutil.copytree(runs["a"], tmp_path / "a"))
    state = load_file(copy / "checkpoint" / PRE_STATE)
    mean = np.array(state["observation.state.mean"], copy=True)
    mean[[2, 5]] = mean[[5, 2]]
    save_file({**state, "observation.state.mean": mean}, str(copy / "checkpoint" / PRE_STATE))
    found = reload.round_trip(copy / "checkpoint", dataset, ReloadConfig(), LOADER, told=False)
    row = next(r for r in found if r.id == "determinism.reload.stats_match_training")
    assert row.verdict == "mismatch" and row.severity == "hard", row.message
    assert list(row.evidence["differing"]) == ["observation.state.mean"], row.evidence["differing"]


def test_stage_full_on_act_trained_is_clear(tmp_path: Path, act: Path, dataset: Path) -> None:
    """teacher_forced through load_lerobot, determinism through the shipped train_cmd with its reload
    round trip (LeRobot's, chosen from the checkpoint's type), render_cache skipped: clear."""
    os.environ.update(OFFLINE)  # the jobs inherit the launch's environment
    cwd = tmp_path / "run"
    cwd.mkdir()
    proc = launch(
        cwd,
        "stage=full",
        "launcher=local",
        f"model.path={act}",
        f"dataset.path={dataset}",
        f"training.path={act / 'train_config.json'}",
        train_cmd_override(),
        "stages.determinism.steps=3",
        "stages.determinism.job_pair=false",
    )
    gate = gate_of(run_dir_of(cwd, proc))
    assert not blocking(gate) and proc.returncode in (0, 3), proc.stdout[-4000:] + proc.stderr[-4000:]
    assert not hard_findings(gate)
    by_stage = {s["stage"]: s for s in gate["stages"]}
    assert by_stage["render_cache"]["status"] == "skipped"
    rows = {c["id"].removeprefix("determinism."): c for c in by_stage["determinism"]["checks"]}
    assert rows["twins"]["verdict"] == "match" and rows["control"]["verdict"] == "match"
    reloads = {k: r["verdict"] for k, r in rows.items() if k.startswith("reload.")}
    assert reloads and set(reloads.values()) == {"match"}, reloads
    assert "pipeline.trainers.lerobot_train" in rows["twins"]["evidence"]["twin_a"]["argv"]
    assert by_stage["teacher_forced"]["status"] in ("pass", "warn")
