"""Conventions that keep names, shapes and spread, planted in copies of two real datasets (the 6-dim
SO-101 arm and the 26-dim G1 humanoid, whose actions are absolute joint targets): one dim sign-inverted,
one dim offset by a constant, actions replaced by per-episode state steps. Each gives its own hard (or,
for the offset, configured) row naming the dim and the relation; the unmodified data gives none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.readers import read_dataset, read_model, read_training
from pipeline.stages.config import typed
from pipeline.stages.contract import reconcile
from pipeline.stages.contract.config import ContractConfig
from tests.stages.contract.helpers import (
    OPTIONS,
    card_from,
    copy_as_delta,
    copy_with,
    hard,
    run,
    training_yaml,
)

CASES = {
    # dataset, modes, the action dim to plant in, its name, a calibration offset of ~3 std there
    "record": ("SamueleSandrini__record-test", "QUANTILES", 2, "elbow_flex.pos", 100.0),
    "g1": ("YifanTian07__G1-policy-train", "MEAN_STD", 3, "kLeftElbow", 0.2),
}
STALE = "contract.normalization.stale:action"  # the copy's stats.json still describes the original


@pytest.fixture(params=sorted(CASES))
def case(request, real_data: Path, tmp_path: Path) -> dict:
    name, mode, dim, joint, offset = CASES[request.param]
    modes = {"STATE": mode, "ACTION": mode}
    data, out = real_data / name, tmp_path / request.param
    model, training = card_from(data, out, modes), training_yaml(out, modes)
    return {
        "model": model,
        "training": training,
        "data": data,
        "dim": dim,
        "joint": joint,
        "offset": offset,
        "out": out,
        "modes": modes,
    }


def _edit(dim: int, fn):
    def edit(values: np.ndarray) -> np.ndarray:
        values[:, dim] = fn(values[:, dim])
        return values

    return edit


def test_unmodified_copies_have_no_convention_row(case) -> None:
    checks = run(case["model"], case["training"], case["data"])
    assert hard(checks) == {}, [c.message for c in checks if c.blocking]
    ids = {c.id for c in checks}
    assert not any(i.startswith(("contract.units.sign", "contract.units.offset")) for i in ids)
    relation = next(c for c in checks if c.id == "contract.units.action_relation:action")
    assert relation.verdict == "match" and relation.actual == "absolute"


def test_sign_inverted_dim_is_a_hard_row_naming_it(case) -> None:
    d = case["dim"]
    copy = copy_with(case["data"], case["out"] / "neg", "action", _edit(d, lambda v: -v))
    found = hard(run(case["model"], case["training"], copy))
    row = found.pop("contract.units.sign:action")
    assert set(found) <= {STALE}
    assert list(row.evidence["dims"]) == [d] and case["joint"] in row.message
    item = row.evidence["dims"][d]
    assert item["relation"] == "C = -A" and item["deviation_mirrored"] < 0.05
    assert item["A"]["mean"] == pytest.approx(-item["C"]["mean"], rel=1e-4)
    assert item["A"]["min"] == pytest.approx(-item["C"]["max"], rel=1e-4)
    assert item["std_ratio_C_over_A"] == pytest.approx(1.0, abs=1e-3)
    assert item["data_corr_action_next_state"] < -0.9  # the data itself: the action runs against the state
    assert f"dim {d} ({case['joint']}): A mean" in row.message  # the A and C numbers in the message
    assert "layout.permutation" not in " ".join(found)


def test_constant_offset_is_its_own_configured_row(case) -> None:
    d, k = case["dim"], case["offset"]
    copy = copy_with(case["data"], case["out"] / "off", "action", _edit(d, lambda v: v + k))
    found = hard(run(case["model"], case["training"], copy))
    row = found.pop("contract.units.offset:action")
    assert set(found) <= {STALE} and row.severity == "hard"
    item = row.evidence["dims"][d]
    assert list(row.evidence["dims"]) == [d] and case["joint"] in row.message
    assert item["relation"].startswith("C = A +") and float(item["relation"][5:]) == pytest.approx(
        k, rel=1e-3
    )
    assert item["C"]["mean"] - item["A"]["mean"] == pytest.approx(k, rel=1e-3)
    soft = typed(ContractConfig, {"offset": {"severity": "soft"}}, "stages.contract")
    checks, _ = reconcile(
        read_model(case["model"]), read_training(case["training"]), read_dataset(copy, OPTIONS), soft
    )
    row = next(c for c in checks if c.id == "contract.units.offset:action")
    assert row.verdict == "mismatch" and row.severity == "soft" and not row.blocking


def test_delta_actions_on_absolute_targets_say_which_relation_held(case) -> None:
    copy = copy_as_delta(case["data"], case["out"] / "delta", "action", "observation.state")
    checks = run(case["model"], case["training"], copy)
    found = hard(checks)
    row = found.pop("contract.units.action_relation:action")
    assert set(found) <= {STALE}
    assert row.expected == "absolute" and row.actual == "delta"
    assert "s[t+1] - s[t]" in row.message and "held (median corr 1.000" in row.message
    assert row.evidence["C"]["median_corr"]["step_forward"] > 0.99
    assert row.evidence["C"]["median_corr"]["next_state"] < 0.3
    # the spread rows leave the dims to the relation row (no "m_vs_cm" unit factor for a delta)
    assert not any(c.id.startswith("contract.units.scale") and c.verdict == "mismatch" for c in checks)


def test_reverse_base_delta_dataset_absolute(case) -> None:
    """A base card built on the delta copy (actions centred on 0, narrow) against the original data."""
    copy = copy_as_delta(case["data"], case["out"] / "delta", "action", "observation.state")
    base = card_from(copy, case["out"] / "delta_card", case["modes"])
    row = hard(run(base, case["training"], case["data"]))["contract.units.action_relation:action"]
    assert row.expected == "delta" and row.actual == "absolute" and "action[t] ~ s[t+1] held" in row.message


def test_every_dim_spread_changed_at_once_is_one_feature_row(real_data: Path, tmp_path: Path) -> None:
    """All six arm actions at 0.05x the base's spread (no unit factor): one whole-feature row, not six."""
    name, mode, *_ = CASES["record"]
    modes = {"STATE": mode, "ACTION": mode}
    data, out = real_data / name, tmp_path / "record"
    model, training = card_from(data, out, modes), training_yaml(out, modes)
    checks = run(model, training, copy_with(data, out / "narrow", "action", lambda v: v * 0.05))
    found = hard(checks)
    row = found.pop("contract.units.scale_feature:action")
    assert set(found) <= {STALE}
    assert "every dim (6) spreads 0.05-0.05x" in row.message and row.severity == "hard"
    assert sorted(row.evidence["values"]) == list(range(6))
    ids = {c.id for c in checks if c.verdict == "mismatch"}
    assert not ids & {"contract.units.scale_unexplained:action", "contract.normalization.shift:action"}
