"""Shipped quantiles on real LeRobot v3.0 data (record-test): LeRobot's average of per-episode quantiles
is what every LeRobot dataset is normalised with, and is judged as that average, not by its rank in the
pooled data; a quantile that is not what it claims to be is still a stale row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers import read_dataset
from pipeline.record.records import Check
from tests.stages.contract.helpers import OPTIONS, edit_stats
from tests.stages.contract.test_clean_corpus import rows_of

RECORD = "SamueleSandrini__record-test"
ROW = "contract.normalization.quantiles:action"


def quantile_row(dataset: Path) -> Check:
    return next(c for c in rows_of({"dataset": {"path": str(dataset)}}) if c.id == ROW)


def test_the_shipped_average_of_episode_quantiles_is_judged_as_that_average(real_data: Path) -> None:
    row = quantile_row(real_data / RECORD)
    assert row.verdict == "match", row.message
    assert "averaged over the 4 episodes (weighted by length)" in row.message
    assert row.evidence["is_average"] and row.evidence["episodes_compared_with_their_data"] == 4
    # and it is not the pooled data's quantile: the rank test alone would have called it off
    ranks = read_dataset(real_data / RECORD, OPTIONS).shipped_ranks["action"]["q01"]
    assert (ranks[:, 0] > 0.01 + 0.05).any()


def test_a_stats_json_quantile_that_is_not_the_episodes_average_is_stale(
    real_data: Path, tmp_path: Path
) -> None:
    dataset = shutil.copytree(real_data / RECORD, tmp_path / "d")

    def edit(stats: dict) -> None:
        stats["action"]["q01"][3] = stats["action"]["max"][3]  # q01 where the data's max is

    edit_stats(dataset, edit)
    row = quantile_row(dataset)
    assert row.verdict == "mismatch" and row.evidence["per_episode"]["off_average"] == {"q01": [3]}
    assert "nor are they the length-weighted average of meta/episodes' per-episode quantiles" in row.message


def test_an_episode_quantile_outside_its_own_data_is_stale(real_data: Path, tmp_path: Path) -> None:
    """Episode 1's q99 of dim 0 moved beyond its data, stats.json kept the average of the episodes'."""
    dataset = shutil.copytree(real_data / RECORD, tmp_path / "d")
    path = dataset / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    name = "stats/action/q99"
    values = table.column(name).to_pylist()
    values[1][0] = table.column("stats/action/max").to_pylist()[1][0] + 50.0
    table = table.set_column(
        table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type)
    )
    pq.write_table(table, path)
    counts = np.array([c[0] for c in table.column("stats/action/count").to_pylist()], dtype=float)
    average = (np.array(values) * counts[:, None]).sum(axis=0) / counts.sum()
    stats = json.loads((dataset / "meta" / "stats.json").read_text())
    stats["action"]["q99"] = average.tolist()
    (dataset / "meta" / "stats.json").write_text(json.dumps(stats))
    row = quantile_row(dataset)
    assert row.verdict == "mismatch" and row.severity == "soft", row.message
    assert row.evidence["episodes_outside_their_data"] == {1: {"q99": [0]}}
    assert "episode 1: q99 dim(s) [0]" in row.message
