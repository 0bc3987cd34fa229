"""Dataset health rows on copies of real LeRobot datasets (v2.1 and v3.0), each with one planted fault:
the row, its severity and its evidence; the clean copies give no hard health row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.readers import read_model
from pipeline.readers.base import Contract
from pipeline.readers.dataset import read_dataset
from pipeline.record.records import Check
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.health_faults import DATASETS, FAULTS, planted

pytestmark = pytest.mark.skipif(
    not all(p.is_dir() for p in DATASETS.values()),
    reason=f"real LeRobot datasets not found under {next(iter(DATASETS.values())).parent}",
)
CHUNK = 50  # the model's chunk_size: a planted 20-frame episode is too short for it


def health(
    dataset: Path, tmp_path: Path, config: ContractConfig | None = None, cameras: tuple[str, ...] = ()
) -> dict[str, Check]:
    """The health rows for a LeRobot model that reads the state (and these cameras), read from its
    config.json by the model reader."""
    model = tmp_path / "model"
    model.mkdir(parents=True, exist_ok=True)
    inputs = {"observation.state": {"type": "STATE", "shape": [6]}}
    inputs |= {k: {"type": "VISUAL", "shape": [3, 480, 640]} for k in cameras}
    config_json = {"type": "act", "chunk_size": CHUNK, "n_obs_steps": 1, "input_features": inputs}
    (model / "config.json").write_text(json.dumps(config_json))
    a = read_model(model)
    config = config or ContractConfig()
    options = {"rank_error": 0.001, "dynamics_rows": 1000, "health_episodes": 1000}
    c = read_dataset(str(dataset), {**options, "health_gap_factor": config.health.gap_factor})
    rows = health_rows(Sources(a, Contract("B", "lerobot", ""), c, config))
    return {r.id: r for r in rows}


@pytest.mark.parametrize("version", sorted(DATASETS))
def test_a_clean_copy_gives_no_hard_health_row(version: str, tmp_path: Path) -> None:
    dataset, _ = planted(version, "clean", tmp_path / "data")
    before = {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()}
    rows = health(dataset, tmp_path)
    assert {p: p.read_bytes() for p in dataset.rglob("*") if p.is_file()} == before  # nothing modified
    assert not [r.id for r in rows.values() if r.blocking], [r.message for r in rows.values() if r.blocking]
    assert rows["contract.health.episodes"].verdict == "match"
    # the real copies ship no videos: nothing missing for a state-only model, unverifiable for a camera one
    assert rows["contract.health.videos"].verdict == "match"
    assert "nothing it reads is missing" in rows["contract.health.videos"].message
    cameras = tuple(
        k
        for k, f in read_dataset(str(dataset), {"rank_error": 0.1, "dynamics_rows": 10}).features.items()
        if f.role == "image"
    )
    if cameras:
        reading = health(dataset, tmp_path / "cam", cameras=cameras[:1])
        assert reading["contract.health.videos"].verdict == "unverifiable"


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("version", sorted(DATASETS))
def test_each_planted_fault_has_its_row(version: str, fault: str, tmp_path: Path) -> None:
    dataset, expected = planted(version, fault, tmp_path / "data")
    rows = health(dataset, tmp_path)
    _, row_id, severity = FAULTS[fault]
    row = rows[row_id]
    assert row.verdict == "mismatch" and row.severity == severity, row.message
    for key, value in expected.items():
        found = row.evidence.get(key, row.evidence.get("per_episode"))
        assert found == value or set(value) <= set(found), (key, value, row.evidence)
    if fault == "wrong_type":  # the column is named, and the time rows say why they could not run
        assert "timestamp is string" in row.message
        assert rows["contract.health.time.order"].verdict == "unverifiable"
    if fault == "short":
        assert rows["contract.health.episodes.length_outliers"].verdict == "mismatch"
        assert f"window of {CHUNK} frames" in row.message


def test_the_configured_gap_factor_is_the_one_counted(tmp_path: Path) -> None:
    dataset, _ = planted("v3.0", "dropped_frames", tmp_path / "data")  # one step of 4 / fps
    config = ContractConfig()
    config.health.gap_factor = 5.0
    row = health(dataset, tmp_path, config)["contract.health.time.gaps"]
    assert row.verdict == "match" and "5.0 / fps" in row.message
