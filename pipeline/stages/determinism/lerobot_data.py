"""The little of a LeRobot v3.0 dataset this stage reads: feature shapes, stats, and the frames.

`meta/info.json` declares the features, `meta/stats.json` holds per-feature statistics (what
normalization is computed from), and `data/chunk-*/file-*.parquet` holds the frames, one list column
per vector feature. Only JSON and parquet are read; files are found by globbing under the root, so no
path taken from a manifest can point outside it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from pipeline.errors import InputError

Stats = dict[str, dict[str, np.ndarray]]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(
            f"{path}: missing (expected a LeRobot v3.0 dataset root with meta/)", path=path
        ) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})", path=path) from exc


def features(root: Path) -> dict[str, dict[str, Any]]:
    path = Path(root) / "meta" / "info.json"
    found = _read_json(path).get("features")
    if not isinstance(found, dict):
        raise InputError(
            f"{path}: field 'features' must be an object of feature specs", path=path, field="features"
        )
    return found


def feature_dim(root: Path, name: str) -> int:
    """Width of a vector feature from info.json (`shape: [D]`)."""
    path = Path(root) / "meta" / "info.json"
    spec = features(root).get(name)
    if not spec or not isinstance(spec.get("shape"), list) or len(spec["shape"]) != 1:
        raise InputError(
            f"{path}: features.{name}.shape must be a one-element list [D]",
            path=path,
            field=f"features.{name}.shape",
        )
    return int(spec["shape"][0])


def stats(root: Path) -> Stats:
    """meta/stats.json as float32 arrays per feature and statistic."""
    path = Path(root) / "meta" / "stats.json"
    raw = _read_json(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected an object of feature -> statistic -> values", path=path)
    out: Stats = {}
    for feature, entry in raw.items():
        if not isinstance(entry, dict):
            raise InputError(
                f"{path}: {feature} must map statistic names to values", path=path, field=feature
            )
        out[feature] = {stat: np.asarray(value, dtype=np.float32) for stat, value in entry.items()}
    return out


def data_files(root: Path) -> list[Path]:
    files = sorted((Path(root) / "data").glob("chunk-*/*.parquet"))
    if not files:
        raise InputError(f"{Path(root) / 'data'}: no chunk-*/file-*.parquet files", path=Path(root) / "data")
    return files


def frames(root: Path, columns: Sequence[str], limit: int | None = None) -> dict[str, np.ndarray]:
    """The named vector columns as float32 arrays of shape (frames, D), in file order."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    count = 0
    for path in data_files(root):
        table = pq.read_table(path, columns=list(columns)) if _has(path, columns) else _missing(path, columns)
        for column in columns:
            parts[column].append(np.asarray(table.column(column).to_pylist(), dtype=np.float32))
        count += table.num_rows
        if limit is not None and count >= limit:
            break
    return {c: np.concatenate(v)[:limit] for c, v in parts.items()}


def _has(path: Path, columns: Sequence[str]) -> bool:
    names = set(pq.read_schema(path).names)
    return all(c in names for c in columns)


def _missing(path: Path, columns: Sequence[str]) -> Any:
    names = set(pq.read_schema(path).names)
    lost = [c for c in columns if c not in names]
    raise InputError(f"{path}: missing column(s) {lost}; has {sorted(names)}", path=path, field=lost[0])
