"""Diagnoses, not only verdicts: the stale-stats row gives shipped vs recomputed values, the ratio and
the likely cause (float32 cancellation where the numbers show it), and rows naming a dim carry the A, B
and C values for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.readers import read_dataset
from pipeline.stages.contract.drift import diagnose
from tests.stages.contract.helpers import OPTIONS, STAGE_CFG, card_from, copy_with, hard, run, training_yaml

RECORD = "SamueleSandrini__record-test"
OPEN50 = "yipiandanxinxiangyangkai__open_50"
QUANTILES = {"STATE": "QUANTILES", "ACTION": "QUANTILES"}
MEAN_STD = {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}


def _f32_naive_std(x: np.ndarray) -> float:
    """How a float32 stats tool computes std: sqrt(E[x^2] - E[x]^2), every step in float32."""
    x = x.astype(np.float32)
    n = np.float32(len(x))
    mean = np.float32(0)
    sq = np.float32(0)
    for v in x:  # sequential float32 accumulation, as a streaming tool does
        mean += v
        sq += v * v
    mean, sq = mean / n, sq / n
    return float(np.sqrt(max(sq - mean * mean, np.float32(0))))


def test_diagnose_constructed_float32_cancellation() -> None:
    rng = np.random.default_rng(0)
    x = (152.5 + 0.01 * rng.standard_normal(20000)).astype(np.float32)
    rec = {
        k: np.array([v]) for k, v in (("mean", x.astype(np.float64).mean()), ("std", x.std(dtype=np.float64)))
    }
    shipped = {"mean": rec["mean"] * (1 + 3e-7), "std": np.array([_f32_naive_std(x)])}
    ratio = shipped["std"][0] / rec["std"][0]
    assert ratio > 1.1 or ratio < 1 / 1.1  # the float32 tool really is off here
    item = diagnose(shipped, rec, {"std": [0]}, STAGE_CFG.stale, ["joint_5"])[0]
    assert item["cause"] == "float32_cancellation"
    assert item["stats"]["std"]["shipped"] == pytest.approx(shipped["std"][0], rel=1e-5)
    assert item["stats"]["std"]["recomputed"] == pytest.approx(rec["std"][0], rel=1e-5)
    assert "float32 cancellation" in item["text"] and "float64 fixes it" in item["text"]
    # the same std error on a centred dim is not cancellation, and a moved mean is other data
    centred = {"mean": np.array([0.001]), "std": np.array([0.01])}
    assert (
        diagnose(
            {"mean": centred["mean"], "std": shipped["std"]}, centred, {"std": [0]}, STAGE_CFG.stale, None
        )[0]["cause"]
        == "std_only"
    )
    moved = {"mean": rec["mean"] + 1.0, "std": shipped["std"]}
    assert diagnose(moved, rec, {"std": [0], "mean": [0]}, STAGE_CFG.stale, None)[0]["cause"] == "other_data"


def test_stale_row_on_a_float32_written_copy(real_data: Path, tmp_path: Path) -> None:
    """The record arm with one action dim re-centred at 500 (spread 0.17, |mean|/std ~ 3000) and its
    stats written by a float32 tool: the stale row gives shipped vs recomputed std and names the cause.
    Trained with MEAN_STD, which reads that std (under QUANTILES it would move nothing: soft)."""
    data, out = real_data / RECORD, tmp_path / "rec"
    model, training = card_from(data, out / "card", MEAN_STD), training_yaml(out, MEAN_STD)

    def recentre(values: np.ndarray) -> np.ndarray:
        values[:, 0] = 500.0 + 0.013 * values[:, 0]
        return values

    copy = copy_with(data, out / "copy", "action", recentre)
    column = read_dataset(copy, OPTIONS)
    stats_path = copy / "meta" / "stats.json"
    stats = json.loads(stats_path.read_text())
    x = np.concatenate(
        [
            np.stack(pq.read_table(p, columns=["action"]).column("action").to_numpy(zero_copy_only=False))[
                :, 0
            ]
            for p in sorted((copy / "data").rglob("*.parquet"))
        ]
    )
    rec = column.recomputed["action"]
    for name in ("mean", "min", "max", "q01", "q10", "q50", "q90", "q99"):
        stats["action"][name][0] = float(np.asarray(rec[name])[0])
    stats["action"]["std"][0] = _f32_naive_std(x)
    stats_path.write_text(json.dumps(stats))
    checks = {c.id: c for c in run(model, training, copy)}
    row = checks["contract.normalization.stale:action"]
    assert row.blocking, (row.message, row.evidence)
    assert row.evidence["effect"]["mode"] == "MEAN_STD" and row.evidence["effect"]["largest"] > 0.5
    assert row.evidence["per_stat_dims"] == {"std": [0]}
    item = row.evidence["diagnosis"][0]
    assert item["cause"] == "float32_cancellation" and item["name"] == "shoulder_pan.pos"
    assert f"std shipped {stats['action']['std'][0]:.6g} vs recomputed" in row.message
    assert "float32 cancellation" in row.message and "float64" in row.message
    assert "stats of other data" not in row.message


def test_open50_stale_std_is_float32_cancellation(real_data: Path, tmp_path: Path) -> None:
    """open_50 as published: state dim 4 (mean 152.51, data std 0.0100) ships std 0.0590; actions dim 4
    ships 0.0730 against 0.0091; both means agree to ~1e-6 relative. Actions dim 6 (|mean|/std 381) is a
    std-only disagreement without the cancellation signature."""
    data = real_data / OPEN50
    model = tmp_path / "card"
    model.mkdir()
    (model / "contract.yaml").write_text(
        "source: test\nnormalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
        "features:\n  state: {type: STATE, shape: [34]}\n  actions: {type: ACTION, shape: [34]}\n"
    )
    checks = {c.id: c for c in run(model, training_yaml(tmp_path, MEAN_STD), data)}
    state = checks["contract.normalization.stale:state"]
    four = state.evidence["diagnosis"][4]
    assert four["cause"] == "float32_cancellation" and four["name"] == "left.joint_5.pos"
    assert four["stats"]["std"]["shipped"] == pytest.approx(0.05899, rel=1e-3)
    assert four["stats"]["std"]["recomputed"] == pytest.approx(0.009996, rel=1e-3)
    assert four["stats"]["std"]["ratio"] == pytest.approx(5.90, rel=1e-2)
    assert four["abs_mean_over_std"] > 1e4 and four["mean_rel_diff"] < 1e-5
    assert "std shipped 0.0589888 vs recomputed 0.00999614 (5.9x)" in state.message
    assert "float32 cancellation" in state.message and "float64 fixes it" in state.message
    assert state.actual == "2 dim(s) stale (likely cause: float32_cancellation)"
    actions = checks["contract.normalization.stale:actions"]
    assert actions.evidence["diagnosis"][4]["cause"] == "float32_cancellation"
    assert actions.evidence["diagnosis"][4]["stats"]["std"]["ratio"] == pytest.approx(8.04, rel=1e-2)
    assert actions.evidence["diagnosis"][6]["cause"] == "std_only"
    values = actions.evidence["values"][4]
    assert set(values) >= {"A", "B", "C", "C_shipped"} and values["C"]["mean"] == pytest.approx(
        152.298, abs=1e-3
    )


def test_rows_naming_dims_carry_a_b_c_values(real_data: Path, tmp_path: Path) -> None:
    """Swap and unit rows on the record arm: per named dim, A's stats, B's mode, C's data and shipped."""
    data, out = real_data / RECORD, tmp_path / "rec"
    model, training = card_from(data, out / "card", QUANTILES), training_yaml(out, QUANTILES)

    def swap(values: np.ndarray) -> np.ndarray:
        values[:, [3, 4]] = values[:, [4, 3]]
        values[:, 1] *= np.pi / 180
        return values

    found = hard(run(model, training, copy_with(data, out / "swap", "observation.state", swap)))
    perm = found["contract.layout.permutation:observation.state"].evidence["values"]
    assert set(perm) == {3, 4} and perm[3]["C_dim"] == 4 and perm[3]["B"]["mode"] == "QUANTILES"
    assert perm[3]["A"]["mean"] == pytest.approx(perm[3]["C"]["mean"], rel=1e-3)  # A's dim 3 is C's dim 4
    units = found["contract.units.scale:observation.state"].evidence["values"]
    assert list(units) == [1] and units[1]["C"]["std"] == pytest.approx(
        units[1]["A"]["std"] * np.pi / 180, rel=1e-3
    )
