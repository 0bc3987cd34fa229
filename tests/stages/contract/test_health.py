"""Dataset health rows on copies of real LeRobot datasets (v2.1 and v3.0), each with one planted fault:
the row, its severity and its evidence; the clean copies give no hard health row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.readers.base import Contract, Feature
from pipeline.readers.dataset import read_dataset
from pipeline.records import Check
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.rows import Sources
from tests.stages.contract.health_faults import DATASETS, FAULTS, planted

pytestmark = pytest.mark.skipif(
    not all(p.is_dir() for p in DATASETS.values()),
    reason=f"real LeRobot datasets not found under {next(iter(DATASETS.values())).parent}",
)
CHUNK = 50  # the model's chunk_size: a planted 20-frame episode is too short for it


def health(dataset: Path, tmp_path: Path, config: ContractConfig | None = None) -> dict[str, Check]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"chunk_size": CHUNK, "n_obs_steps": 1}))
    a = Contract("A", "lerobot", str(model), {"observation.state": Feature("observation.state", "state")})
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
    assert rows["contract.health.videos"].verdict == "unverifiable"  # the real copies ship no videos


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
