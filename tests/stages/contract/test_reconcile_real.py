"""Reconciliation on real datasets: unmodified copies with a contract made from their own stats are
clean; copies with planted faults (dims swapped, a dim scaled by a unit factor, stats removed) are caught
with the right feature, dims and evidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.readers import read_dataset, read_model, read_training
from pipeline.stages.contract import reconcile
from tests.stages.contract.helpers import (
    OPTIONS,
    STAGE_CFG,
    card_from,
    copy_with,
    edit_stats,
    hard,
    run,
    training_yaml,
)

RECORD = "SamueleSandrini__record-test"
G1 = "YifanTian07__G1-policy-train"
MODES = {
    "record": {"STATE": "QUANTILES", "ACTION": "QUANTILES"},
    "g1": {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
}


@pytest.fixture()
def record(real_data: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    data, out = real_data / RECORD, tmp_path / "record"
    return card_from(data, out, MODES["record"]), training_yaml(out, MODES["record"]), data


@pytest.fixture()
def g1(real_data: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    data, out = real_data / G1, tmp_path / "g1"
    return card_from(data, out, MODES["g1"]), training_yaml(out, MODES["g1"]), data


def _swap(i: int, j: int):
    def edit(values: np.ndarray) -> np.ndarray:
        values[:, [i, j]] = values[:, [j, i]]
        return values

    return edit


def _scale(d: int, factor: float):
    def edit(values: np.ndarray) -> np.ndarray:
        values[:, d] *= factor
        return values

    return edit


def test_unmodified_datasets_are_clean(record, g1) -> None:
    for model, training, data in (record, g1):
        checks = run(model, training, data)
        assert hard(checks) == {}, [c.message for c in checks if c.blocking]
        assert all(c.evidence.get("inferred") for c in checks)  # rows from a card are inferred


def test_swapped_state_dims_record(record, tmp_path: Path) -> None:
    model, training, data = record
    checks = run(model, training, copy_with(data, tmp_path / "swapped", "observation.state", _swap(3, 4)))
    found = hard(checks)
    row = found.pop("contract.layout.permutation:observation.state")
    assert row.evidence["cycles"] == [[3, 4]] and "wrist_flex.pos" in row.message
    assert row.actual == ["state[3] (wrist_flex.pos) <-> state[4] (wrist_roll.pos)"]
    assert set(found) <= {
        "contract.normalization.stale:observation.state"
    }  # stats.json describes the old order


def test_swapped_state_dims_g1(g1, tmp_path: Path) -> None:
    model, training, data = g1
    checks = run(model, training, copy_with(data, tmp_path / "swapped", "observation.state", _swap(7, 10)))
    row = hard(checks)["contract.layout.permutation:observation.state"]
    assert row.evidence["cycles"] == [[7, 10]]
    assert row.evidence["names"] == {"7": "kRightShoulderPitch", "10": "kRightElbow"} or row.evidence[
        "names"
    ] == {7: "kRightShoulderPitch", 10: "kRightElbow"}


def test_unit_factor_record_and_g1(record, g1, tmp_path: Path) -> None:
    model, training, data = record
    checks = run(
        model, training, copy_with(data, tmp_path / "rad", "observation.state", _scale(1, np.pi / 180))
    )
    row = hard(checks)["contract.units.scale:observation.state"]
    assert row.evidence["matches"] == {
        1: {"factor": "radians_vs_degrees", "ratio": pytest.approx(0.017, abs=1e-3)}
    }
    model, training, data = g1
    checks = run(model, training, copy_with(data, tmp_path / "deg", "action", _scale(3, 180 / np.pi)))
    row = hard(checks)["contract.units.scale:action"]
    assert list(row.evidence["matches"]) == [3] and "degrees_vs_radians" in row.message
    assert "contract.layout.permutation:action" not in hard(checks)


def test_stats_removed(record, tmp_path: Path, real_data: Path) -> None:
    model, training, data = record
    copy = copy_with(data, tmp_path / "noq", "action", lambda v: v)
    edit_stats(copy, lambda s: [s[k].pop(q) for k in ("action", "observation.state") for q in ("q01", "q99")])
    found = hard(run(model, training, copy))
    assert set(found) == {
        "contract.normalization.stats:action",
        "contract.normalization.stats:observation.state",
    }
    assert "QUANTILES without q01/q99 is a hard stop" in found["contract.normalization.stats:action"].message
    edit_stats(copy, lambda s: s.pop("action"))
    found = hard(run(model, training, copy))
    assert found["contract.normalization.passthrough:action"].actual == "key missing"


def test_mean_std_override_of_quantiles_base(record, tmp_path: Path) -> None:
    model, _, data = record
    training = training_yaml(tmp_path, {"STATE": "MEAN_STD", "ACTION": "QUANTILES"})
    found = hard(run(model, training, data))
    assert set(found) == {"contract.normalization.mode:STATE"}
    assert found["contract.normalization.mode:STATE"].expected == "QUANTILES"


def test_v30_frames_claim(real_data: Path, tmp_path: Path) -> None:
    """info.json says 14983 frames; the parquet (and the episodes metadata) hold 899."""
    data = real_data / "rerun-io__rerun/tests/assets/lerobot/v30_apple_storage"
    model = card_from(data, tmp_path / "card", MODES["g1"])
    found = hard(run(model, training_yaml(tmp_path, MODES["g1"]), data))
    assert set(found) == {"contract.layout.frames:dataset"}
    row = found["contract.layout.frames:dataset"]
    assert row.expected == 14983 and row.actual == 899 and "total_frames: metadata says 14983" in row.message


def test_metadata_only_v21_is_inconsistent(real_data: Path, tmp_path: Path) -> None:
    data = real_data / "rerun-io__rerun/tests/assets/lerobot/v21_apple_storage"
    model = tmp_path / "card"
    model.mkdir()
    (model / "contract.yaml").write_text(
        "source: test\nnormalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
        "features:\n  observation.state: {type: STATE, shape: [19]}\n"
        "  action: {type: ACTION, shape: [19]}\n"
    )
    checks = run(model, training_yaml(tmp_path, MODES["g1"]), data)
    row = next(c for c in checks if c.id == "contract.layout.frames:dataset")
    assert row.verdict == "mismatch" and row.expected == 14983 and row.actual == 899


def test_zero_std_and_equal_quantile_dims(real_data: Path, tmp_path: Path) -> None:
    """open_50: 12 action dims with std == 0 and 2 with q01 == q99 in stats.json (constant in the data too),
    and stats.json whose std disagrees with the data in actions[4], actions[6] and state[2], state[4]."""
    data = real_data / "yipiandanxinxiangyangkai__open_50"
    model = tmp_path / "card"
    model.mkdir()
    (model / "contract.yaml").write_text(
        "source: test\nnormalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
        "features:\n  state: {type: STATE, shape: [34]}\n"
        "  actions: {type: ACTION, shape: [34]}\n"
    )
    checks = {c.id: c for c in run(model, training_yaml(tmp_path, MODES["g1"]), data)}
    degenerate = checks["contract.normalization.degenerate:actions"]
    assert degenerate.verdict == "mismatch" and degenerate.severity == "soft"
    assert (
        degenerate.evidence["dims"] == [*range(14, 24), 28, 31]
        and degenerate.evidence["varying_in_data"] == []
    )
    stale = checks["contract.normalization.stale:actions"]
    assert stale.blocking and stale.evidence["per_stat_dims"] == {"std": [4, 6]}
    assert checks["contract.normalization.stale:state"].evidence["per_stat_dims"] == {"std": [2, 4]}
    quantile = training_yaml(tmp_path, {"STATE": "QUANTILES", "ACTION": "QUANTILES"})
    checks = {c.id: c for c in run(model, quantile, data)}
    row = checks["contract.normalization.degenerate:actions"]
    # q99 - q01 is exactly 0 in dims 28 and 31, and 3.9e-14 (near zero: same blow-up) in dims 14..23
    assert row.evidence["dims"] == [*range(14, 24), 28, 31]
    assert [d for d, v in zip(row.evidence["dims"], row.evidence["scale"], strict=True) if v == 0] == [28, 31]


def test_degenerate_scale_where_data_varies_is_hard(record, tmp_path: Path) -> None:
    model, training, data = record
    copy = copy_with(data, tmp_path / "flat", "action", lambda v: v)
    edit_stats(copy, lambda s: s["action"].__setitem__("q99", s["action"]["q01"]))
    row = hard(run(model, training, copy))["contract.normalization.degenerate:action"]
    assert row.evidence["varying_in_data"] == [0, 1, 2, 3, 4, 5]


def test_lerobot_key_renamed(real_data: Path, tmp_path: Path) -> None:
    """A LeRobot policy on open_50's `state`/`actions` keys: LeRobot matches by exact key."""
    checks = run(
        real_data / "Bestpart-Irene__RoboPour",
        real_data / "Bestpart-Irene__RoboPour/train_config.json",
        real_data / "yipiandanxinxiangyangkai__open_50",
    )
    found = hard(checks)
    assert "state" in found["contract.layout.key:observation.state"].message
    assert found["contract.layout.shape:observation.state"].actual == 34


def test_openpi_base_against_lerobot_dataset(real_data: Path, tmp_path: Path) -> None:
    """pi05 libero norm stats (8-dim state) against the 6-dim SO-101 record: the width is a hard stop."""
    a = read_model(real_data / "zwbx__openpi/assets/pi05_libero/physical-intelligence/libero/norm_stats.json")
    b = read_training(training_yaml(tmp_path, {}))
    checks, _ = reconcile(a, b, read_dataset(real_data / RECORD, OPTIONS), STAGE_CFG)
    found = {c.id for c in checks if c.blocking}
    assert {"contract.layout.shape:state", "contract.layout.shape:actions"} <= found
    assert next(c for c in checks if c.id == "contract.layout.key:state").evidence["matched_by"] == "role"


def test_padded_openpi_stats_are_soft(real_data: Path, tmp_path: Path) -> None:
    a = read_model(
        real_data / "littlespray__b1k-eval-utils/norm_stats.json",
        {"normalization_mapping": {"STATE": "QUANTILES", "ACTION": "QUANTILES"}},
    )
    b = read_training(training_yaml(tmp_path, {}))
    checks, _ = reconcile(a, b, read_dataset(real_data / RECORD, OPTIONS), STAGE_CFG)
    row = next(c for c in checks if c.id == "contract.reload.placeholders:state")
    assert row.severity == "soft" and row.evidence["zero_std_dims"] == list(range(23, 32))
