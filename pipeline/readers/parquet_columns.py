"""Parquet columns as numpy arrays, vectorised: a list column becomes one [n, dim] array in one call.

LeRobot stores every vector feature as a (fixed-size) list column. Converting it row by row
(`to_pylist`) costs a Python object per value; `flatten().to_numpy()` costs one copy. A file whose
schema differs from what the metadata declares (a missing column, another list length, a non-numeric
type, null rows) is an InputError naming the file and the column. Callers pass paths already resolved
inside their dataset root (`LeRobotData.file`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError

# On: the next row group is decoded (pyarrow releases the GIL) while the caller's compiled kernels
# reduce this one. Affordable since groups are read column by column through a small read buffer:
# in benchmarks/bench_stats.py the whole stats pass, numba included, peaks below the plain
# `read_row_group` loop's RSS plus 20 %.
READ_AHEAD = True
# Read the file through a 1 MiB buffer, not whole column chunks at once (pre_buffer): over 1 M-row
# groups of 14-dim float32 this took the decoder's peak RSS from ~490 to ~350 MB for the same CPU.
BUFFER = 1 << 20


def single(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One array without a copy where the column is one chunk (what `read_row_group` gives): in pyarrow
    26 `combine_chunks` concatenates, i.e. copies, even a single chunk, which cost ~0.1 s per 1 M x 14
    group, a quarter of its decode."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def _list_width(arr: pa.Array, dim: int | None, path: Path, key: str) -> int:
    kind = arr.type
    if not (pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)):
        raise InputError(
            f"{path}: column '{key}' holds {kind.value_type}, expected numbers", path=path, field=key
        )
    if pa.types.is_fixed_size_list(kind):
        return kind.list_size
    lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
    if len(lengths) and lengths.min() != lengths.max():
        raise InputError(
            f"{path}: column '{key}' has rows of {lengths.min()}..{lengths.max()} values (expected {dim})",
            path=path,
            field=key,
        )
    return int(lengths[0]) if len(lengths) else (dim or 0)


def is_list(kind: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)


def column_2d(column: pa.ChunkedArray | pa.Array, dim: int | None, path: Path, key: str) -> np.ndarray:
    """A list / fixed-size-list / scalar column as an [n, dim] array (dim None: the list's own width)."""
    arr = single(column)
    if arr.null_count:
        raise InputError(
            f"{path}: column '{key}' has {arr.null_count} null rows (expected {dim} numbers per row)",
            path=path,
            field=key,
        )
    kind = arr.type
    if is_list(kind):
        width = _list_width(arr, dim, path, key)
        if dim is not None and width != dim:
            raise InputError(
                f"{path}: column '{key}' has {width} values per row, info.json says {dim}",
                path=path,
                field=key,
            )
        return arr.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    if (pa.types.is_floating(kind) or pa.types.is_integer(kind)) and dim in (1, None):
        return arr.to_numpy(zero_copy_only=False).reshape(-1, 1)
    raise InputError(
        f"{path}: column '{key}' is {kind}, expected a list of {dim} numbers", path=path, field=key
    )


def column_array(column: pa.ChunkedArray | pa.Array, dim: int | None, path: Path, key: str) -> np.ndarray:
    """A column as stored: list columns as [n, dim], scalar columns (indices, timestamps) as [n]."""
    arr = single(column)
    if is_list(arr.type):
        return column_2d(arr, dim, path, key)
    if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_boolean(arr.type)):
        raise InputError(f"{path}: column '{key}' is {arr.type}, expected numbers", path=path, field=key)
    if arr.null_count:
        raise InputError(f"{path}: column '{key}' has {arr.null_count} null rows", path=path, field=key)
    return arr.to_numpy(zero_copy_only=False)


def open_parquet(path: Path, columns: Sequence[str]) -> pq.ParquetFile:
    """The file, with every requested column present in its schema (else an InputError naming it)."""
    try:
        handle = pq.ParquetFile(path, buffer_size=BUFFER, pre_buffer=False)
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


def read_group(path: Path, handle: pq.ParquetFile, group: int, columns: list[str]) -> dict[str, Any]:
    """One row group's columns as arrow arrays (the caller converts them).

    Read one column at a time: `read_row_group` of two 14-dim float32 columns peaks at ~690 MB RSS
    over 1 M-row groups (benchmarks/bench_stats.py), one column at a time at ~490 MB, for the same CPU.
    """
    out = {}
    try:  # column by column: the decoder's transient buffers are one column's, not the group's (peak RSS)
        for name in columns:
            out[name] = single(handle.read_row_group(group, columns=[name]).column(0))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: row group {group} cannot be decoded: {exc}", path=path, field=f"row_group[{group}]"
        ) from exc
    return out


def read_columns(
    files: Sequence[Path], dims: Mapping[str, int | None], limit: int | None = None
) -> dict[str, np.ndarray]:
    """The named columns of every file in order, row group by row group, stopping after `limit` rows."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in dims}
    count = 0
    for path in files:
        handle = open_parquet(path, list(dims))
        for group in range(handle.num_row_groups):
            block = read_group(path, handle, group, list(dims))
            for key, column in block.items():
                parts[key].append(column_array(column, dims[key], path, key))
            count += handle.metadata.row_group(group).num_rows
            if limit is not None and count >= limit:
                return {c: np.concatenate(v)[:limit] for c, v in parts.items()}
    return {c: np.concatenate(v) if v else np.empty((0,)) for c, v in parts.items()}


def stream(files: Sequence[Path], dims: Mapping[str, int]) -> Iterator[dict[str, np.ndarray]]:
    """Row groups of every file as `{feature: [n, dim], "episode_index": [n]}`, one at a time, or with
    `READ_AHEAD` decoded one ahead in a worker thread so decoding overlaps the caller's reduction."""
    columns = list(dims)
    tasks = []
    for path in files:
        handle = open_parquet(path, columns)
        want = columns + (["episode_index"] if "episode_index" in handle.schema_arrow.names else [])
        # an empty row group (a zero-row file) has nothing to reduce: skip it rather than hand on 0 rows
        if handle.metadata.num_rows == 0:
            raise InputError(
                f"{path}: holds no rows (an empty episode file; expected the frames meta/info.json declares)",
                path=path,
                field="rows",
            )
        groups = [i for i in range(handle.num_row_groups) if handle.metadata.row_group(i).num_rows > 0]
        tasks += [(path, handle, i, want) for i in groups]
    if not READ_AHEAD:  # nothing of a group is referenced here once it is handed on
        for path, handle, group, want in tasks:
            yield _arrays(read_group(path, handle, group, want), dims, path)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(read_group, *tasks[0]) if tasks else None
        for index in range(len(tasks)):
            block = pending.result() if pending else {}
            pending = pool.submit(read_group, *tasks[index + 1]) if index + 1 < len(tasks) else None
            yield _arrays(block, dims, tasks[index][0])
            del block


def _arrays(block: Mapping[str, Any], dims: Mapping[str, int], path: Path) -> dict[str, np.ndarray]:
    return {k: (column_2d(v, dims[k], path, k) if k in dims else v.to_numpy()) for k, v in block.items()}
