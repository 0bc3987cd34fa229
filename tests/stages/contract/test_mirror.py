"""An action dim mirrored inside its range (v -> lo + hi - v), its stats rewritten to match, on the real
SO-101 record (SamueleSandrini/record-test, gripper.pos in both state and action) against the real ACT
checkpoint LeRobot 0.4.4 made for it: named by a hard row; the clean record and the other real datasets
give no mirror row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.readers import ScanOptions, read_dataset, read_model, read_training
from pipeline.record.records import Check
from pipeline.stages.contract import reconcile
from tests.stages.contract.helpers import STAGE_CFG, card_from, copy_with, edit_stats, training_yaml
from tests.stages.contract.lerobot_pack import RECORD, policy_folder

OPTIONS = ScanOptions(
    rank_error=STAGE_CFG.rank_error,
    dynamics_rows=STAGE_CFG.dynamics_rows,
    health_episodes=1,
    health_gap_factor=STAGE_CFG.health.gap_factor,
)
GRIPPER = 5  # gripper.pos, in action and observation.state
MIRRORED = {"mean": "mean", "min": "max", "max": "min", "q01": "q99", "q10": "q90", "q50": "q50"}
MIRRORED |= {"q90": "q10", "q99": "q01"}


def rows(model: Path, dataset: Path, training: Path | None = None) -> dict[str, Check]:
    b = read_training(training or model / "train_config.json")
    checks, _ = reconcile(read_model(model), b, read_dataset(dataset, OPTIONS), STAGE_CFG)
    return {c.id: c for c in checks}


def mirrored_copy(dataset: Path, out: Path, dim: int) -> Path:
    """The record with action[dim] mirrored inside its own range and meta/stats.json rewritten to match
    (every stat of that dim mirrored: a mean, its quantiles swapped end for end, the std kept)."""
    probe = read_dataset(dataset, OPTIONS).recomputed["action"]
    lo, hi = float(probe["min"][dim]), float(probe["max"][dim])

    def flip(values: np.ndarray) -> np.ndarray:
        values[:, dim] = lo + hi - values[:, dim]
        return values

    def restat(stats: dict) -> None:
        old = {k: list(v) for k, v in stats["action"].items()}
        for stat, source in MIRRORED.items():
            if stat in old:
                stats["action"][stat][dim] = lo + hi - old[source][dim]

    copy = copy_with(dataset, out, "action", flip)
    edit_stats(copy, restat)
    return copy


def test_a_gripper_mirrored_inside_its_range_is_a_hard_row(real_data: Path, tmp_path: Path) -> None:
    model, dataset = policy_folder(real_data, "act"), real_data / RECORD
    clean = rows(model, dataset)
    assert clean["contract.units.mirror:action"].verdict == "match", clean["contract.units.mirror:action"]
    copy = mirrored_copy(dataset, tmp_path / "mirrored", GRIPPER)
    found = rows(model, copy)
    row = found["contract.units.mirror:action"]
    assert row.blocking and row.evidence["dims"] == [GRIPPER], row.message
    assert "gripper.pos" in row.message and row.actual[GRIPPER] < 0
    assert row.evidence["base"][GRIPPER]["sign"] == 1  # the base's own stats pin "moves with its state"
    # the stats alone do not show it: the same copy without the mirror row would have been clear
    others = [c.id for c in found.values() if c.blocking and c.id != row.id]
    assert others == [], [found[i].message for i in others]


def test_where_the_base_pins_nothing_the_data_s_own_relation_names_the_dim(
    real_data: Path, tmp_path: Path
) -> None:
    """A card base without state stats (nothing to set its action stats against): the other five dims
    move with their state, the gripper against them."""
    dataset = real_data / RECORD
    copy = mirrored_copy(dataset, tmp_path / "mirrored", GRIPPER)
    modes = {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    card = card_from(copy, tmp_path / "card", modes)
    spec = yaml.safe_load((card / "contract.yaml").read_text())
    del spec["features"]["observation.state"]["stats"]
    (card / "contract.yaml").write_text(yaml.safe_dump(spec))
    row = rows(card, copy, training_yaml(tmp_path, modes))["contract.units.mirror:action"]
    assert row.verdict == "mismatch" and row.severity == "soft" and row.evidence["dims"] == [GRIPPER]
    assert row.evidence["found"] == {GRIPPER: "data"}


@pytest.mark.parametrize(
    "folder",
    [
        "YifanTian07__G1-policy-train",
        "yipiandanxinxiangyangkai__open_50",
        "rerun-io__rerun/tests/assets/lerobot/v30_apple_storage",
        RECORD,
    ],
)
def test_clean_real_datasets_give_no_mirror_row(real_data: Path, tmp_path: Path, folder: str) -> None:
    dataset = real_data / folder
    modes = {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    card = card_from(dataset, tmp_path / "card", modes)
    found = rows(card, dataset, training_yaml(tmp_path, modes))
    mirror = [c for c in found.values() if c.id.startswith("contract.units.mirror:")]
    assert mirror and all(c.verdict == "match" for c in mirror), [c.message for c in mirror]
