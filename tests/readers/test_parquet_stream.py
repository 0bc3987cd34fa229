"""The parquet block stream behind the stats pass: what it yields, read ahead or not, without copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.readers import parquet_columns


def _write(path: Path, rows: int, group: int) -> np.ndarray:
    values = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    column = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), 3)
    episode = pa.array(np.arange(rows) // 10)
    pq.write_table(pa.table({"state": column, "episode_index": episode}), path, row_group_size=group)
    return values


@pytest.mark.parametrize("ahead", [False, True])
def test_stream_yields_every_row_group_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool
) -> None:
    monkeypatch.setattr(parquet_columns, "READ_AHEAD", ahead)
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    a, b = _write(first, 250, 100), _write(second, 40, 100)
    blocks = list(parquet_columns.stream([first, second], {"state": 3}))
    assert [len(x["state"]) for x in blocks] == [100, 100, 50, 40]
    assert np.array_equal(np.concatenate([x["state"] for x in blocks]), np.concatenate([a, b]))
    assert np.array_equal(blocks[-1]["episode_index"], np.arange(40) // 10)


def test_single_chunk_column_is_not_copied(tmp_path: Path) -> None:
    """`combine_chunks` copies even one chunk; the stream hands the decoded buffer itself to the kernel."""
    path = tmp_path / "a.parquet"
    _write(path, 100, 100)
    column = pq.ParquetFile(path).read_row_group(0, columns=["state"]).column(0)
    block = parquet_columns.column_2d(column, 3, path, "state")
    buffer = column.chunk(0).values.buffers()[1]
    assert block.ctypes.data == buffer.address + column.chunk(0).values.offset * 4
    two = pa.chunked_array([column.chunk(0), column.chunk(0)])
    assert len(parquet_columns.single(two)) == 200
