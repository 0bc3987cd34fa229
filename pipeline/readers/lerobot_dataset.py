"""LeRobot datasets v2.0, v2.1 and v3.0: metadata as written, data as it really is.

Metadata: `meta/info.json` (features with dtype, shape, names; total frames and episodes), the shipped
stats (`meta/stats.json`, or v2.1's per-episode `meta/episodes_stats.jsonl` aggregated here exactly with
their counts). Data: every parquet file under `data/` (v2.x: one per episode, v3.0: several episodes per
file), read one row group at a time with pyarrow, only the vector columns, with the next row group decoded
in a background thread while this one is reduced. A file whose schema differs from info.json (a missing
column, another list length, a non-numeric type) is an InputError naming the file and the column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.readers.base import (
    DatasetContract,
    Feature,
    inside,
    read_json,
    read_jsonl,
    require,
    role_of,
    stats_block,
)
from pipeline.readers.dataset import INDEX_COLUMNS, finish

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


def read(root: Path, options: Mapping[str, Any]) -> DatasetContract:
    info_path = root / "meta" / "info.json"
    info = read_json(info_path, "LeRobot meta/info.json")
    version = str(require(info, "codebase_version", info_path, "v2.0 | v2.1 | v3.0"))
    features = require(info, "features", info_path, "the dataset's features with dtype and shape")
    contract = DatasetContract("C", f"lerobot_{version}", str(root))
    contract.claimed = {
        "total_frames": info.get("total_frames"),
        "total_episodes": info.get("total_episodes"),
        "fps": info.get("fps"),
        "codebase_version": version,
        "robot_type": info.get("robot_type"),
    }
    for key, spec in features.items():
        dtype = str(require(spec, "dtype", info_path, "a dtype", f"features.{key}"))
        shape = tuple(int(s) for s in require(spec, "shape", info_path, "a list of ints", f"features.{key}"))
        role = role_of(key, shape if dtype in ("video", "image") else None, dtype)
        if key in INDEX_COLUMNS:
            role = "other"
        contract.features[key] = Feature(key, role, shape, flat_names(spec.get("names")), dtype)
    contract.stats = _shipped_stats(root, version)
    contract.claimed["episode_lengths_total"] = _episode_lengths(root)
    contract.claimed["total_tasks"] = info.get("total_tasks")
    contract.claimed["tasks"] = _tasks(root)
    vectors = {
        k: f
        for k, f in contract.features.items()
        if f.role != "image" and f.dtype in NUMERIC and len(f.shape or ()) == 1 and k not in INDEX_COLUMNS
    }
    for key, feature in contract.features.items():
        if feature.role == "image":
            contract.images[key] = {
                "dtype": feature.dtype,
                "shape": list(feature.shape or ()),
                "stats": {s: v.tolist() for s, v in contract.stats.get(key, {}).items()},
            }
    files = _data_files(root)
    contract.files = [str(f.relative_to(root)) for f in files]
    if not files:
        contract.notes.append(f"no parquet files under {root / 'data'}: metadata only")
    for key in list(contract.features):
        if key not in vectors and contract.features[key].role != "image":
            contract.features[key].role = "other" if key in INDEX_COLUMNS else contract.features[key].role
    dims = {k: f.shape[0] for k, f in vectors.items()}

    def blocks() -> Iterator[dict[str, np.ndarray]]:
        return _stream(files, dims, root)

    finish_features = {k: contract.features[k] for k in vectors}
    others = {k: f for k, f in contract.features.items() if k not in vectors}
    contract.features = {**finish_features, **others}
    return finish(contract, blocks, options)


def _episode_lengths(root: Path) -> int | None:
    """Sum of per-episode `length` in meta/episodes (v2.x jsonl, v3.0 parquet): a third count to compare."""
    jsonl = root / "meta" / "episodes.jsonl"
    if jsonl.is_file():
        rows = read_jsonl(jsonl, "per-episode metadata")
        return int(sum(int(r.get("length", 0)) for r in rows if isinstance(r, dict)))
    files = (
        sorted((root / "meta" / "episodes").rglob("*.parquet"))
        if (root / "meta" / "episodes").is_dir()
        else []
    )
    total = 0
    for path in files:
        try:
            handle = pq.ParquetFile(inside(root, path.relative_to(root), "episodes file"))
            if "length" not in handle.schema_arrow.names:
                return None
            total += int(pa.compute.sum(handle.read(columns=["length"]).column("length")).as_py() or 0)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(
                f"{path}: not a readable episodes parquet: {exc}", path=path, field="length"
            ) from exc
    return total if files else None


def _tasks(root: Path) -> list[str] | None:
    """Task strings (meta/tasks.jsonl in v2.x, meta/tasks.parquet in v3.0, whose index holds the text)."""
    jsonl = root / "meta" / "tasks.jsonl"
    if jsonl.is_file():
        return [str(r.get("task")) for r in read_jsonl(jsonl, "task list") if isinstance(r, dict)]
    path = root / "meta" / "tasks.parquet"
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable tasks parquet: {exc}", path=path, field="tasks") from exc
    for column in ("task", "__index_level_0__"):
        if column in table.column_names:
            return [str(v) for v in table.column(column).to_pylist()]
    return None


def _shipped_stats(root: Path, version: str) -> dict[str, dict[str, np.ndarray]]:
    stats_path = root / "meta" / "stats.json"
    if stats_path.is_file():
        raw = read_json(stats_path, "LeRobot meta/stats.json")
        if not isinstance(raw, dict):
            raise InputError(f"{stats_path}: expected an object of per-feature stats", path=stats_path)
        return {key: stats_block(block, stats_path, key) for key, block in raw.items()}
    episodes = root / "meta" / "episodes_stats.jsonl"
    if episodes.is_file():
        return aggregate_episode_stats(read_jsonl(episodes, "per-episode stats"), episodes)
    return {}


def aggregate_episode_stats(rows: list[Any], path: Path) -> dict[str, dict[str, np.ndarray]]:
    """v2.1 per-episode stats -> dataset stats: exact pooled mean/std from counts, min of mins, ..."""
    acc: dict[str, dict[str, Any]] = {}
    for number, row in enumerate(rows, 1):
        stats = require(row, "stats", path, "per-episode stats", f"line {number}")
        for key, block in stats.items():
            s = stats_block(block, path, f"line {number}.stats.{key}")
            if not {"mean", "std", "count"} <= set(s):
                continue
            n = float(np.asarray(s["count"]).reshape(-1)[0])
            a = acc.setdefault(key, {"n": 0.0, "sum": 0.0, "sq": 0.0, "min": None, "max": None})
            a["n"] += n
            a["sum"] = a["sum"] + s["mean"] * n
            a["sq"] = a["sq"] + (s["std"] ** 2 + s["mean"] ** 2) * n
            a["min"] = s["min"] if a["min"] is None else np.minimum(a["min"], s["min"])
            a["max"] = s["max"] if a["max"] is None else np.maximum(a["max"], s["max"])
    out = {}
    for key, a in acc.items():
        mean = a["sum"] / a["n"]
        out[key] = {
            "mean": mean,
            "std": np.sqrt(np.maximum(a["sq"] / a["n"] - mean**2, 0.0)),
            "min": a["min"],
            "max": a["max"],
            "count": np.array([a["n"]]),
        }
    return out


def _data_files(root: Path) -> list[Path]:
    """Every parquet file under data/ (none is not an error: metadata-only copies exist; the stage then
    reports the data-driven checks as unverifiable)."""
    data = root / "data"
    if not data.is_dir():
        return []
    return [inside(root, p.relative_to(root), "data file") for p in sorted(data.rglob("*.parquet"))]


def column_2d(column: pa.ChunkedArray | pa.Array, dim: int, path: Path, key: str) -> np.ndarray:
    """A list / fixed-size-list / scalar column as an [n, dim] float array, or an InputError."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if arr.null_count:
        raise InputError(
            f"{path}: column '{key}' has {arr.null_count} null rows (expected {dim} numbers per row)",
            path=path,
            field=key,
        )
    kind = arr.type
    if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if not (pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)):
            raise InputError(
                f"{path}: column '{key}' holds {kind.value_type}, expected numbers", path=path, field=key
            )
        if pa.types.is_fixed_size_list(kind):
            width = kind.list_size
        else:
            lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
            width = int(lengths[0]) if len(lengths) else dim
            if len(lengths) and (lengths.min() != lengths.max()):
                raise InputError(
                    f"{path}: column '{key}' has rows of {lengths.min()}..{lengths.max()} "
                    f"values (expected {dim})",
                    path=path,
                    field=key,
                )
        if width != dim:
            raise InputError(
                f"{path}: column '{key}' has {width} values per row, info.json says {dim}",
                path=path,
                field=key,
            )
        values = arr.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(-1, dim)
    if (pa.types.is_floating(kind) or pa.types.is_integer(kind)) and dim == 1:
        return arr.to_numpy(zero_copy_only=False).reshape(-1, 1)
    raise InputError(
        f"{path}: column '{key}' is {kind}, expected a list of {dim} numbers", path=path, field=key
    )


def _open(path: Path, columns: list[str], root: Path) -> pq.ParquetFile:
    try:
        handle = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable parquet file: {exc}", path=path, field="parquet") from exc
    names = set(handle.schema_arrow.names)
    missing = [c for c in columns if c not in names]
    if missing:
        raise InputError(
            f"{path}: parquet schema lacks column(s) {missing} declared in meta/info.json "
            f"(has {sorted(names)})",
            path=path,
            field=missing[0],
        )
    return handle


def _stream(files: list[Path], dims: Mapping[str, int], root: Path) -> Iterator[dict[str, np.ndarray]]:
    """Row groups of every file, decoded one ahead in a worker thread (pyarrow releases the GIL)."""
    columns = list(dims)
    tasks = []
    for path in files:
        handle = _open(path, columns, root)
        want = columns + (["episode_index"] if "episode_index" in handle.schema_arrow.names else [])
        tasks += [(path, handle, i, want) for i in range(handle.num_row_groups)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_decode, *tasks[0]) if tasks else None
        for index in range(len(tasks)):
            block = pending.result() if pending else {}
            pending = pool.submit(_decode, *tasks[index + 1]) if index + 1 < len(tasks) else None
            yield {
                k: (column_2d(v, dims[k], tasks[index][0], k) if k in dims else v.to_numpy())
                for k, v in block.items()
            }


def _decode(path: Path, handle: pq.ParquetFile, group: int, columns: list[str]) -> dict[str, Any]:
    try:
        table = handle.read_row_group(group, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: row group {group} cannot be decoded: {exc}", path=path, field=f"row_group[{group}]"
        ) from exc
    return {name: table.column(name).combine_chunks() for name in table.column_names}
