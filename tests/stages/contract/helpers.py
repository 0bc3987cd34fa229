"""Shared helpers for the contract stage tests: a contract card made from a dataset's own stats,
a training YAML, copies of real datasets with planted faults, and one-call reconciliation."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipeline.readers import ScanOptions, read_dataset, read_model, read_training
from pipeline.record.records import Check
from pipeline.stages.config import typed
from pipeline.stages.contract import reconcile
from pipeline.stages.contract.config import ContractConfig

REPO = Path(__file__).resolve().parents[3]
STAGE_CFG = typed(ContractConfig, {}, "stages.contract")
OPTIONS = ScanOptions.of(STAGE_CFG)  # the dataset scan with the stage's own thresholds


def card_from(dataset: Path, out: Path, modes: dict[str, str]) -> Path:
    """A contract card whose expectations are the dataset's own recomputed stats (a consistent base)."""
    c = read_dataset(dataset, OPTIONS)
    features = {}
    for key, f in c.features.items():
        if f.role in ("state", "action") and key in c.recomputed:
            stats = {
                s: np.asarray(c.recomputed[key][s]).tolist()
                for s in ("mean", "std", "min", "max", "q01", "q99")
            }
            features[key] = {"type": f.type, "shape": [f.dim], "stats": stats}
    out.mkdir(parents=True, exist_ok=True)
    (out / "contract.yaml").write_text(
        yaml.safe_dump(
            {
                "source": f"stats recomputed from {dataset.name}",
                "normalization_mapping": modes,
                "features": features,
            }
        )
    )
    return out


def training_yaml(out: Path, modes: dict[str, str], **extra: object) -> Path:
    path = out / "training.yaml"
    path.write_text(yaml.safe_dump({"policy": {"normalization_mapping": modes}, **extra}))
    return path


def copy_with(dataset: Path, out: Path, column: str, edit: Callable[[np.ndarray], np.ndarray]) -> Path:
    """Copy a LeRobot dataset and rewrite one vector column in every data file (same row groups)."""
    shutil.copytree(dataset, out)
    for path in sorted((out / "data").rglob("*.parquet")):
        handle = pq.ParquetFile(path)
        groups = [handle.read_row_group(i) for i in range(handle.num_row_groups)]
        writer = None
        for table in groups:
            col = table.column(column).combine_chunks()
            values = col.flatten().to_numpy().reshape(len(col), -1).copy()
            values = edit(values).astype(np.float32)
            new = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
            if not pa.types.is_fixed_size_list(col.type):
                new = pa.array(values.tolist(), type=col.type)
            table = table.set_column(table.schema.get_field_index(column), column, new)
            writer = writer or pq.ParquetWriter(path.with_suffix(".tmp"), table.schema)
            writer.write_table(table)
        if writer:
            writer.close()
            path.with_suffix(".tmp").replace(path)
    return out


def copy_as_delta(dataset: Path, out: Path, action: str, state: str) -> Path:
    """Copy a LeRobot dataset with its actions replaced by per-episode state steps s[t+1] - s[t] (0 on an
    episode's last row): delta actions where the original holds absolute targets."""
    shutil.copytree(dataset, out)
    for path in sorted((out / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        col = table.column(state).combine_chunks()
        values = col.flatten().to_numpy().reshape(len(col), -1).astype(np.float64)
        episode = table.column("episode_index").to_numpy()
        step = np.zeros_like(values)
        same = episode[1:] == episode[:-1]
        step[:-1][same] = (values[1:] - values[:-1])[same]
        step = step.astype(np.float32)
        a_type = table.schema.field(action).type
        new = pa.FixedSizeListArray.from_arrays(pa.array(step.reshape(-1)), step.shape[1])
        if not pa.types.is_fixed_size_list(a_type):
            new = pa.array(step.tolist(), type=a_type)
        table = table.set_column(table.schema.get_field_index(action), action, new)
        pq.write_table(table, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return out


def edit_stats(dataset: Path, edit: Callable[[dict], None]) -> None:
    path = dataset / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    edit(stats)
    path.write_text(json.dumps(stats))


def run(model: Path, training: Path, dataset: Path, options: dict | None = None) -> list[Check]:
    checks, _ = reconcile(
        read_model(model, options), read_training(training), read_dataset(dataset, OPTIONS), STAGE_CFG
    )
    return checks


def hard(checks: list[Check]) -> dict[str, Check]:
    return {c.id: c for c in checks if c.blocking}


def null_action(path: Path, row: int) -> None:
    """Row `row` of a data file's `action` column set to null (a partial re-upload that lost a value)."""
    table = pq.read_table(path)
    action = table.column("action").to_pylist()
    action[row] = None
    field = table.schema.field("action")
    column = pa.array(action, field.type)
    pq.write_table(table.set_column(table.schema.get_field_index("action"), field, column), path)
