"""The reload round trip under the training's rename map: the forward is fed the dataset keys the map
renames to the policy's inputs (as training fed them, lerobot's reloaded preprocessor renaming them
again), and an input whose stats the rename left under the dataset's name is named with what lerobot
does with it at training and at inference. Real FFV1 video (PyAV) under renamed camera keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.stages.determinism import reload
from pipeline.stages.determinism.lerobot_reload import WITHOUT_STATS
from pipeline.trainlog.spec import Reloaded
from tests.stages.teacher_forced.pixels import FRONT, WRIST
from tests.stages.teacher_forced.test_rename_map import HAND, RIGHT, TOP, renamed_dataset

STATE = "observation.state"
FED: list[dict] = []


def _forward(sample: dict) -> np.ndarray:
    FED.append(dict(sample))
    return np.zeros((1, 2), np.float32)


def reloaded(renames: dict[str, str] | None, stats: dict | None = None, **fields) -> Reloaded:
    return Reloaded(stats=stats or {}, forward=_forward, input_features=[FRONT, WRIST, STATE],
                    renames=renames, **fields)  # fmt: skip


@pytest.fixture(scope="module")
def top_hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return renamed_dataset(tmp_path_factory.mktemp("renamed") / "data", {FRONT: TOP, WRIST: HAND})


def test_a_loader_that_renames_as_training_did_is_fed_the_dataset_keys(top_hand):
    FED.clear()
    row = reload.forward_row(reloaded(RIGHT), top_hand, RIGHT)
    assert row.verdict == "match", row.message
    assert sorted(FED[0]) == sorted([TOP, HAND, STATE]) and FED[0][TOP].shape == (1, 3, 16, 16)
    assert row.evidence["read_from"] == {}  # fed under the dataset's own names


def test_a_loader_that_renames_nothing_is_fed_the_policy_keys_read_from_the_renamed_cameras(top_hand):
    FED.clear()
    row = reload.forward_row(reloaded(None), top_hand, RIGHT)
    assert row.verdict == "match", row.message
    assert sorted(FED[0]) == sorted([FRONT, WRIST, STATE])
    assert row.evidence["read_from"] == {FRONT: TOP, WRIST: HAND}


def test_without_the_map_the_forward_cannot_be_fed_and_says_which_camera(top_hand):
    row = reload.forward_row(reloaded({}), top_hand, {})
    assert row.verdict == "error" and FRONT in row.message


def _stats() -> dict[str, np.ndarray]:
    one = np.ones((3, 1, 1), np.float32)
    return {f"{k}.{s}": one for k in (TOP, HAND) for s in ("mean", "std")} | {f"{STATE}.mean": one}


def test_stats_left_under_the_dataset_names_are_named_with_what_lerobot_does_at_train_and_inference():
    required = [f"{k}.{s}" for k in (FRONT, WRIST) for s in ("mean", "std")]
    loaded = reloaded(RIGHT, _stats(), required=required, without_stats=WITHOUT_STATS)
    row = reload.populated_row(loaded, trained=set(_stats()))
    assert row.verdict == "mismatch" and row.severity == "hard"
    assert f"{FRONT}, {WRIST} have no stats at all: {WITHOUT_STATS}" in row.message
    assert "at training as at inference" in row.message and "never applied" in row.message
    assert f"held under the dataset's names {sorted([HAND, TOP])}" in row.message
    differ = reload.populated_row(loaded, trained=set(_stats()) | {f"{FRONT}.mean"})
    assert "train and inference differ" in differ.message


def test_a_loader_that_does_not_say_what_it_does_without_stats_gets_the_plain_row():
    loaded = reloaded(RIGHT, _stats(), required=[f"{FRONT}.mean"])
    row = reload.populated_row(loaded, trained=None)
    assert row.message == f"after reload: missing though the normalization mode needs them: ['{FRONT}.mean']"
