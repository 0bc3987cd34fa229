"""One episode's rows without reading the dataset (issue 35): the frame sampler and teacher_forced ask
for a handful of episodes, and reading every row's index to find them made their memory grow with the
dataset (~36 B a row for `episode_index` + `timestamp`, 311 MB at 50k episodes).

Where an episode lives comes from the per-episode metadata: v3.0 `meta/episodes` (`data/chunk_index`,
`data/file_index` through info.json's `data_path`), v2.x the `data_path` template itself (one file per
episode). In that file only the row groups whose footer statistics admit the episode are decoded, and
only the asked columns. A layout that does not say (no template, no location columns, the file absent,
or no row of the episode in it) falls back to every data file, row group by row group with the same
pruning, so the rows found are those a whole-dataset read would find, in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.readers.lerobot_paths import chunks_size, fill, location
from pipeline.readers.parquet_columns import column_array, open_parquet

if TYPE_CHECKING:
    from pipeline.readers.lerobot_data import LeRobotData

EPISODE = "episode_index"
LOCATION = ("data/chunk_index", "data/file_index")


class EpisodeRows:
    """Rows of single episodes of a LeRobot dataset; `decoded` counts the rows decoded so far (what a
    test checks: a handful of episodes must not cost the dataset's rows)."""

    def __init__(self, data: LeRobotData) -> None:
        self.data = data
        self.decoded = 0
        self._paths: dict[tuple[Any, Any], Path | None] = {}

    @cached_property
    def _template(self) -> Any:
        """info.json's `data_path`; None where it has none (every file is read). One that is there but
        not a template of the documented fields is refused when filled (`lerobot_paths.fill`)."""
        return self.data.info.get("data_path")

    @cached_property
    def _v3_files(self) -> dict[int, tuple[Any, Any]] | None:
        """v3.0: episode -> (chunk, file) of its data file, from meta/episodes (per-episode facts only)."""
        if self._template is None or not str(self.data.version).startswith("v3"):
            return None
        cols = self.data.episode_columns([EPISODE, *LOCATION])
        if any(name not in cols for name in (EPISODE, *LOCATION)):
            return None
        out: dict[int, tuple[Any, Any]] = {}
        where = self.data.root / "meta/episodes"
        for ep, chunk, number in zip(*(cols[n] for n in (EPISODE, *LOCATION)), strict=True):
            ep = location(ep, where, EPISODE, ep)
            if ep not in out:  # the first listing, as LeRobot's lookup finds it
                out[ep] = (location(chunk, where, LOCATION[0], ep), location(number, where, LOCATION[1], ep))
        return out

    def located(self, episode: int) -> Path | None:
        """The data file the metadata puts `episode` in, if it says and the file is there."""
        if self._template is None:
            return None
        if self._v3_files is not None:
            where = self._v3_files.get(int(episode))
            if where is None:
                return None
            fields = {"chunk_index": where[0], "file_index": where[1]}
        elif str(self.data.version).startswith("v3"):
            return None
        else:
            chunk = int(episode) // chunks_size(self.data.info, self.data.root / "meta/info.json")
            fields = {"episode_chunk": chunk, "episode_index": int(episode)}
        key = (fields.get("chunk_index", fields.get("episode_chunk")), fields.get("file_index", episode))
        if key not in self._paths:
            rel = fill(self._template, fields, self.data.root / "meta/info.json", "data_path")
            path = self.data.file(rel, f"data file of episode {episode}")
            self._paths[key] = path if path.is_file() else None
        return self._paths[key]

    def table(self, episode: int, columns: Sequence[str]) -> pa.Table:
        """The episode's rows (file order, files in sorted order) of `columns` plus `episode_index`."""
        return self.tables([episode], columns)[int(episode)]

    def tables(self, episodes: Sequence[int], columns: Sequence[str]) -> dict[int, pa.Table]:
        """Several episodes' rows, each located file read once for all the episodes it holds."""
        want = list(dict.fromkeys([*columns, EPISODE]))
        asked = list(dict.fromkeys(int(e) for e in episodes))
        by_file: dict[Path, list[int]] = {}
        for ep in asked:
            path = self.located(ep)
            if path is not None:
                by_file.setdefault(path, []).append(ep)
        out: dict[int, pa.Table] = {}
        for path, eps in by_file.items():
            out.update(_split(_read(path, eps, want, self), eps))
        missing = [ep for ep in asked if ep not in out]
        if missing:  # the metadata does not say, or said wrong: every file once for all of them, pruned
            found: dict[int, list[pa.Table]] = {}
            for path in self.data.data_files():
                for ep, part in _split(_read(path, missing, want, self), missing).items():
                    found.setdefault(ep, []).append(part)
            empty = pa.table({c: pa.array([], pa.int64()) for c in want})
            out.update({ep: pa.concat_tables(found[ep]) if ep in found else empty for ep in missing})
        return out

    def arrays(self, episode: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
        """The episode's columns as a whole-dataset read gives them (`LeRobotData.frames`): list columns as
        [n, D], scalars as [n]; an episode with no rows is an InputError naming the data folder."""
        table = self.table(episode, columns)
        if table.num_rows == 0:
            where = self.data.root / "data"
            raise InputError(f"{where}: no rows for episode {episode}", path=where, field=EPISODE)
        return self.convert(table, columns)

    def convert(self, table: pa.Table, columns: Sequence[str]) -> dict[str, np.ndarray]:
        """A table read here as numpy, with info.json's declared widths checked (`parquet_columns`)."""
        dims: Mapping[str, int | None] = self.data._dims(columns)  # noqa: SLF001 - the same package
        where = self.data.root / "data"
        return {c: column_array(table.column(c), dims[c], where, c) for c in columns}


def _split(table: pa.Table, episodes: Sequence[int]) -> dict[int, pa.Table]:
    """Each episode's rows of a table read for several, those with none left out."""
    kind = table.schema.field(EPISODE).type
    out = {}
    for ep in episodes:
        part = table.filter(_compute().equal(table.column(EPISODE), pa.scalar(ep, kind)))
        if part.num_rows:
            out[ep] = part
    return out


def _statistics_index(handle: pq.ParquetFile) -> int | None:
    meta = handle.metadata
    for j in range(meta.num_columns):
        if meta.row_group(0).column(j).path_in_schema == EPISODE:
            return j
    return None


def _may_hold(handle: pq.ParquetFile, group: int, column: int | None, episodes: Sequence[int]) -> bool:
    """False only where the row group's footer statistics prove every episode asked absent."""
    if column is None:
        return True
    stats = handle.metadata.row_group(group).column(column).statistics
    if stats is None or not stats.has_min_max:
        return True
    return any(stats.min <= ep <= stats.max for ep in episodes)


def _read(path: Path, episodes: Sequence[int], columns: list[str], counter: EpisodeRows) -> pa.Table:
    """The rows of `episodes` in one file: only the row groups that may hold them are decoded."""
    handle = open_parquet(path, columns)
    column = _statistics_index(handle) if handle.num_row_groups else None
    parts = []
    for group in range(handle.num_row_groups):
        if not _may_hold(handle, group, column, episodes):
            continue
        try:
            table = handle.read_row_group(group, columns=columns)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(
                f"{path}: row group {group} cannot be decoded: {exc}", path=path, field=f"row_group[{group}]"
            ) from exc
        counter.decoded += table.num_rows
        kind = table.schema.field(EPISODE).type
        parts.append(table.filter(_compute().is_in(table.column(EPISODE), pa.array(list(episodes), kind))))
    return pa.concat_tables(parts) if parts else handle.schema_arrow.empty_table().select(columns)


def _compute():  # type: ignore[no-untyped-def]
    """pyarrow.compute, imported where rows are filtered (0.25 s an import; a dataset without cameras
    never needs it)."""
    import pyarrow.compute as pc

    return pc
