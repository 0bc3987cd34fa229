"""(C) for LeRobot datasets v2.0, v2.1 and v3.0: metadata as written, data as it really is.

Everything is read through the one LeRobot data API (`pipeline.readers.lerobot_data.LeRobotData`):
`meta/info.json` (features with dtype, shape, names; total frames and episodes), the shipped stats,
episode lengths and tasks (a third and fourth count to compare), and every parquet file under `data/`,
streamed in batches of rows (only the vector columns; the next batch decoded in a background thread
while this one is reduced where a core is left for it, `parquet_columns.read_ahead`) through the shared
`Scan`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.base import DatasetContract, Feature, require, role_of
from pipeline.readers.lerobot_data import LeRobotData, aggregate_episode_stats, count, shape_of
from pipeline.readers.parquet_columns import column_2d
from pipeline.readers.scan import INDEX_COLUMNS, ScanOptions, finish

__all__ = ["aggregate_episode_stats", "column_2d", "flat_names", "read"]
TOTALS = ("total_frames", "total_episodes", "total_tasks")
NUMERIC = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def flat_names(names: Any) -> list[str] | None:
    """info.json names come as a list, a list nested one level (`[[...]]`) or `{"motors": [...]}`."""
    if names is None:
        return None
    if isinstance(names, dict):
        names = next((v for v in names.values() if isinstance(v, list)), None)
        return flat_names(names)
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        return [str(n) for n in names[0]]
    if isinstance(names, list) and all(isinstance(n, (str, int, float)) for n in names):
        return [str(n) for n in names]
    return None


def _features(data: LeRobotData) -> dict[str, Feature]:
    info_path = data.root / "meta" / "info.json"
    out = {}
    for key, spec in data.features.items():
        dtype = str(require(spec, "dtype", info_path, "a dtype", f"features.{key}"))
        shape = shape_of(spec, info_path, key)
        role = (
            "other"
            if key in INDEX_COLUMNS
            else role_of(key, shape if dtype in ("video", "image") else None, dtype)
        )
        out[key] = Feature(key, role, shape, flat_names(spec.get("names")), dtype)
    return out


def _claimed(data: LeRobotData) -> dict[str, Any]:
    """What the metadata says about the data, for the counts checks to compare with the data itself."""
    info = data.info
    episodes = data.episodes()
    path = data.root / "meta" / "info.json"
    totals = {k: count(info[k], path, k) if info.get(k) is not None else None for k in TOTALS}
    return {
        **totals,
        "fps": None if info.get("fps") is None else rate(info["fps"], path),
        "codebase_version": data.version,
        "robot_type": info.get("robot_type"),
        "episode_lengths_total": episodes.total if episodes is not None else None,
        "tasks": data.tasks(),
    }


def rate(value: Any, path: Path) -> float:
    """info.json's `fps`: a finite number > 0 (a rate of -30 or NaN is no rate, not one to judge)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value <= 0:
        raise InputError(
            f"{path}: field 'fps' must be a number of frames per second > 0, got {value!r}",
            path=path,
            field="fps",
        )
    return float(value)


def read(root: Path, options: ScanOptions) -> DatasetContract:
    contract, data, dims = prepare(root)

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        return data.blocks(dims)

    return finish(contract, blocks, options)


def prepare(root: Path) -> tuple[DatasetContract, LeRobotData, dict[str, int]]:
    """The contract from the metadata alone, the data API and the vector columns the scan reads (an
    array task scans its own files with them, `pipeline.readers.scan_shards`)."""
    data = LeRobotData(root)
    contract = DatasetContract("C", f"lerobot_{data.version}", str(root))
    features = _features(data)
    contract.stats = data.stats()
    contract.claimed = _claimed(data)
    vectors = [
        k
        for k, f in features.items()
        if f.role != "image" and f.dtype in NUMERIC and len(f.shape or ()) == 1 and k not in INDEX_COLUMNS
    ]
    for key, feature in features.items():
        if feature.role == "image":
            contract.images[key] = {
                "dtype": feature.dtype,
                "shape": list(feature.shape or ()),
                "stats": {s: v.tolist() for s, v in contract.stats.get(key, {}).items()},
            }
    files = data.data_files()
    contract.files = [str(f.relative_to(Path(root).resolve())) for f in files]
    if not files:
        contract.notes.append(f"no parquet files under {Path(root) / 'data'}: metadata only")
    dims = {k: features[k].shape[0] for k in vectors}  # type: ignore[index]
    # the vector features first, in info.json order, then the rest
    contract.features = {
        **{k: features[k] for k in vectors},
        **{k: f for k, f in features.items() if k not in vectors},
    }
    return contract, data, dims
