"""The contract stage on what LeRobot 0.4.4's own code writes (../shared/data/real/lerobot-0.4.4): every
policy type against the dataset it was built for gives no false row, `act_trained` against the demo
dataset it was trained on is clear, and the faults planted next to it are named: two state dims whose
stats were exchanged, two camera folders exchanged under a policy whose image stats are ImageNet's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pipeline.readers import ScanOptions, read_dataset, read_model, read_training
from pipeline.record.records import Check
from pipeline.stages.contract import reconcile
from pipeline.stages.contract.camera_fit import Signature, ties
from pipeline.stages.contract.frames import _generic_base
from tests.conftest import DemoCache, gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.stages.contract.helpers import STAGE_CFG, edit_stats
from tests.stages.contract.lerobot_pack import (
    RECORD,
    TYPES,
    exchange_cameras,
    policy_folder,
    with_cameras,
)

# the stage's own dataset pass (health included), as `load_sources` runs it
OPTIONS = ScanOptions(
    rank_error=STAGE_CFG.rank_error,
    dynamics_rows=STAGE_CFG.dynamics_rows,
    health_episodes=1,
    health_gap_factor=STAGE_CFG.health.gap_factor,
)
CAMERAS = ("observation.images.front", "observation.images.wrist")  # the demo dataset's
STATS_ONLY = {"contract.frames.unavailable", "contract.health.videos"}  # record-test ships no videos


def contract(model: Path, dataset: Path) -> dict[str, Check]:
    a, b = read_model(model), read_training(model / "train_config.json")
    checks, _ = reconcile(a, b, read_dataset(dataset, OPTIONS), STAGE_CFG)
    return {c.id: c for c in checks}


def false_rows(rows: dict[str, Check], allowed: set[str] = frozenset()) -> list[str]:
    """Rows that would block or stay undecided: hard mismatches, errors, unverifiable rows."""
    return [
        f"{c.id}: {c.message}"
        for c in rows.values()
        if (c.blocking or c.verdict == "unverifiable") and c.id not in allowed
    ]


@pytest.mark.parametrize("policy", TYPES)
def test_every_policy_type_against_its_dataset(real_data: Path, policy: str) -> None:
    folder = policy_folder(real_data, policy)
    rows = contract(folder, real_data / RECORD)
    assert false_rows(rows, STATS_ONLY) == []
    a = read_model(folder)
    # read from the files: every feature type has a mode, the window fields, the processor steps
    assert {f.type for f in a.features.values()} <= set(a.norm_map)
    config = json.loads((folder / "config.json").read_text())
    assert a.hints["window"]["n_obs_steps"] == config["n_obs_steps"]
    assert a.hints["pre"]["steps"] and a.hints["pre"]["normalizers"]
    assert rows["contract.reload.processor:pre"].verdict == "match"
    assert rows["contract.health.episodes.short"].verdict == "match"


def test_what_the_files_say_per_type(real_data: Path) -> None:
    groot = read_model(policy_folder(real_data, "groot"))
    assert groot.norm_map == {"VISUAL": "IDENTITY", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"}
    assert set(groot.hints["own_normalizer"]) == {"STATE", "ACTION"}
    classifier = read_model(policy_folder(real_data, "reward_classifier"))
    assert classifier.norm_map == {"VISUAL": "MEAN_STD", "STATE": "IDENTITY", "ACTION": "IDENTITY"}
    assert classifier.hints["absent_modes"] == ["STATE", "ACTION"]
    assert len(classifier.hints["pre"]["normalizers"]) == 2  # features split over two normalizer steps
    assert "lerobot.processor.pipeline.IdentityProcessorStep" in classifier.hints["post"]["steps"]
    assert read_model(policy_folder(real_data, "diffusion")).hints["window"]["n_obs_steps"] == 2
    rows = contract(policy_folder(real_data, "tokenizer_stubbed/xvla"), real_data / RECORD)
    space = rows["contract.units.action_mode"]
    assert (space.verdict, space.severity) == ("mismatch", "soft")
    assert "'ee6d'" in space.message and "shoulder_pan.pos" in space.message


@pytest.fixture(scope="module")
def demo_dataset(demo_cache: DemoCache, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_cache.seed(tmp_path_factory.mktemp("demo")) / "dataset"


def test_act_trained_on_its_demo_dataset_is_clear(real_data: Path, demo_dataset: Path) -> None:
    rows = contract(policy_folder(real_data, "act_trained"), demo_dataset)
    assert false_rows(rows) == []
    env = rows["contract.normalization.mode:ENV"]  # ACT's normalization_mapping has no ENV entry
    assert (env.verdict, env.expected, env.configured) == ("match", "IDENTITY", "IDENTITY")
    assert "LeRobot passes it through" in env.message
    # the model reads no camera: the frames rows inform, never decide
    frames = [c for c in rows.values() if c.id.startswith("contract.frames.") and c.feature in CAMERAS]
    assert frames and all(c.severity == "soft" and c.evidence.get("informational") for c in frames)


def test_act_trained_names_two_state_dims_whose_stats_were_exchanged(
    real_data: Path, demo_dataset: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "dataset"
    shutil.copytree(demo_dataset, copy, ignore=shutil.ignore_patterns("videos"))

    def exchange(stats: dict) -> None:
        for stat in ("mean", "std"):
            values = stats["observation.state"][stat]
            values[2], values[5] = values[5], values[2]

    edit_stats(copy, exchange)
    rows = contract(policy_folder(real_data, "act_trained"), copy)
    blocking = [c for c in rows.values() if c.blocking]
    assert [c.id for c in blocking] == ["contract.normalization.stale:observation.state"]
    assert "dim(s) 2 (elbow.pos), 5 (wrist_3.pos)" in blocking[0].message


def test_state_only_policy_without_videos_clears(real_data: Path, demo_dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "dataset"
    shutil.copytree(demo_dataset, copy, ignore=shutil.ignore_patterns("videos"))
    rows = contract(policy_folder(real_data, "act_trained"), copy)
    assert false_rows(rows) == []
    for row in ("contract.frames.unavailable", "contract.health.videos"):
        assert (rows[row].verdict, rows[row].severity) == ("match", "soft")
        assert "nothing it reads is missing" in rows[row].message
    camera = with_cameras(policy_folder(real_data, "act_trained"), tmp_path / "camera", _shapes())
    reading = contract(camera, copy)  # a policy that reads the cameras: their absence stays undecided
    assert sorted(c.id for c in reading.values() if c.verdict == "unverifiable") == sorted(STATS_ONLY)
    assert not [c.id for c in reading.values() if c.blocking]


def _shapes() -> dict[str, list[int]]:
    return {key: [3, 64, 64] for key in CAMERAS}


def test_exchanged_cameras_found_from_the_datasets_own_stats(
    real_data: Path, demo_dataset: Path, tmp_path: Path
) -> None:
    """ImageNet's stats for both cameras tie every hypothesis; the dataset's meta/stats.json per camera
    (written from the frames before they were exchanged) no longer fits them."""
    camera = with_cameras(policy_folder(real_data, "act_trained"), tmp_path / "camera", _shapes())
    clean = contract(camera, demo_dataset)
    assert false_rows(clean) == []
    pair = f"contract.frames.swapped:{CAMERAS[0]}|{CAMERAS[1]}"
    assert clean[pair].verdict == "match" and "are ImageNet's" in clean[pair].message
    exchanged = contract(camera, exchange_cameras(demo_dataset, tmp_path / "exchanged", *CAMERAS))
    blocking = [c for c in exchanged.values() if c.blocking]
    assert [c.id for c in blocking] == [pair]
    assert "the dataset's own meta/stats.json per camera exchanged" in blocking[0].message
    assert all(key in blocking[0].message for key in CAMERAS)


def test_base_stats_that_cannot_place_cameras() -> None:
    """ImageNet's stats place no camera; two cameras with the same stats tie; distinct stats decide."""
    imagenet = Signature(np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225]))
    front, wrist = Signature(np.array([0.3, 0.4, 0.5])), Signature(np.array([0.6, 0.5, 0.2]))
    assert _generic_base({"a": imagenet}, ["a"], 0.05) == (
        "the base's image stats for a are ImageNet's (use_imagenet_stats)",
        ["a"],
    )
    assert _generic_base({"a": front, "b": front}, ["a", "b"], 0.05) == (
        "the base's image stats do not tell a and b apart",
        ["a", "b"],
    )
    assert _generic_base({"a": front, "b": wrist}, ["a", "b"], 0.05) is None
    assert ties({"a": front, "b": wrist, "c": front}, ["a", "b", "c"], 0.05) == [("a", "c")]


def test_launched_on_act_trained_as_a_user_would(real_data: Path, demo_dataset: Path, tmp_path: Path) -> None:
    """`stage=contract` with model.path, dataset.path and training.path: clear on act_trained's own
    dataset; blocked, naming both cameras, where its camera twin meets the copy with exchanged videos."""
    model = policy_folder(real_data, "act_trained")
    proc = _launch(tmp_path / "clear", model, demo_dataset)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gate_of(run_dir_of(tmp_path / "clear", proc))["gate"] == "clear"
    camera = with_cameras(model, tmp_path / "camera", _shapes())
    exchanged = exchange_cameras(demo_dataset, tmp_path / "exchanged", *CAMERAS)
    proc = _launch(tmp_path / "blocked", camera, exchanged)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    reasons = gate_of(run_dir_of(tmp_path / "blocked", proc))["reasons"]
    assert [r.split(":", 1)[0] for r in reasons] == ["contract.frames.swapped"]
    assert all(key in reasons[0] for key in CAMERAS)


def _launch(cwd: Path, model: Path, dataset: Path) -> subprocess.CompletedProcess[str]:
    cwd.mkdir()
    paths = (f"model.path={model}", f"dataset.path={dataset}", f"training.path={model / 'train_config.json'}")
    return launch_here(cwd, "launcher=local", "launcher.poll_s=0.2", "stage=contract", *paths)
