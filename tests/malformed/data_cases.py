"""Malformed-input cases, part 1: a LeRobot dataset's metadata (info.json, stats.json, episodes_stats,
episodes, tasks), its parquet files, npz episodes and robomimic HDF5."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers import read_dataset
from tests.malformed.triple import (
    OPTIONS,
    Triple,
    _table,
    _truncate,
    cases,
    deep_json,
    edit_json,
    feature,
    fifo,
    folder,
    huge,
    link,
    put,
    top,
)

# meta/info.json
cases(
    "dataset",
    "info.json",
    {
        "info_invalid_json": (lambda t: put(t.info, '{"features": {,}'), "line 1"),
        "info_not_object": (lambda t: put(t.info, "[1, 2]"), None),
        "info_deeply_nested": (lambda t: put(t.info, deep_json()), None),
        "info_empty_file": (lambda t: put(t.info, ""), "line 1"),
        "info_not_utf8": (lambda t: put(t.info, b'{"a": "\xff\xfe"}'), "info.json"),
        "info_utf8_bom": (lambda t: put(t.info, "\ufeff{}".encode()), None),
        "info_huge_integer": (lambda t: put(t.info, '{"total_frames": ' + "9" * 5000 + "}"), None),
        "info_is_directory": (lambda t: folder(t.info), "info.json"),
        "info_is_fifo": (lambda t: fifo(t.info), "info.json"),
        "info_symlink_outside": (lambda t: link(t.info, t.outside), "meta/info.json"),
        "info_symlink_dev_zero": (lambda t: link(t.info, "/dev/zero"), "meta/info.json"),
        "info_larger_than_metadata_cap": (lambda t: huge(t.info), "info.json"),
        "info_missing_features": (lambda t: edit_json(t.info, lambda i: i.pop("features")), "features"),
        "info_features_as_list": (lambda t: edit_json(t.info, top(features=[1, 2])), "features"),
        "info_feature_not_object": (
            lambda t: edit_json(t.info, top(features={"action": 5})),
            "features.action",
        ),
        "info_shape_negative": (
            lambda t: edit_json(t.info, feature("action", shape=[-3])),
            "features.action.shape",
        ),
        "info_shape_six": (
            lambda t: edit_json(t.info, feature("action", shape=["six"])),
            "features.action.shape",
        ),
        "info_shape_not_list": (
            lambda t: edit_json(t.info, feature("action", shape=3)),
            "features.action.shape",
        ),
        "info_shape_fraction": (
            lambda t: edit_json(t.info, feature("action", shape=[2.5])),
            "features.action.shape",
        ),
        "info_shape_object": (
            lambda t: edit_json(t.info, feature("action", shape={"d": 3})),
            "features.action.shape",
        ),
        "info_shape_missing": (
            lambda t: edit_json(t.info, lambda i: i["features"]["action"].pop("shape")),
            "action",
        ),
        "info_dtype_missing": (
            lambda t: edit_json(t.info, lambda i: i["features"]["action"].pop("dtype")),
            "action",
        ),
        "info_total_frames_lots": (lambda t: edit_json(t.info, top(total_frames="lots")), "total_frames"),
        "info_total_frames_negative": (lambda t: edit_json(t.info, top(total_frames=-1)), "total_frames"),
        "info_total_frames_fraction": (lambda t: edit_json(t.info, top(total_frames=1.5)), "total_frames"),
        "info_total_frames_nan": (
            lambda t: put(t.info, t.info.read_text().replace('"total_frames": 40', '"total_frames": NaN')),
            "total_frames",
        ),
        "info_total_episodes_list": (lambda t: edit_json(t.info, top(total_episodes=[1])), "total_episodes"),
        "info_total_tasks_bool": (lambda t: edit_json(t.info, top(total_tasks=True)), "total_tasks"),
        "info_codebase_version_missing": (
            lambda t: edit_json(t.info, lambda i: i.pop("codebase_version")),
            "codebase_version",
        ),
    },
)

# meta/stats.json
cases(
    "dataset",
    "stats.json",
    {
        "stats_invalid_json": (lambda t: put(t.stats, '{"action": {"mean": [1,]}}'), "line 1"),
        "stats_not_object": (lambda t: put(t.stats, "[]"), None),
        "stats_feature_not_object": (
            lambda t: edit_json(t.stats, lambda s: s.update(action=[1, 2])),
            "action",
        ),
        "stats_values_strings": (
            lambda t: edit_json(t.stats, lambda s: s["action"].update(mean=["a", "b", "c"])),
            "action.mean",
        ),
        "stats_ragged_values": (
            lambda t: edit_json(t.stats, lambda s: s["action"].update(mean=[[1], [1, 2]])),
            "action.mean",
        ),
        "stats_deeply_nested": (lambda t: put(t.stats, deep_json()), None),
        "stats_symlink_outside": (lambda t: link(t.stats, t.outside), "meta/stats.json"),
        "stats_symlink_dev_zero": (lambda t: link(t.stats, "/dev/zero"), "meta/stats.json"),
        "stats_is_fifo": (lambda t: fifo(t.stats), "stats.json"),
        "stats_is_directory": (lambda t: folder(t.stats), "stats.json"),
        "stats_larger_than_metadata_cap": (lambda t: huge(t.stats), "stats.json"),
        "stats_symlink_loop": (lambda t: link(t.stats, t.stats), "stats.json"),
    },
)


def _episode_stats(t: Triple, line: str) -> None:
    t.stats.unlink()
    put(t.dataset / "meta" / "episodes_stats.jsonl", line + "\n")


GOOD_EP = {"mean": [0] * 3, "std": [1] * 3, "min": [0] * 3, "max": [1] * 3, "count": [40]}
cases(
    "dataset",
    "episodes_stats.jsonl",
    {
        "episodes_stats_line_not_object": (lambda t: _episode_stats(t, "[1, 2]"), "line 1"),
        "episodes_stats_line_string": (lambda t: _episode_stats(t, '"stats"'), "line 1"),
        "episodes_stats_invalid_json": (lambda t: _episode_stats(t, "{nope"), "line 1"),
        "episodes_stats_missing_stats": (lambda t: _episode_stats(t, '{"episode_index": 0}'), "line 1.stats"),
        "episodes_stats_stats_list": (lambda t: _episode_stats(t, '{"stats": [1]}'), "line 1.stats"),
        "episodes_stats_feature_string": (
            lambda t: _episode_stats(t, '{"stats": {"action": "x"}}'),
            "line 1.stats.action",
        ),
        "episodes_stats_values_strings": (
            lambda t: _episode_stats(t, json.dumps({"stats": {"action": {**GOOD_EP, "mean": ["a"] * 3}}})),
            "line 1.stats.action.mean",
        ),
        "episodes_stats_deeply_nested_line": (lambda t: _episode_stats(t, deep_json()), "line 1"),
        "episodes_stats_fifo": (
            lambda t: (t.stats.unlink(), fifo(t.dataset / "meta" / "episodes_stats.jsonl")),
            "episodes_stats.jsonl",
        ),
    },
)

EPISODES = "episodes.jsonl"
cases(
    "dataset",
    EPISODES,
    {
        "episodes_length_lots": (
            lambda t: put(t.dataset / "meta" / EPISODES, '{"episode_index": 0, "length": "lots"}'),
            "line 1.length",
        ),
        "episodes_index_negative": (
            lambda t: put(t.dataset / "meta" / EPISODES, '{"episode_index": -4, "length": 40}'),
            "line 1.episode_index",
        ),
        "episodes_invalid_json": (lambda t: put(t.dataset / "meta" / EPISODES, "{"), "line 1"),
        "episodes_symlink_outside": (lambda t: link(t.dataset / "meta" / EPISODES, t.outside), EPISODES),
        "episodes_fifo": (lambda t: fifo(t.dataset / "meta" / EPISODES), EPISODES),
    },
)
cases(
    "dataset",
    "tasks.jsonl",
    {"tasks_invalid_json": (lambda t: put(t.dataset / "meta" / "tasks.jsonl", "]["), "line 1")},
)


def _zero_rows(t: Triple) -> None:
    pq.write_table(pq.read_table(t.parquet).slice(0, 0), t.parquet)


PARQUET = "episode_000000.parquet"
cases(
    "dataset",
    PARQUET,
    {
        "parquet_zero_rows": (_zero_rows, "rows"),
        "parquet_garbage": (lambda t: put(t.parquet, b"not parquet at all" * 10), "parquet"),
        "parquet_truncated": (lambda t: _truncate(t.parquet), "parquet"),
        "parquet_missing_column": (lambda t: _table(t, action=None), "action"),
        "parquet_wrong_width": (
            lambda t: _table(t, action=pa.array([[0.0] * 4] * 40, type=pa.list_(pa.float32(), 4))),
            "action",
        ),
        "parquet_ragged_rows": (
            lambda t: _table(t, action=pa.array([[0.0] * (1 + i % 3) for i in range(40)])),
            "action",
        ),
        "parquet_strings": (lambda t: _table(t, action=pa.array([["a"] * 3] * 40)), "action"),
        "parquet_null_rows": (
            lambda t: _table(t, action=pa.array([None] * 40, type=pa.list_(pa.float32(), 3))),
            "action",
        ),
        "parquet_symlink_outside": (lambda t: link(t.parquet, t.outside), "data file"),
        "parquet_fifo": (lambda t: fifo(t.parquet), PARQUET),
        "parquet_directory": (lambda t: folder(t.parquet), PARQUET),
    },
)


# npz episodes
def _npz(t: Triple, arrays: dict[str, np.ndarray] | None = None, raw: bytes | None = None) -> Path:
    folder_ = t.root / "npz"
    folder_.mkdir(exist_ok=True)
    good = {"obs_state": np.zeros((10, 3), np.float32), "actions": np.zeros((10, 3), np.float32)}
    np.savez(folder_ / "ep_000.npz", **good)
    target = folder_ / "ep_001.npz"
    if raw is not None:
        target.write_bytes(raw)
    else:
        np.savez(target, **(arrays if arrays is not None else good))
    return folder_


def _npz_truncated(t: Triple) -> Any:
    root = _npz(t)
    _truncate(root / "ep_001.npz", 0.6)
    return lambda: read_dataset(root, OPTIONS)


def _npz_case(**kw: Any) -> Callable[[Triple], Any]:
    def build(t: Triple) -> Any:
        root = _npz(t, **kw)
        return lambda: read_dataset(root, OPTIONS)

    return build


def _npz_meta_outside(t: Triple) -> Any:
    root = _npz(t)
    link(root / "meta.json", t.outside)
    return lambda: read_dataset(root, OPTIONS)


def _npz_fifo(t: Triple) -> Any:
    root = _npz(t)
    fifo(root / "ep_001.npz")
    return lambda: read_dataset(root, OPTIONS)


cases(
    "custom",
    "ep_001.npz",
    {
        "npz_truncated": (_npz_truncated, "npz"),
        "npz_garbage": (_npz_case(raw=b"PK\x03\x04 broken zip"), "npz"),
        "npz_object_array_needs_pickle": (
            _npz_case(
                arrays={"obs_state": np.array([{"a": 1}] * 10, dtype=object), "actions": np.zeros((10, 3))}
            ),
            "npz",
        ),
        "npz_width_differs": (
            _npz_case(arrays={"obs_state": np.zeros((10, 5)), "actions": np.zeros((10, 3))}),
            "obs_state",
        ),
        "npz_array_missing": (_npz_case(arrays={"obs_state": np.zeros((10, 3))}), "actions"),
        "npz_fifo": (_npz_fifo, "ep_001.npz"),
    },
)
cases("custom", "meta.json", {"npz_meta_symlink_outside": (_npz_meta_outside, "meta.json")})


# robomimic HDF5
def _hdf5(t: Triple, build: Callable[[Any], None] | None = None, raw: bytes | None = None) -> Path:
    import h5py

    path = t.root / "demo.hdf5"
    with h5py.File(path, "w") as handle:
        for demo in ("demo_0", "demo_1"):
            group = handle.create_group(f"data/{demo}")
            group["actions"] = np.zeros((10, 3))
            group["states"] = np.zeros((10, 4))
        handle["data"].attrs["total"] = 20
        if build is not None:
            build(handle)
    if raw is not None:
        path.write_bytes(raw)
    return path


def _hdf5_case(**kw: Any) -> Callable[[Triple], Any]:
    def make(t: Triple) -> Any:
        path = _hdf5(t, **kw)
        return lambda: read_dataset(path, OPTIONS)

    return make


def _hdf5_truncated(t: Triple) -> Any:
    path = _hdf5(t)
    _truncate(path, 0.3)
    return lambda: read_dataset(path, OPTIONS)


def _set_total(h: Any) -> None:
    h["data"].attrs["total"] = "lots"


def _drop(h: Any) -> None:
    del h["data/demo_1/states"]


def _widen(h: Any) -> None:
    del h["data/demo_1/states"]
    h["data/demo_1/states"] = np.zeros((10, 6))


def _no_demos(h: Any) -> None:
    del h["data/demo_0"], h["data/demo_1"]


def _no_data(h: Any) -> None:
    del h["data"]
    h["other"] = np.zeros(3)


cases(
    "custom",
    "demo.hdf5",
    {
        "hdf5_corrupt_bytes": (_hdf5_case(raw=b"\x89HDF\r\n\x1a\n" + b"\x00" * 200), "hdf5"),
        "hdf5_truncated": (_hdf5_truncated, "hdf5"),
        "hdf5_total_lots": (_hdf5_case(build=_set_total), "data.attrs.total"),
        "hdf5_demo_lacks_dataset": (_hdf5_case(build=_drop), "data/demo_1/states"),
        "hdf5_demo_other_width": (_hdf5_case(build=_widen), "data/demo_1/states"),
        "hdf5_no_demos": (_hdf5_case(build=_no_demos), "data"),
        "hdf5_no_data_group": (_hdf5_case(build=_no_data), "data"),
    },
)
