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
def test_stream_yields_every_row_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool
) -> None:
    monkeypatch.setattr(parquet_columns, "READ_AHEAD", ahead)
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    a, b = _write(first, 250, 100), _write(second, 40, 100)
    blocks = list(parquet_columns.stream([first, second], {"state": 3}, batch_rows=60))
    assert [len(x["state"]) for x in blocks] == [60, 60, 60, 60, 10, 40]  # batches span row groups
    assert np.array_equal(np.concatenate([x["state"] for x in blocks]), np.concatenate([a, b]))
    assert np.array_equal(blocks[-1]["episode_index"], np.arange(40) // 10)
    assert [len(x["state"]) for x in parquet_columns.stream([first, second], {"state": 3})] == [250, 40]


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


def test_read_ahead_only_where_a_core_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's columns decode in parallel, so reading ahead pays only with more cores than columns."""
    monkeypatch.setattr(parquet_columns, "READ_AHEAD", None)
    monkeypatch.setattr(parquet_columns, "usable_cores", lambda: 2)
    assert parquet_columns.read_ahead(1) and not parquet_columns.read_ahead(2)
    monkeypatch.setattr(parquet_columns, "usable_cores", lambda: 16)
    assert parquet_columns.read_ahead(3)
    monkeypatch.setattr(parquet_columns, "READ_AHEAD", False)
    assert not parquet_columns.read_ahead(1)


def test_undecodable_row_group_names_the_file_and_group(tmp_path: Path) -> None:
    """Garbage over the second row group's pages: an InputError naming it, after the first group's rows."""
    from pipeline.errors import InputError

    path = tmp_path / "a.parquet"
    _write(path, 300, 100)
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    raw = bytearray(path.read_bytes())
    start = chunk.data_page_offset + 8
    raw[start : start + 64] = bytes(range(64))
    path.write_bytes(bytes(raw))
    seen = 0
    with pytest.raises(InputError) as caught:
        for block in parquet_columns.stream([path], {"state": 3}, batch_rows=100):
            seen += len(block["state"])
    assert seen == 100
    assert str(path) in str(caught.value) and "row group 1 cannot be decoded" in str(caught.value)
    assert caught.value.field == "row_group[1]"
