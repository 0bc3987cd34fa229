"""The valid triple every malformed-input case starts from, the mutations, and the case registry."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.readers.scan import ScanOptions

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


def _table(t: Triple, **columns: Any) -> None:
    table = pq.read_table(t.parquet)
    for name, array in columns.items():
        index = table.column_names.index(name)
        table = table.remove_column(index) if array is None else table.set_column(index, name, array)
    pq.write_table(table, t.parquet)


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
