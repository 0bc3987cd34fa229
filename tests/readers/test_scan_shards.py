"""The contract's data pass split over array tasks and merged (issue 35) against one pass over the same
dataset: a LeRobot v3.0 dataset of 6 data files (`benchmarks/make_large_dataset.py`, a second to write),
its tasks run here one after another as the array would run them (the Slurm array itself is in
tests/stages/contract/test_shards_launch.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from benchmarks.make_large_dataset import Shape, make
from pipeline.readers import read_dataset
from pipeline.readers import stats as stats_module
from pipeline.readers.base import DatasetContract
from pipeline.readers.lerobot_dataset import prepare
from pipeline.readers.scan import scan_for
from pipeline.readers.scan_shards import merge, split, task_count
from pipeline.readers.shard_partial import PARTIAL
from pipeline.readers.shard_partial import read as read_partial
from pipeline.record.records import Check
from pipeline.stages import StageContext
from pipeline.stages.contract import scan_options, shards
from pipeline.stages.contract.config import ContractConfig

SHAPE = Shape(episodes=40, length=30, state_dim=4, action_dim=3, cameras=0, episodes_per_file=7)
CONFIG = ContractConfig(shard_rows=300)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shards") / "ds"
    make(root, SHAPE)
    return root


def sharded(root: Path, run: Path, drop: int | None = None) -> tuple[DatasetContract, Check]:
    """Every task of the array in turn (task `drop` left out, as if it crashed), then the merge."""
    cfg = OmegaConf.create({"dataset": {"path": str(root)}})
    count = shards.tasks(CONFIG, cfg)
    opts = scan_options(CONFIG)
    for i in range(count):
        if i != drop:
            shards.run_part(cfg, StageContext(run, "contract", f"task-{i:04d}"), opts, count)
    return shards.read_sharded(root, opts, StageContext(run, "contract"), count, CONFIG.shard_rows)


def same(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two health facts differ (floats of summed squares within rounding, all else exactly)."""
    if isinstance(a, dict):
        return [d for k in sorted(set(a) | set(b)) for d in same(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return [] if np.allclose(a, b, rtol=1e-12, atol=0) else [path]
    if isinstance(a, np.ndarray):
        return [] if np.array_equal(a, b) else [path]
    return [] if a == b else [path]


def rank_error(column: np.ndarray, value: float, p: float) -> float:
    """How far `value` sits from rank p of the column, as a share of its rows."""
    ordered = np.sort(column.astype(np.float32))
    lo, hi = (
        np.searchsorted(ordered, np.float32(value), "left"),
        np.searchsorted(ordered, np.float32(value), "right"),
    )
    target = p * (len(ordered) - 1)
    return max(0.0, lo - 1 - target, target - hi) / len(ordered)


def test_tasks_and_ranges() -> None:
    assert task_count(1200, 6, 300) == 4 and task_count(1200, 2, 300) == 2
    assert task_count(300, 6, 300) == 1 and task_count(10**9, 6, 0) == 1
    assert split([210] * 5 + [150], 4) == [(0, 2), (2, 3), (3, 5), (5, 6)]
    assert split([1000, 10, 10], 3) == [(0, 1), (1, 1), (1, 3)]  # a task may get no file


def test_merged_scan_is_one_pass(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passes: list[str] = []  # a second pass over the data, for quantiles the sketch cells did not pin
    refine = stats_module._refine
    monkeypatch.setattr(stats_module, "_refine", lambda *a: passes.append("again") or refine(*a))
    merged, row = sharded(dataset, tmp_path)
    merged_passes, passes[:] = len(passes), []
    single = read_dataset(str(dataset), scan_options(CONFIG))
    # at 300 rows a task, a task's heavy buckets (rank error x 300 / 2 < 1 value) are not the merged
    # quantiles' buckets everywhere: those values count as missed, and one more pass pins them
    assert len(passes) == 0 and merged_passes <= 1
    contract, _, _ = prepare(dataset)
    parts = [read_partial(tmp_path / f"parts/contract/task-{i:04d}/{PARTIAL}") for i in range(4)]
    scan = merge(scan_for(contract, scan_options(CONFIG)), parts)
    for key, fs in scan.sketches.items():  # the tasks' level-2 cells, merged, keep one pass's invariant
        sk = fs.sketch
        assert any(sk.tracked), key
        for d, tracked in enumerate(sk.tracked):
            for bucket, missed in tracked.items():
                slot = int(sk.lut[d, bucket])
                assert missed == sk.hist[d, bucket] - sk.mid.counts[slot].sum() >= 0, (key, d, bucket)
    assert (row.id, row.verdict, row.actual) == ("contract.shards", "match", 4)
    assert (merged.rows, merged.episodes) == (single.rows, single.episodes) == (1200, 40)
    for key, stats in single.recomputed.items():
        for stat in ("min", "max", "count", "nonfinite"):  # exact merges
            assert np.array_equal(merged.recomputed[key][stat], stats[stat]), (key, stat)
        for stat in ("mean", "std"):  # Chan's merge: the same sums in another grouping
            np.testing.assert_allclose(merged.recomputed[key][stat], stats[stat], rtol=1e-12)
    columns = {k: np.concatenate([
        np.stack(pq.read_table(f, columns=[k]).column(k).to_numpy(zero_copy_only=False))
        for f in sorted((dataset / "data").rglob("*.parquet"))
    ]) for k in single.recomputed}  # fmt: skip
    for key, values in columns.items():
        for stat, p in (("q01", 0.01), ("q10", 0.1), ("q50", 0.5), ("q90", 0.9), ("q99", 0.99)):
            for d in range(values.shape[1]):
                error = rank_error(values[:, d], merged.recomputed[key][stat][d], p)
                assert error <= CONFIG.rank_error + 1 / len(values), (key, stat, d, error)
    for key in single.dynamics:
        assert np.array_equal(merged.dynamics[key], single.dynamics[key])
    # every fact exact but the profile's row sample, which is a bounded sample either way: its rows are
    # the dataset's own, as many as one pass keeps at most
    sample, one = merged.health.pop("sample"), single.health.pop("sample")
    assert same(merged.health, single.health) == []
    for key, part in sample.items():
        assert set(part) == {"values", "steps"} and 0 < len(part["values"]) <= 2 * len(one[key]["values"]) + 8
    assert merged.health["rows"] == 1200 and len(merged.health["episodes"]["index"]) == 40


def test_a_crashed_task_or_a_split_episode_reads_in_one_pass(dataset: Path, tmp_path: Path) -> None:
    single = read_dataset(str(dataset), scan_options(CONFIG))
    merged, row = sharded(dataset, tmp_path / "crash", drop=2)
    assert (row.verdict, row.severity, row.actual) == ("unverifiable", "soft", 1)
    assert "task-0002" in row.message and "one pass" in row.message
    assert np.array_equal(merged.recomputed["action"]["mean"], single.recomputed["action"]["mean"])
    split_root = tmp_path / "split"
    shutil.copytree(dataset, split_root)
    one, two = sorted((split_root / "data").rglob("*.parquet"))[1:3]  # tasks 0 and 1 meet between them
    head, tail = pq.read_table(one), pq.read_table(two)
    pq.write_table(pa.concat_tables([head, tail.slice(0, 15)]), one)  # episode 14's first 15 rows moved
    pq.write_table(tail.slice(15), two)
    merged, row = sharded(split_root, tmp_path / "split-run")
    assert row.verdict == "unverifiable" and "episode 14 lies in two tasks' files" in row.message
    assert merged.rows == 1200 and merged.episodes == 40
