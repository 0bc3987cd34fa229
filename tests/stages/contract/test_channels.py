"""Dead channels found by their own command, constants the normalizer floors, and stale stats judged by
their effect: each fault planted into a whole copy of a real dataset (v2.1 26-d, v3.0 34-d and 6-d, and a
v3.0 19-d one without dim names), found by a row naming its dim; the unplanted copies raise nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from pipeline.record.records import Check
from pipeline.stages.contract import load_sources, reconcile
from pipeline.stages.contract.stale_effect import judged, roundoff_constants
from tests.conftest import REAL_DATA
from tests.stages.contract.health_faults import rewritten
from tests.stages.contract.helpers import STAGE_CFG, training_yaml

# (dataset, state key, action key, the dim planted, its name or None)
PLANTED = {
    "v2.1 26-d": ("YifanTian07__G1-policy-train", "observation.state", "action", 20, "kRightHandPinky"),
    "v3.0 34-d": ("yipiandanxinxiangyangkai__open_50", "state", "actions", 26, None),
    "v3.0 6-d": ("SamueleSandrini__record-test", "observation.state", "action", 5, "gripper.pos"),
    "v3.0 19-d no names": (
        "rerun-io__rerun/tests/assets/lerobot/v30_apple_storage",
        "observation.state",
        "action",
        3,
        None,
    ),
}
needs_real = pytest.mark.skipif(
    not (REAL_DATA / PLANTED["v2.1 26-d"][0]).is_dir(), reason=f"real test files not present: {REAL_DATA}"
)


def rows(path: Path, training: Path | None = None) -> dict[str, Check]:
    inputs: dict[str, Any] = {"dataset": {"path": str(path)}}
    if training is not None:
        inputs["training"] = {"path": str(training)}
    a, b, c, extra = load_sources(OmegaConf.create(inputs), STAGE_CFG)
    checks, _ = reconcile(a, b, c, STAGE_CFG)
    return {ch.id: ch for ch in checks + extra}


def plant(name: str | Path, dest: Path, key: str, dim: int, value: float) -> Path:
    """A whole copy of the real dataset with `key`'s dim held at `value` in every row, and its shipped
    stats for that dim written from the held data as the recording tool would (std 0)."""
    rewritten(REAL_DATA / name, dest, lambda cols: cols[key].__setitem__((slice(None), dim), value))
    held = {"mean": value, "std": 0.0, "min": value, "max": value, "q01": value, "q99": value}
    if (dest / "meta/stats.json").is_file():
        stats = json.loads((dest / "meta/stats.json").read_text())
        for stat, number in held.items():
            if stat in stats[key]:
                stats[key][stat][dim] = number
        (dest / "meta/stats.json").write_text(json.dumps(stats))
    else:
        path = dest / "meta/episodes_stats.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            for stat, number in held.items():
                if stat in line["stats"][key]:
                    line["stats"][key][stat][dim] = number
        path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return dest


@needs_real
@pytest.mark.parametrize("case", list(PLANTED))
def test_a_dead_sensor_is_found_by_its_own_command(case: str, tmp_path: Path) -> None:
    name, state, action, dim, label = PLANTED[case]
    found = rows(plant(name, tmp_path / "dead", state, dim, 0.0))
    row = found[f"contract.health.dead_sensor:{state}"]
    assert (row.verdict, row.severity) == ("mismatch", "hard"), row.message
    assert row.evidence["dims"] == [dim] and "dead sensor" in row.message
    assert (
        f"dim {dim}" in row.message and "becomes 1e+08" in row.message and "every one of the" in row.message
    )
    if label:
        assert label in row.message
    assert f"contract.normalization.constant:{state}" not in found  # a dataset alone: no mode to judge


@needs_real
def test_an_unused_command_is_soft_and_named(tmp_path: Path) -> None:
    name, state, action, dim, label = PLANTED["v3.0 6-d"]
    row = rows(plant(name, tmp_path / "unused", action, dim, 0.907))[
        f"contract.health.unused_command:{action}"
    ]
    assert (row.verdict, row.severity) == ("mismatch", "soft") and row.evidence["dims"] == [dim]
    assert f"dim {dim} ({label})" in row.message and "0.907" in row.message


@needs_real
def test_a_constant_input_the_normalizer_floors_is_a_hazard_in_model_units(tmp_path: Path) -> None:
    """State and action both held (no dead sensor: padding-like) with MEAN_STD for the state: hard."""
    name, state, action, dim, label = PLANTED["v2.1 26-d"]
    copy = plant(name, tmp_path / "flat", state, dim, 0.5)
    plant(copy, tmp_path / "both", action, dim, 0.5)
    training = training_yaml(tmp_path, {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"})
    found = rows(tmp_path / "both", training)
    row = found[f"contract.normalization.constant:{state}"]
    assert (row.verdict, row.severity) == ("mismatch", "hard") and row.evidence["dims"] == [dim]
    assert "becomes 1e+08" in row.message and label in row.message and "IDENTITY" in row.message
    assert found[f"contract.health.dead_sensor:{state}"].verdict == "match"


def test_a_constant_dims_float32_roundoff_is_not_stale() -> None:
    """The issue's numbers: a constant 0.907 whose shipped mean is off by 1.3e-5 and std is 1.3e-5."""
    rec = {
        "mean": np.array([0.907, 1.0]),
        "std": np.array([0.0, 0.5]),
        "min": np.array([0.907, 0.0]),
        "max": np.array([0.907, 2.0]),
    }
    shipped = {**rec, "mean": np.array([0.907013, 1.0]), "std": np.array([1.3e-5, 0.5])}
    assert roundoff_constants(shipped, rec) == {0}


def test_stale_stats_are_judged_by_how_far_they_move_the_normalized_data() -> None:
    rec = {"mean": np.array([0.0]), "std": np.array([1.0]), "min": np.array([-3.0]), "max": np.array([3.0])}
    small = judged({**rec, "mean": np.array([0.2])}, rec, "MEAN_STD", [0])
    assert small["largest"] == pytest.approx(0.2, rel=1e-3)
    wide = judged({**rec, "std": np.array([3.0])}, rec, "MEAN_STD", [0])
    assert wide["largest"] == pytest.approx(2.0, rel=1e-3)  # x = 3: 1 instead of 3
    assert judged({**rec, "std": np.array([3.0])}, rec, "QUANTILES", [0])["largest"] == 0.0


@needs_real
@pytest.mark.parametrize(("scale", "severity"), [(1.15, "soft"), (3.0, "hard")])
def test_stale_std_on_real_data_blocks_only_by_its_effect(
    scale: float, severity: str, tmp_path: Path
) -> None:
    name, state, action, dim, label = PLANTED["v3.0 6-d"]
    copy = tmp_path / "stale"
    rewritten(REAL_DATA / name, copy, lambda cols: None)
    stats = json.loads((copy / "meta/stats.json").read_text())
    stats[state]["std"][dim] *= scale
    (copy / "meta/stats.json").write_text(json.dumps(stats))
    row = rows(copy)[f"contract.normalization.stale:{state}"]
    assert (row.verdict, row.severity) == ("mismatch", severity), row.message
    assert row.evidence["effect"]["dim"] == dim and "move the normalized values by up to" in row.message


def test_one_sample_is_judged_by_what_it_does_to_the_normalizer() -> None:
    """A 50-sd sample sets the range MIN_MAX divides by (the other samples squeezed into a tenth of it)
    and inflates the std; a sample inside the others' range moves neither by more than round-off."""
    from pipeline.stages.contract.stale_effect import removal_effect

    x = np.random.default_rng(4).normal(size=5000)
    spiked = np.r_[x, 50.0]
    stats = {"mean": spiked.mean(), "std": spiked.std(), "min": spiked.min(), "max": spiked.max()}
    rest = (float(x.min()), float(x.max()))
    effect, mode = removal_effect(stats, len(spiked), 50.0, rest, ["MEAN_STD", "MIN_MAX"])
    assert mode == "MIN_MAX" and effect > 1.5
    effect, mode = removal_effect(stats, len(spiked), 50.0, rest, ["MEAN_STD"])
    expected = np.abs((np.array(rest) - spiked.mean()) / spiked.std() - (np.array(rest) - x.mean()) / x.std())
    assert mode == "MEAN_STD" and effect == pytest.approx(expected.max(), rel=1e-3)
    inside = np.r_[x, 0.5]
    stats = {"mean": inside.mean(), "std": inside.std(), "min": inside.min(), "max": inside.max()}
    effect, _ = removal_effect(stats, len(inside), 0.5, rest, ["MEAN_STD", "MIN_MAX"])
    assert effect < 1e-3
