"""Parquet columns as numpy arrays, vectorised: a list column becomes one [n, dim] array in one call.

LeRobot stores every vector feature as a (fixed-size) list column. Converting it row by row
(`to_pylist`) costs a Python object per value; `flatten().to_numpy()` costs one copy. A file whose
schema differs from what the metadata declares (a missing column, another list length, a non-numeric
type, null rows) is an InputError naming the file and the column. Callers pass paths already resolved
inside their dataset root (`LeRobotData.file`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.readers.health import TIME_COLUMNS

# None: decode the next batch ahead in a worker thread only where the cores allow it (`read_ahead`);
# True / False force it (tests). A batch's columns are decoded side by side on pyarrow's thread pool, so
# with as many heavy columns as usable cores the cores are already busy: reading ahead then only adds a
# batch to the peak RSS, for no speed (bench_stats, 2 cores, 2 columns: 2.14 against 1.89 s at best).
READ_AHEAD: bool | None = None
# Rows per decoded batch (`ParquetFile.iter_batches`), not whole row groups: 1 M-row groups of two 14-dim
# float32 columns read whole peak at ~0.8 GB RSS, in 512 k-row batches at ~0.45 GB (256 k: ~0.3 GB), and
# decode no slower (bench_stats file: 0.84-1.2 s against 1.1-2.2 s per 10 M rows, both on pyarrow's
# threads; the whole-group reads spend up to 2 s in the kernel faulting fresh buffers in). Larger
# batches halve the sketch's per-block upkeep against 256 k.
BATCH_ROWS = 1 << 19
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

    All columns in one call: pyarrow decodes them side by side on its thread pool. Column by column, the
    decode of two 14-dim float32 columns ran on one core (bench_stats: 2.1 s against 1.1 s per 10 M rows).
    """
    try:
        table = handle.read_row_group(group, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _undecodable(path, group, exc) from exc
    return {name: single(table.column(name)) for name in columns}


def _undecodable(path: Path, group: int, exc: Exception) -> InputError:
    return InputError(
        f"{path}: row group {group} cannot be decoded: {exc}", path=path, field=f"row_group[{group}]"
    )


def usable_cores() -> int:
    """The cores this process may run on (a Slurm job's cgroup, not the node's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def read_ahead(columns: int) -> bool:
    """Whether decoding the next batch beside the caller's reduction can use an idle core: not when the
    batch's own columns (decoded in parallel, then reduced in parallel) already take every core."""
    return READ_AHEAD if READ_AHEAD is not None else usable_cores() > columns


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


def stream(
    files: Sequence[Path], dims: Mapping[str, int], batch_rows: int | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """Batches of every file as `{feature: [n, dim], "episode_index": [n]}`, or, where `read_ahead` says a
    core is idle, the next batch decoded in a worker thread so decoding overlaps the caller's reduction."""
    batches = _batches(files, dims, batch_rows or BATCH_ROWS)
    if not read_ahead(len(dims)):  # nothing of a batch is referenced here once it is handed on
        yield from batches
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, batches, None)
        while (block := pending.result()) is not None:
            pending = pool.submit(next, batches, None)
            yield block
            del block


def _batches(files: Sequence[Path], dims: Mapping[str, int], rows: int) -> Iterator[dict[str, np.ndarray]]:
    columns = list(dims)
    for path in files:
        handle = open_parquet(path, columns)
        if handle.metadata.num_rows == 0:
            raise InputError(
                f"{path}: holds no rows (an empty episode file; expected the frames meta/info.json declares)",
                path=path,
                field="rows",
            )
        extra = ("episode_index", *TIME_COLUMNS)  # scalar columns the health side channel reads
        want = columns + [c for c in extra if c in handle.schema_arrow.names and c not in columns]
        batches = handle.iter_batches(batch_size=rows, columns=want, use_threads=True)
        done = 0
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowInvalid, OSError) as exc:
                raise _undecodable(path, _group_of(handle, done), exc) from exc
            if batch is None:
                break
            done += batch.num_rows
            if batch.num_rows:
                yield _arrays({name: batch.column(name) for name in want}, dims, path)


def _group_of(handle: pq.ParquetFile, row: int) -> int:
    """The row group holding `row` (the first one not yet decoded, for an error message)."""
    end = 0
    for group in range(handle.num_row_groups):
        end += handle.metadata.row_group(group).num_rows
        if row < end:
            return group
    return handle.num_row_groups - 1


def _arrays(block: Mapping[str, Any], dims: Mapping[str, int], path: Path) -> dict[str, np.ndarray]:
    """Vector columns as [n, dim]; the scalar index columns as [n] where they are numbers with no nulls
    (a column of another type is left out here and named by the health rows, which read the schema)."""
    out = {k: column_2d(v, dims[k], path, k) for k, v in block.items() if k in dims}
    for key, column in block.items():
        numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
        if key not in dims and numeric and column.null_count == 0:
            out[key] = column.to_numpy()
    return out


def counts(table: pa.Table, column: str, path: Path) -> np.ndarray:
    """A v3.0 episodes column of counts or indices: whole numbers >= 0 (as a v2.x line's counts must be),
    else an InputError naming the file, the column and the first bad row; never a length of -5 judged
    as an episode's length."""
    values = table.column(column).to_numpy(zero_copy_only=False)
    number = values.dtype.kind in "iu" or values.dtype.kind == "f"
    if not number:
        raise InputError(
            f"{path}: column '{column}' must hold non-negative integers, got {values.dtype}",
            path=path,
            field=column,
        )
    as_float = values.astype(np.float64)
    bad = ~np.isfinite(as_float) | (as_float < 0) | (as_float != np.round(as_float))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        got = values[row].item()
        raise InputError(
            f"{path}: column '{column}' must hold non-negative integers, got {got!r} in row {row} "
            f"({int(bad.sum())} such row(s))",
            path=path,
            field=f"{column}[{row}]",
        )
    return values.astype(np.int64)
