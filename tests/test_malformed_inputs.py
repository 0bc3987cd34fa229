"""Malformed inputs, as a hostile or unlucky user makes them (issue 14): every case ends in a named error.

Each case starts from a small valid triple built here (a contract card as the model (A), a YAML training
config (B), a LeRobot v2.1 dataset (C)), breaks one thing, and runs the reader, the waiver loader, the
fingerprint or the launch validation on it in-process, under a SIGALRM timeout (a FIFO or `/dev/zero`
must not hang). An error must be an `InputError` / `ConfigError` naming the file (or key) and a field,
on one line, with no traceback text; a bad row in the data must become a hard row naming the feature.
A few representative cases go through `python -m pipeline.launch` as a user would (tests/
test_malformed_launch.py-style subprocesses at the end of this file): exit 2 with one line, or exit 3
with an `error` row naming file and field, and nothing half-written left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import PreflightError, one_line
from pipeline.fingerprint import digest_path
from pipeline.readers import read_dataset, read_model, read_training
from pipeline.readers.scan import ScanOptions
from pipeline.waivers import load_waivers

OPTIONS = ScanOptions(rank_error=1e-3, dynamics_rows=1000)
TIMEOUT_S = 30
DIM = 3
NAMES = ["x", "y", "z"]
DEEP = 200_000  # nesting levels: far past Python's recursion limit
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)


@contextlib.contextmanager
def deadline(seconds: int = TIMEOUT_S) -> Iterator[None]:
    """A hang (a FIFO opened for reading, /dev/zero read to EOF) fails the case instead of the suite."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"case still running after {seconds} s (a hang)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------------- the valid triple


@dataclass
class Triple:
    root: Path
    model: Path  # a contract card
    training: Path
    dataset: Path
    outside: Path  # a file outside every input root (a symlink target)

    @property
    def info(self) -> Path:
        return self.dataset / "meta" / "info.json"

    @property
    def stats(self) -> Path:
        return self.dataset / "meta" / "stats.json"

    @property
    def parquet(self) -> Path:
        return self.dataset / "data" / "chunk-000" / "episode_000000.parquet"


def _features() -> dict[str, Any]:
    vec = {"dtype": "float32", "shape": [DIM], "names": NAMES}
    scalar = {"dtype": "int64", "shape": [1], "names": None}
    return {
        "observation.state": vec,
        "action": dict(vec),
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": scalar,
        "episode_index": scalar,
        "index": scalar,
        "task_index": scalar,
    }


def write_parquet(path: Path, state: np.ndarray, action: np.ndarray, episode: int = 0) -> None:
    n = len(state)
    vec = pa.list_(pa.float32(), DIM)
    table = pa.table(
        {
            "observation.state": pa.array(state.astype(np.float32).tolist(), type=vec),
            "action": pa.array(action.astype(np.float32).tolist(), type=vec),
            "timestamp": pa.array(np.arange(n, dtype=np.float32) / 10),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, episode, dtype=np.int64)),
            "index": pa.array(np.arange(n, dtype=np.int64)),
            "task_index": pa.array(np.zeros(n, dtype=np.int64)),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def make_triple(root: Path) -> Triple:
    rng = np.random.default_rng(0)
    t = Triple(root, root / "model" / "contract.yaml", root / "train.yaml", root / "ds", root / "secret.json")
    n = 40
    state = rng.normal(size=(n, DIM))
    action = state + rng.normal(scale=0.1, size=(n, DIM))
    write_parquet(t.parquet, state, action)
    info = {
        "codebase_version": "v2.1",
        "robot_type": "test",
        "fps": 10,
        "total_frames": n,
        "total_episodes": 1,
        "total_tasks": 1,
        "features": _features(),
    }
    t.info.parent.mkdir(parents=True)
    t.info.write_text(json.dumps(info))
    stats = {
        k: {
            "mean": v.mean(0).tolist(),
            "std": v.std(0).tolist(),
            "min": v.min(0).tolist(),
            "max": v.max(0).tolist(),
        }
        for k, v in (("observation.state", state), ("action", action))
    }
    t.stats.write_text(json.dumps(stats))
    (t.dataset / "meta" / "episodes.jsonl").write_text(json.dumps({"episode_index": 0, "length": n}) + "\n")
    (t.dataset / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "pick"}) + "\n")
    t.model.parent.mkdir()
    t.model.write_text(
        "source: a test card\n"
        "normalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n"
        "features:\n"
        f"  observation.state: {{type: STATE, shape: [{DIM}], names: {NAMES}}}\n"
        f"  action: {{type: ACTION, shape: [{DIM}]}}\n"
        "stats:\n" + "".join(f"  {k}: {{mean: {v['mean']}, std: {v['std']}}}\n" for k, v in stats.items())
    )
    t.training.write_text("policy:\n  normalization_mapping: {STATE: MEAN_STD, ACTION: MEAN_STD}\n")
    t.outside.write_text(json.dumps(stats))
    return t


# ----------------------------------------------------------------------------------------- mutations


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    """Change the JSON file in place."""
    data = json.loads(path.read_text())
    change(data)  # in place (a pop's return value is not the new content)
    path.write_text(json.dumps(data))


def put(path: Path, content: str | bytes) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def link(path: Path, target: Path | str) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def folder(path: Path) -> None:
    path.unlink(missing_ok=True)
    (path / "inner").mkdir(parents=True)


def huge(path: Path) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as handle:  # sparse: 65 MiB of holes, no disk
        handle.truncate(65 * 2**20)


def deep_json() -> str:
    return "[" * DEEP + "]" * DEEP


def deep_yaml() -> str:
    return "a: " + "[" * 5000 + "]" * 5000 + "\n"


def feature(name: str, **changes: Any) -> Callable[[Any], None]:
    def change(info: Any) -> None:
        info["features"][name].update(changes)

    return change


def top(**changes: Any) -> Callable[[Any], None]:
    return lambda info: info.update(changes)


# ------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    name: str
    breaks: Callable[[Triple], Any]  # mutates the triple; may return the call to run
    file: str  # the file name (or key) the error must name
    field: str | None = None  # a substring of the error's field; None: any field
    run: str = "dataset"  # dataset | model | training | waivers | fingerprint | custom


CASES: list[Case] = []


def case(name: str, file: str, field: str | None = None, run: str = "dataset") -> Callable:
    def register(fn: Callable[[Triple], Any]) -> Callable[[Triple], Any]:
        CASES.append(Case(name, fn, file, field, run))
        return fn

    return register


def cases(run: str, file: str, table: dict[str, tuple[Callable[[Triple], Any], str | None]]) -> None:
    for name, (fn, field) in table.items():
        CASES.append(Case(name, fn, file, field, run))


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


def _table(t: Triple, **columns: Any) -> None:
    table = pq.read_table(t.parquet)
    for name, array in columns.items():
        index = table.column_names.index(name)
        table = table.remove_column(index) if array is None else table.set_column(index, name, array)
    pq.write_table(table, t.parquet)


def _zero_rows(t: Triple) -> None:
    pq.write_table(pq.read_table(t.parquet).slice(0, 0), t.parquet)


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


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


# safetensors (a LeRobot v1 stats.safetensors as the model)
def _st(t: Triple, header: Any = None, raw: bytes | None = None, body: bytes = b"\x00" * 12) -> Any:
    folder_ = t.root / "v1"
    folder_.mkdir(exist_ok=True)
    path = folder_ / "stats.safetensors"
    if raw is None:
        text = header if isinstance(header, (str, bytes)) else json.dumps(header)
        data = text.encode() if isinstance(text, str) else text
        raw = len(data).to_bytes(8, "little") + data + body
    path.write_bytes(raw)
    return lambda: read_model(folder_)


def _tensor(**changes: Any) -> dict[str, Any]:
    return {"action/mean": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12], **changes}}


def _st_case(**kw: Any) -> Callable[[Triple], Any]:
    return lambda t: _st(t, **kw)


def _st_special(make: Callable[[Path], None]) -> Callable[[Triple], Any]:
    def build(t: Triple) -> Any:
        call = _st(t, header=_tensor())
        make(t.root / "v1" / "stats.safetensors")
        return call

    return build


cases(
    "custom",
    "stats.safetensors",
    {
        "safetensors_too_short": (_st_case(raw=b"\x01\x02"), "header"),
        "safetensors_header_length_huge": (_st_case(raw=(2**60).to_bytes(8, "little") + b"{}"), "header"),
        "safetensors_header_not_json": (_st_case(header="{not json"), "header"),
        "safetensors_header_deeply_nested": (_st_case(header=deep_json()), "header"),
        "safetensors_header_list": (_st_case(header=[1, 2]), "header"),
        "safetensors_header_not_utf8": (_st_case(header=b'{"\xff": 1}'), "header"),
        "safetensors_negative_shape": (_st_case(header=_tensor(shape=[-1, -3])), "action/mean.shape"),
        "safetensors_offsets_past_end": (_st_case(header=_tensor(data_offsets=[0, 9999])), "action/mean"),
        "safetensors_unknown_dtype": (_st_case(header=_tensor(dtype="Q7")), "action/mean"),
        "safetensors_shape_does_not_fit": (_st_case(header=_tensor(shape=[5])), "action/mean"),
        "safetensors_tensor_not_object": (_st_case(header={"action/mean": "x"}), "action/mean"),
        "safetensors_fifo": (_st_special(fifo), "stats.safetensors"),
        "safetensors_directory": (_st_special(folder), "stats.safetensors"),
    },
)


# LeRobot policy config.json as the model
def _policy(t: Triple, config: Any = None, raw: str | None = None, proc: Any = None) -> Any:
    folder_ = t.root / "policy"
    folder_.mkdir(exist_ok=True)
    good = {
        "type": "act",
        "input_features": {"observation.state": {"type": "STATE", "shape": [3]}},
        "output_features": {"action": {"type": "ACTION", "shape": [3]}},
        "normalization_mapping": {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
    }
    put(
        folder_ / "config.json",
        raw if raw is not None else json.dumps(config if config is not None else good),
    )
    if proc is not None:
        put(folder_ / "policy_preprocessor.json", json.dumps(proc))
    return lambda: read_model(folder_)


def _policy_case(**kw: Any) -> Callable[[Triple], Any]:
    return lambda t: _policy(t, **kw)


def _config_dir(t: Triple) -> Any:
    call = _policy(t)
    folder(t.root / "policy" / "config.json")
    put(t.root / "policy" / "policy_preprocessor.json", "{}")
    return call


def _config_fifo(t: Triple) -> Any:
    call = _policy(t)
    fifo(t.root / "policy" / "config.json")
    return call


STEP = {"registry_name": "normalizer_processor", "config": {}}
cases(
    "custom",
    "config.json",
    {
        "config_json_is_directory": (_config_dir, "config.json"),
        "config_json_fifo": (_config_fifo, "config.json"),
        "config_json_invalid": (_policy_case(raw="{"), "line 1"),
        "config_json_deeply_nested": (_policy_case(raw=deep_json()), None),
        "config_input_features_list": (_policy_case(config={"input_features": [1]}), "input_features"),
        "config_shape_six": (
            _policy_case(config={"input_features": {"s": {"type": "STATE", "shape": ["six"]}}}),
            "input_features.s.shape",
        ),
        "config_shape_negative": (
            _policy_case(config={"input_features": {"s": {"type": "STATE", "shape": [-2]}}}),
            "input_features.s.shape",
        ),
        "config_feature_type_missing": (
            _policy_case(config={"input_features": {"s": {"shape": [2]}}}),
            "input_features.s",
        ),
        "config_norm_map_list": (
            _policy_case(config={"input_features": {}, "normalization_mapping": ["MEAN_STD"]}),
            "normalization_mapping",
        ),
        "config_legacy_shape_six": (
            _policy_case(config={"input_shapes": {"observation.state": ["six"]}}),
            "input_shapes",
        ),
    },
)
cases(
    "custom",
    "policy_preprocessor.json",
    {
        "processor_steps_not_list": (_policy_case(proc={"steps": {"a": 1}}), "steps"),
        "processor_state_file_outside": (
            _policy_case(proc={"steps": [{**STEP, "state_file": "../../secret.json"}]}),
            "state_file",
        ),
        "processor_step_not_object": (_policy_case(proc={"steps": [5]}), "steps[0]"),
    },
)

# contract card (YAML) as the model, the training config (YAML), openpi norm_stats.json
CARD_HEAD = "source: test\nnormalization_mapping: {STATE: MEAN_STD}\n"
cases(
    "model",
    "contract.yaml",
    {
        "card_yaml_bomb": (lambda t: put(t.model, CARD_HEAD + BOMB + "features: {}\n"), "contract.yaml"),
        "card_deeply_nested": (lambda t: put(t.model, deep_yaml()), "contract.yaml"),
        "card_invalid_yaml": (lambda t: put(t.model, "a: [\n"), "contract.yaml"),
        "card_not_mapping": (lambda t: put(t.model, "- 1\n- 2\n"), None),
        "card_missing_source": (lambda t: put(t.model, "features: {}\n"), "source"),
        "card_features_list": (lambda t: put(t.model, CARD_HEAD + "features: [1, 2]\n"), "features"),
        "card_feature_not_mapping": (lambda t: put(t.model, CARD_HEAD + "features: {a: 5}\n"), "features.a"),
        "card_shape_six": (
            lambda t: put(t.model, CARD_HEAD + "features: {a: {type: STATE, shape: [six]}}\n"),
            "features.a.shape",
        ),
        "card_shape_negative": (
            lambda t: put(t.model, CARD_HEAD + "features: {a: {type: STATE, shape: [-1]}}\n"),
            "features.a.shape",
        ),
        "card_stats_strings": (
            lambda t: put(t.model, CARD_HEAD + "features: {}\nstats: {a: {mean: [x, y]}}\n"),
            "stats.a.mean",
        ),
        "card_stats_list": (lambda t: put(t.model, CARD_HEAD + "features: {}\nstats: [1]\n"), "stats"),
        "card_bad_date_stays_text": (
            lambda t: put(t.model, "source: 2026-13-45\nfeatures: [1]\n"),
            "features",
        ),
        "card_fifo": (lambda t: fifo(t.model), "contract.yaml"),
        "card_symlink_dev_zero": (lambda t: link(t.model, "/dev/zero"), "contract.yaml"),
    },
)
cases(
    "training",
    "train.yaml",
    {
        "training_yaml_bomb": (lambda t: put(t.training, BOMB + "policy: {}\n"), "train.yaml"),
        "training_deeply_nested": (lambda t: put(t.training, deep_yaml()), "train.yaml"),
        "training_not_mapping": (lambda t: put(t.training, "[1, 2]\n"), None),
        "training_policy_list": (lambda t: put(t.training, "policy: [1]\n"), "policy"),
        "training_norm_map_list": (
            lambda t: put(t.training, "policy: {normalization_mapping: [1]}\n"),
            "normalization_mapping",
        ),
        "training_input_shape_six": (
            lambda t: put(t.training, "policy: {input_features: {s: {type: STATE, shape: [six]}}}\n"),
            "policy.input_features.s.shape",
        ),
        "training_features_shape_negative": (
            lambda t: put(t.training, "features: {s: {shape: [-4]}}\n"),
            "features.s.shape",
        ),
        "training_features_not_mapping": (lambda t: put(t.training, "features: {s: 5}\n"), "features.s"),
        "training_rename_map_list": (lambda t: put(t.training, "rename_map: [a]\n"), "rename_map"),
        "training_fifo": (lambda t: fifo(t.training), "train.yaml"),
        "training_huge": (lambda t: huge(t.training), "train.yaml"),
        "training_not_utf8": (lambda t: put(t.training, b"policy: \xff\xfe\n"), "train.yaml"),
    },
)


def _openpi(text: str) -> Callable[[Triple], Any]:
    def build(t: Triple) -> Any:
        path = t.root / "pi05_x" / "norm_stats.json"
        put(path, text)
        return lambda: read_model(path.parent)

    return build


cases(
    "custom",
    "norm_stats.json",
    {
        "openpi_norm_stats_not_object": (_openpi('{"norm_stats": [1]}'), "norm_stats"),
        "openpi_values_strings": (
            _openpi('{"norm_stats": {"state": {"mean": ["a"]}}}'),
            "norm_stats.state.mean",
        ),
        "openpi_deeply_nested": (_openpi(deep_json()), None),
    },
)

# waivers.yaml (read at launch)
WAIVER = "waivers:\n  - {check: contract.x, justification: ok, who: me, date: %s}\n"
cases(
    "waivers",
    "waivers.yaml",
    {
        "waiver_date_2026_13_45": (
            lambda t: put(t.root / "waivers.yaml", WAIVER % "2026-13-45"),
            "waivers[0].date",
        ),
        "waiver_date_words": (lambda t: put(t.root / "waivers.yaml", WAIVER % "tomorrow"), "waivers[0].date"),
        "waiver_deeply_nested": (lambda t: put(t.root / "waivers.yaml", deep_yaml()), "waivers"),
        "waiver_yaml_bomb": (lambda t: put(t.root / "waivers.yaml", BOMB), "waivers"),
        "waiver_not_a_list": (lambda t: put(t.root / "waivers.yaml", "waivers: {a: 1}\n"), "waivers"),
        "waiver_entry_not_mapping": (lambda t: put(t.root / "waivers.yaml", "waivers: [5]\n"), "waivers"),
        "waiver_missing_who": (
            lambda t: put(
                t.root / "waivers.yaml", "waivers: [{check: a, justification: b, date: 2026-01-01}]\n"
            ),
            "waivers[0].who",
        ),
        "waiver_fifo": (lambda t: fifo(t.root / "waivers.yaml"), "waivers"),
        "waiver_invalid_yaml": (lambda t: put(t.root / "waivers.yaml", "waivers: [\n"), "waivers"),
    },
)


# fingerprints: never hang, never crash on a name; a digest or a named error
def _name_not_utf8(t: Triple) -> None:
    (t.dataset / "data").joinpath(os.fsdecode(b"ep\xff\xfe.parquet")).write_bytes(b"x")


cases(
    "fingerprint",
    "ds",
    {
        "fingerprint_name_not_utf8": (_name_not_utf8, None),
        "fingerprint_fifo_in_dataset": (lambda t: fifo(t.dataset / "data" / "pipe"), None),
        "fingerprint_link_to_dev_zero": (lambda t: link(t.stats, "/dev/zero"), None),
        "fingerprint_link_to_root_of_machine": (lambda t: link(t.dataset / "everything", "/"), None),
        "fingerprint_link_loop": (lambda t: link(t.dataset / "loop", t.dataset / "loop"), None),
        "fingerprint_dangling_link": (lambda t: link(t.dataset / "gone", t.root / "nowhere"), None),
    },
)


# data rows with NaN / inf: the reconciliation's hard row names the feature, the dims and the count
def _nonfinite(value: float, dims: tuple[int, ...]) -> Callable[[Triple], None]:
    def build(t: Triple) -> None:
        table = pq.read_table(t.parquet)
        action = np.array(table.column("action").to_pylist(), dtype=np.float32)
        action[3:7, list(dims)] = value
        _table(t, action=pa.array(action.tolist(), type=pa.list_(pa.float32(), 3)))

    return build


ROW_CASES = {
    "data_nan_rows": (_nonfinite(float("nan"), (1,)), [1], 4),
    "data_inf_rows": (_nonfinite(float("inf"), (0, 2)), [0, 2], 8),
    "data_minus_inf_rows": (_nonfinite(float("-inf"), (2,)), [2], 4),
}


# ------------------------------------------------------------------------------------------ the runner


def _call(case: Case, t: Triple, built: Any) -> Any:
    if case.run == "custom":
        return built()
    if case.run == "dataset":
        return read_dataset(t.dataset, OPTIONS)
    if case.run == "model":
        return read_model(t.model.parent)
    if case.run == "training":
        return read_training(t.training)
    if case.run == "waivers":
        return load_waivers(t.root / "waivers.yaml")
    if case.run == "fingerprint":
        return digest_path(t.dataset)
    raise AssertionError(case.run)


def assert_named(exc: PreflightError, file: str, field: str | None) -> None:
    """One line, the file (or key) named, a field set, no traceback text."""
    text = one_line(exc)
    assert "Traceback" not in str(exc) and "\n" not in str(exc).strip(), str(exc)
    assert file in text or file in str(exc.path or ""), f"{file!r} not named in: {text}"
    assert exc.field, f"no field in: {text}"
    if field is not None:
        assert field in exc.field or field in text, f"field {field!r} not in {exc.field!r}: {text}"


def test_at_least_105_classes() -> None:
    names = [c.name for c in CASES] + list(ROW_CASES) + list(LAUNCH_CASES)
    assert len(names) == len(set(names))
    assert len(names) >= 105, len(names)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_malformed_input_is_named(case: Case, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    with deadline():
        built = case.breaks(t)
        try:
            result = _call(case, t, built)
        except PreflightError as exc:
            assert_named(exc, case.file, case.field)
            return
    assert case.run == "fingerprint", f"{case.name}: accepted silently: {result!r}"
    assert str(result).startswith("sha256:")


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_nonfinite_rows_block(name: str, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from pipeline.stages.config import typed
    from pipeline.stages.contract import load_sources, reconcile
    from pipeline.stages.contract.config import ContractConfig

    t = make_triple(tmp_path)
    build, dims, total = ROW_CASES[name]
    build(t)
    cfg = OmegaConf.create({k: {"path": str(getattr(t, k))} for k in ("model", "training", "dataset")})
    config = typed(ContractConfig, {}, "stages.contract")
    with deadline():
        checks, _ = reconcile(*load_sources(cfg, config), config)
    rows = {c.id: c for c in checks if c.id.startswith("contract.finite:")}
    bad = rows["contract.finite:action"]
    assert (bad.verdict, bad.severity, bad.blocking) == ("mismatch", "hard", True)
    assert bad.evidence["dims"] == dims and sum(bad.evidence["counts"]) == total
    assert f"{total} NaN/inf" in bad.message and "action" in bad.message
    assert rows["contract.finite:observation.state"].verdict == "match"


# --------------------------------------------------------------------------- launch config, in-process

LAUNCH_CASES = {
    "launcher_poll_s_negative": (["launcher.poll_s=-1"], "launcher.poll_s"),
    "launcher_poll_s_zero": (["launcher.poll_s=0"], "launcher.poll_s"),
    "launcher_max_parallel_negative": (["launcher.max_parallel=-1"], "launcher.max_parallel"),
    "launcher_max_parallel_zero": (["launcher.max_parallel=0"], "launcher.max_parallel"),
    "launcher_max_parallel_fraction": (["launcher.max_parallel=1.5"], "launcher.max_parallel"),
    "launcher_requeue_max_negative": (["launcher.requeue_max=-1"], "launcher.requeue_max"),
    "launcher_signal_delay_negative": (["launcher.signal_delay_s=-5"], "launcher.signal_delay_s"),
    "launcher_signal_delay_text": (["launcher.signal_delay_s=soon"], "launcher.signal_delay_s"),
    "launcher_additional_parameters_text": (
        ["launcher.additional_parameters=x"],
        "launcher.additional_parameters",
    ),
    "container_binary_with_option": (["container.binary=apptainer --foo"], "container.binary"),
    "container_binary_with_semicolon": (["container.binary='apptainer;rm -rf x'"], "container.binary"),
    "container_python_with_dollar": (["container.python='$(id)'"], "container.python"),
    "container_extra_args_string": (["container.extra_args=--cleanenv --nv"], "container.extra_args"),
    "resources_gpus_per_node_1e6": (
        ["resources_default.gpus_per_node=1e6"],
        "resources_default.gpus_per_node",
    ),
    "resources_cpus_per_task_1e8": (
        ["resources_default.cpus_per_task=1e8"],
        "resources_default.cpus_per_task",
    ),
    "resources_time_min_1e30": (["resources_default.time_min=1e30"], "resources_default.time_min"),
    "resources_mem_gb_negative": (["resources_default.mem_gb=-1"], "mem_gb"),
    "stage_gpus_per_node_1e6": (
        ["stages.contract.resources.gpus_per_node=1000000"],
        "stages.contract.resources.gpus_per_node",
    ),
    "contract_rank_error_zero": (["stages.contract.rank_error=0"], "stages.contract.rank_error"),
    "contract_dynamics_rows_negative": (
        ["stages.contract.dynamics_rows=-5"],
        "stages.contract.dynamics_rows",
    ),
    "plugin_raises_at_import": (["plugins=[malformed_plugin_boom]"], "plugins"),
}
APPTAINER = ("container.binary", "container.python", "container.extra_args")


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[str]], Any]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import pipeline.launch  # registers the stages' configs

    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "malformed_plugin_boom.py").write_text("raise RuntimeError('boom at import')\n")
    image = plugins / "image.sif"
    image.write_bytes(b"not really an image")
    sys.path.insert(0, str(plugins))
    GlobalHydra.instance().clear()
    conf = Path(pipeline.launch.__file__).parent / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):

        def build(overrides: list[str]) -> Any:
            extra = []
            if any(o.startswith(APPTAINER) for o in overrides):
                extra = ["container=apptainer", f"container.image={image}"]
            return hydra_compose("config", overrides=[*extra, *overrides])

        yield build
    sys.path.remove(str(plugins))


@pytest.mark.parametrize("name", list(LAUNCH_CASES))
def test_launch_config_is_refused(name: str, compose: Callable[[list[str]], Any]) -> None:
    from pipeline import launch
    from pipeline.errors import ConfigError

    overrides, key = LAUNCH_CASES[name]
    cfg = compose(overrides)
    with deadline(), pytest.raises(ConfigError) as info:
        launch.validate(cfg, launch.load_registry(cfg))
    assert key in info.value.key, one_line(info.value)
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


# ------------------------------------------------- a representative subset through `pipeline.launch`

LAUNCH_TIMEOUT_S = 300


def _launch(t: Triple, *overrides: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    from tests.conftest import launch

    paths = [
        f"{k}.path={getattr(t, k) if k != 'model' else t.model}" for k in ("model", "training", "dataset")
    ]
    proc = launch(t.root, "stage=contract", "launcher=local", *paths, *overrides, timeout=LAUNCH_TIMEOUT_S)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    leftovers = [p for p in t.root.rglob("*") if "tmp" in p.name and p.suffix != ".sif" and p.is_file()]
    assert not leftovers, f"half-written files left: {leftovers}"
    return proc, t.root / "preflight" / "runs"


def _plugin(t: Triple) -> str:
    (t.root / "boom_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    return "plugins=[boom_plugin]"


EXIT_2 = {
    "launch_max_parallel_negative": (lambda t: "launcher.max_parallel=-1", "launcher.max_parallel"),
    "launch_container_binary_shell_string": (
        lambda t: (
            (t.root / "i.sif").write_bytes(b"x") and f"container=apptainer container.image={t.root / 'i.sif'}"
        ),
        "container.binary",
    ),
    "launch_waiver_date_2026_13_45": (
        lambda t: (
            put(t.root / "waivers.yaml", WAIVER % "2026-13-45") or f"waivers_file={t.root / 'waivers.yaml'}"
        ),
        "waivers[0].date",
    ),
    "launch_plugin_raises_at_import": (_plugin, "plugins"),
}


@pytest.mark.parametrize("name", list(EXIT_2))
def test_launch_refuses_with_one_line(name: str, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    make, key = EXIT_2[name]
    overrides = make(t).split(" ")
    if name == "launch_container_binary_shell_string":
        overrides.append("container.binary='apptainer --foo; id'")
    proc, runs = _launch(t, *overrides)
    lines = [line for line in proc.stdout.splitlines() if "error" in line]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and key in lines[0] and "nothing was submitted" in lines[0], proc.stdout
    assert not runs.exists() or not any(runs.iterdir()), "a refused launch left a run folder"


def _name_not_utf8_parquet(t: Triple) -> None:
    (t.parquet.parent / os.fsdecode(b"episode_\xff\xfe.parquet")).write_bytes(b"not parquet")


EXIT_3 = {
    "launch_nan_in_rows": (ROW_CASES["data_nan_rows"][0], "contract.finite:action", "action", None),
    "launch_stats_json_fifo": (lambda t: fifo(t.stats), "contract.error", "stats.json", "stats.json"),
    "launch_file_name_not_utf8": (
        _name_not_utf8_parquet,
        "contract.error",
        "episode_\\xff\\xfe",
        "data file",
    ),
}


@pytest.mark.parametrize("name", list(EXIT_3))
def test_launch_records_a_named_row(name: str, tmp_path: Path) -> None:
    t = make_triple(tmp_path)
    breaks, check_id, file, field = EXIT_3[name]
    breaks(t)
    proc, runs = _launch(t)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (run,) = list(runs.iterdir())
    result = json.loads((run / "stages" / "contract.json").read_text())
    rows = {c["id"]: c for c in result["checks"]}
    assert check_id in rows, sorted(rows)
    row = rows[check_id]
    assert file in row["message"] and "Traceback" not in json.dumps(result), row
    if field is not None:
        assert field in (row["evidence"].get("field") or ""), row
    gate = json.loads((run / "gate.json").read_text())
    assert gate["gate"] == "blocked"
