"""The one LeRobot data API (v2.0, v2.1, v3.0): metadata, stats, episodes and frames as numpy arrays.

Every LeRobot read in the project goes through `LeRobotData`: the contract stage's dataset reader, the
determinism stage's reload check, the demo's reference trainer, the demo's training and its reload.

- `info` / `features` / `feature_dim`: `meta/info.json` as written.
- `stats()`: `meta/stats.json`; else v2.1's per-episode `meta/episodes_stats.jsonl`, aggregated exactly
  with their counts; else a v1 `meta_data/stats.safetensors` (through the validated reader).
- `episodes()`: episode indices and lengths from `meta/episodes.jsonl` (v2.x) or `meta/episodes/**.parquet`
  (v3.0); `tasks()`: the task strings.
- `frames(columns)`: columns as numpy arrays, vectorised (`pipeline.readers.parquet_columns`);
  `blocks(dims)`: the same, streamed in batches of rows for datasets larger than memory.

Every file, metadata and data alike, is opened through `file()`, the one containment rule
(`pipeline.readers.base.inside`: symlinks resolved, `..` and absolute paths refused).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.normalization import unflatten_stats
from pipeline.readers.base import (
    declared_shape,
    inside,
    read_json,
    read_jsonl,
    read_safetensors,
    require,
    stats_block,
)
from pipeline.readers.lerobot_paths import chunks_size, fill, location, span
from pipeline.readers.parquet_columns import counts, read_columns, stream
from pipeline.storage.files import regular_file

Stats = dict[str, dict[str, np.ndarray]]
INFO = "meta/info.json"
LOCATION = ("chunk_index", "file_index")


@dataclass(frozen=True)
class Episodes:
    """Per-episode index and length (frames), in the order the metadata lists them."""

    index: np.ndarray
    length: np.ndarray | None  # None when the metadata does not record lengths

    @property
    def total(self) -> int | None:
        return None if self.length is None else int(self.length.sum())


class LeRobotData:
    """A LeRobot dataset directory; nothing is read until asked, and each file at most once."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        # v3.0 video locations per camera: episode -> row, and the location columns (`_video_rows`)
        self._episode_rows: dict[str, tuple[dict[Any, int], list[list[Any]]]] = {}
        self._video_paths: dict[tuple[str, Any, Any], Path] = {}  # (camera, chunk, file) -> its path

    def file(self, relative: str | Path, what: str = "path") -> Path:
        """`root / relative`, resolved and refused if it leaves the root (the one containment rule), or
        if it exists and is not a regular file (a FIFO or device would hang the read)."""
        path = inside(self.root, relative, what)
        if path.exists() or path.is_symlink():
            regular_file(path, what)
        return path

    def _maybe(self, relative: str, what: str) -> Path | None:
        path = self.file(relative, what)
        return path if path.is_file() else None

    @cached_property
    def info(self) -> dict[str, Any]:
        path = self.file(INFO, "meta/info.json")
        info = read_json(path, "LeRobot meta/info.json")
        if not isinstance(info, dict):
            raise InputError(f"{path}: expected a JSON object", path=path, field="<root>")
        return info

    @cached_property
    def version(self) -> str:
        return str(require(self.info, "codebase_version", self.root / INFO, "v2.0 | v2.1 | v3.0"))

    @property
    def features(self) -> dict[str, Any]:
        found = require(
            self.info, "features", self.root / INFO, "the dataset's features with dtype and shape"
        )
        if not isinstance(found, dict):
            raise InputError(
                f"{self.root / INFO}: field 'features' must be an object of feature specs",
                path=self.root / INFO,
                field="features",
            )
        return found

    def feature_dim(self, name: str) -> int:
        """Width of a vector feature from info.json (`shape: [D]`)."""
        spec = self.features.get(name)
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list) or len(spec["shape"]) != 1:
            raise InputError(
                f"{self.root / INFO}: features.{name}.shape must be a one-element list [D]",
                path=self.root / INFO,
                field=f"features.{name}.shape",
            )
        return shape_of(spec, self.root / INFO, name)[0]

    # ------------------------------------------------------------------------------------- stats

    def stats(self) -> Stats:
        """The shipped stats as float64 arrays per feature and statistic; {} when none are shipped."""
        path = self._maybe("meta/stats.json", "meta/stats.json")
        if path is not None:
            raw = read_json(path, "LeRobot meta/stats.json")
            if not isinstance(raw, dict):
                raise InputError(
                    f"{path}: expected an object of per-feature stats", path=path, field="<root>"
                )
            return {key: stats_block(block, path, key) for key, block in raw.items()}
        path = self._maybe("meta/episodes_stats.jsonl", "meta/episodes_stats.jsonl")
        if path is not None:
            return aggregate_episode_stats(read_jsonl(path, "per-episode stats"), path)
        path = self._maybe("meta_data/stats.safetensors", "meta_data/stats.safetensors")
        if path is not None:  # LeRobot v1: flat `<feature>/<stat>` tensors
            return unflatten_stats(read_safetensors(path), sep="/")
        return {}

    # ------------------------------------------------------------------------------ episodes, tasks

    def episodes(self) -> Episodes | None:
        """Episode indices and lengths from the per-episode metadata; None when there is none."""
        path = self._maybe("meta/episodes.jsonl", "meta/episodes.jsonl")
        if path is not None:
            rows = [r for r in read_jsonl(path, "per-episode metadata") if isinstance(r, dict)]
            index = [
                count(r.get("episode_index", i), path, f"line {i + 1}.episode_index")
                for i, r in enumerate(rows)
            ]
            length = [count(r.get("length", 0), path, f"line {i + 1}.length") for i, r in enumerate(rows)]
            return Episodes(np.array(index, dtype=np.int64), np.array(length, dtype=np.int64))
        files = self._files("meta/episodes", "episodes file")
        if not files:
            return None
        index, length = [], []
        for path in files:
            table = _episodes_table(path)
            names = table.column_names
            index.append(counts(table, "episode_index", path) if "episode_index" in names else None)
            length.append(counts(table, "length", path) if "length" in names else None)
        lengths = None if any(v is None for v in length) else np.concatenate(length).astype(np.int64)
        if any(v is None for v in index):
            return Episodes(np.arange(len(lengths) if lengths is not None else 0), lengths)
        return Episodes(np.concatenate(index).astype(np.int64), lengths)

    def tasks(self) -> list[str] | None:
        """Task strings (meta/tasks.jsonl in v2.x, meta/tasks.parquet in v3.0, whose index holds the text)."""
        path = self._maybe("meta/tasks.jsonl", "meta/tasks.jsonl")
        if path is not None:
            return [str(r.get("task")) for r in read_jsonl(path, "task list") if isinstance(r, dict)]
        path = self._maybe("meta/tasks.parquet", "meta/tasks.parquet")
        if path is None:
            return None
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(
                f"{path}: not a readable tasks parquet: {exc}", path=path, field="tasks"
            ) from exc
        for column in ("task", "__index_level_0__"):
            if column in table.column_names:
                return [str(v) for v in table.column(column).to_pylist()]  # strings: one per task
        return None

    # ------------------------------------------------------------------------------------- videos

    def video_keys(self) -> list[str]:
        """Camera features stored as video (`dtype: video`), in info.json order (the loader's order)."""
        return [k for k, v in self.features.items() if isinstance(v, dict) and v.get("dtype") == "video"]

    def image_keys(self) -> list[str]:
        """Camera features stored inside the parquet as encoded bytes (`dtype: image`)."""
        return [k for k, v in self.features.items() if isinstance(v, dict) and v.get("dtype") == "image"]

    def episode_columns(self, columns: Sequence[str]) -> dict[str, list[Any]]:
        """v3.0 `meta/episodes/**.parquet` columns by name (absent ones left out), over all files."""
        out: dict[str, list[Any]] = {}
        for path in self._files("meta/episodes", "episodes file"):
            try:
                handle = pq.ParquetFile(path)
                names = [c for c in columns if c in handle.schema_arrow.names]
                table = handle.read(columns=names)
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputError(f"{path}: not a readable episodes parquet: {exc}", path=path) from exc
            for name in names:
                out.setdefault(name, []).extend(table.column(name).to_pylist())
        return out

    def video_location(self, key: str, episode: int) -> tuple[Path, float, float | None]:
        """(video file, first and end timestamp of the episode inside it): v2.x one file per episode
        from `video_path` (end None: the whole file); v3.0 from meta/episodes `videos/<key>/...`. Called
        for every episode of every camera (health, spans): after the first call per camera it is dictionary
        lookups (no path joined: 40k joins cost ~1 s at 20k episodes), a file's path resolved once."""
        template, info = self._video_template, self._paths[0]
        if not str(self.version).startswith("v3"):
            fields = {"episode_chunk": episode // chunks_size(self.info, info)}
            rel = fill(template, fields | {"video_key": key, "episode_index": episode}, info, "video_path")
            return self.file(rel, f"video of {key} episode {episode}"), 0.0, None
        rows, cols = self._video_rows(key)
        row, where, prefix = rows.get(episode), self._paths[1], f"videos/{key}/"
        if row is None:
            raise InputError(f"{where}: episode {episode} not listed", path=where, field="episode_index")
        chunk, number = (location(cols[i][row], where, prefix + n, episode) for i, n in enumerate(LOCATION))
        start, end = span(cols[2][row], cols[3][row], where, prefix, episode)
        path = self._video_paths.get((key, chunk, number))
        if path is None:  # resolved (containment, symlinks) once per file, not once per episode
            rel = fill(
                template, {"video_key": key, "chunk_index": chunk, "file_index": number}, info, "video_path"
            )
            path = self._video_paths.setdefault((key, chunk, number), self.file(rel, f"video of {key}"))
        return path, start, end

    @cached_property
    def _video_template(self) -> Any:
        return require(self.info, "video_path", self.root / INFO, "a video path template")

    @cached_property
    def _paths(self) -> tuple[Path, Path]:
        return self.root / INFO, self.root / "meta/episodes"

    def _video_rows(self, key: str) -> tuple[dict[Any, int], list[list[Any]]]:
        """v3.0, per camera, built once: episode -> its row in meta/episodes (the first listing, as a
        list scan would find it; a scan per episode made every-episode passes O(episodes^2)), and the
        chunk, file, from and to columns."""
        found = self._episode_rows.get(key)
        if found is not None:
            return found
        prefix, fields = f"videos/{key}/", ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
        names = ["episode_index"] + [prefix + c for c in fields]
        cols = self.episode_columns(names)
        missing = [n for n in names if n not in cols]
        if missing:
            where = self.root / "meta/episodes"
            raise InputError(
                f"{where}: no column {missing[0]} (expected per-episode video location)",
                path=where,
                field=missing[0],
            )
        rows: dict[Any, int] = {}
        for i, ep in enumerate(cols["episode_index"]):
            rows.setdefault(ep, i)
        return self._episode_rows.setdefault(key, (rows, [cols[n] for n in names[1:]]))

    # ------------------------------------------------------------------------------------- frames

    def _files(self, folder: str, what: str) -> list[Path]:
        base = self.root / folder
        if not base.is_dir():
            return []
        return [self.file(p.relative_to(self.root), what) for p in sorted(base.rglob("*.parquet"))]

    def column_types(self) -> dict[str, pa.DataType]:
        """Column types over every data file, from their parquet footers (a column present in some files
        only is kept with its type); no row is read."""
        out: dict[str, pa.DataType] = {}
        for path in self.data_files():
            try:
                schema = pq.read_schema(path)
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputError(
                    f"{path}: not a readable parquet file: {exc}", path=path, field="schema"
                ) from exc
            out.update({name: schema.field(name).type for name in schema.names})
        return out

    def data_files(self) -> list[Path]:
        """Every parquet file under data/ (v2.x: one per episode, v3.0: several episodes per file)."""
        return self._files("data", "data file")

    def _dims(self, columns: Sequence[str]) -> dict[str, int | None]:
        """Declared widths of vector columns; None for scalars and columns info.json does not declare."""
        out: dict[str, int | None] = {}
        for column in columns:
            spec = self.features.get(column)
            has_shape = isinstance(spec, dict) and "shape" in spec
            shape = shape_of(spec, self.root / INFO, column) if has_shape else ()
            out[column] = shape[0] if len(shape) == 1 else None
        return out

    def frames(
        self, columns: Sequence[str], limit: int | None = None, dtype: Any = None
    ) -> dict[str, np.ndarray]:
        """The named columns over all data files in order: list columns as [n, D], scalars as [n]."""
        files = self.data_files()
        if not files:
            raise InputError(
                f"{self.root / 'data'}: no parquet files (expected the dataset's frames)",
                path=self.root / "data",
                field="data",
            )
        out = read_columns(files, self._dims(columns), limit)
        return out if dtype is None else {k: v.astype(dtype, copy=False) for k, v in out.items()}

    def blocks(
        self, dims: Mapping[str, int], files: Sequence[Path] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """Row groups of every data file (or of `files`, an array task's share, in that order) as
        `{feature: [n, dim], "episode_index": [n]}` (bounded memory)."""
        return stream(self.data_files() if files is None else files, dims)

    def file_rows(self) -> list[int]:
        """Rows of every data file from its parquet footer (no row read): how an array splits them."""
        out = []
        for path in self.data_files():
            try:
                out.append(int(pq.ParquetFile(path).metadata.num_rows))
            except (pa.ArrowInvalid, OSError) as exc:
                raise InputError(
                    f"{path}: not a readable parquet file: {exc}", path=path, field="footer"
                ) from exc
        return out


def _episodes_table(path: Path) -> pa.Table:
    try:
        handle = pq.ParquetFile(path)
        names = [c for c in ("episode_index", "length") if c in handle.schema_arrow.names]
        return handle.read(columns=names)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(
            f"{path}: not a readable episodes parquet: {exc}", path=path, field="length"
        ) from exc


def shape_of(spec: Any, path: Path, key: str) -> tuple[int, ...]:
    """`features.<key>.shape` from info.json as non-negative ints, else an InputError naming the field."""
    shape = require(spec, "shape", path, "a list of non-negative ints", f"features.{key}")
    return declared_shape(shape, path, f"features.{key}.shape")


def count(value: Any, path: Path, field: str) -> int:
    """A count or index from metadata: a non-negative integer, else an InputError naming the field."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value < 0 or value != int(value):
        raise InputError(
            f"{path}: field '{field}' must be a non-negative integer, got {value!r}", path=path, field=field
        )
    return int(value)


def aggregate_episode_stats(rows: list[Any], path: Path) -> Stats:
    """v2.1 per-episode stats -> dataset stats: exact pooled mean/std from counts, min of mins, ..."""
    acc: dict[str, dict[str, Any]] = {}
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise InputError(
                f"{path}: line {number} must be a JSON object with 'stats', got {type(row).__name__}",
                path=path,
                field=f"line {number}",
            )
        stats = require(row, "stats", path, "per-episode stats", f"line {number}")
        if not isinstance(stats, dict):
            raise InputError(
                f"{path}: field 'line {number}.stats' must be an object of per-feature stats",
                path=path,
                field=f"line {number}.stats",
            )
        for key, block in stats.items():
            s = stats_block(block, path, f"line {number}.stats.{key}")
            if not {"mean", "std", "count", "min", "max"} <= set(s):
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
