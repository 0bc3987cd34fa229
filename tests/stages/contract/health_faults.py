"""Planted dataset faults for the health rows, on copies of real LeRobot datasets (v2.1 and v3.0).

Shared by `test_health.py` and `benchmarks/bench_health_vs_doctor.py`. A copy is rewritten whole (data
and the per-episode metadata) after the fault is planted, so only the planted fault differs from the
real dataset; episodes are named by position (1 and 2), which both datasets have.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import REAL_DATA

REAL = REAL_DATA
DATASETS = {
    "v2.1": REAL / "YifanTian07__G1-policy-train",
    "v3.0": REAL / "SamueleSandrini__record-test",
}
V21_EPISODES = 8  # the v2.1 copy keeps its first 8 episodes (fast tests)
VECTORS = ("observation.state", "action")
Columns = dict[str, np.ndarray]


@dataclass
class Copy:
    root: Path
    version: str
    cols: Columns
    info: dict[str, Any]

    def rows(self, episode: int) -> np.ndarray:
        return np.flatnonzero(self.cols["episode_index"] == episode)

    def fps(self) -> float:
        return float(self.info["fps"])


def copy_dataset(version: str, dest: Path) -> Copy:
    """A copy of the real dataset as columns (the v2.1 one cut to its first episodes), not yet written."""
    src = DATASETS[version]
    shutil.copytree(src / "meta", dest / "meta")
    files = sorted((src / "data").rglob("*.parquet"))
    if version == "v2.1":
        files = [f for f in files if int(f.stem.split("_")[1]) < V21_EPISODES]
        _cut_jsonl(dest / "meta", V21_EPISODES)
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    cols = {c: _column(table[c]) for c in table.column_names}
    info = json.loads((dest / "meta" / "info.json").read_text())
    return Copy(dest, version, cols, info)


def _column(column: pa.ChunkedArray) -> np.ndarray:
    values = column.to_pylist()
    return np.asarray(values, dtype=np.float64 if isinstance(values[0], list) else None)


def _cut_jsonl(meta: Path, keep: int) -> None:
    for name in ("episodes.jsonl", "episodes_stats.jsonl"):
        lines = (meta / name).read_text().splitlines()
        kept = [line for line in lines if json.loads(line)["episode_index"] < keep]
        (meta / name).write_text("\n".join(kept) + "\n")


def write(copy: Copy) -> Path:
    """Write the columns in the dataset's own layout, with info totals and per-episode lengths."""
    data = copy.root / "data" / "chunk-000"
    data.mkdir(parents=True, exist_ok=True)
    episodes = np.unique(copy.cols["episode_index"])
    if copy.version == "v3.0":
        pq.write_table(_table(copy.cols), data / "file-000.parquet")
    else:
        for e in episodes:
            rows = copy.rows(int(e))
            pq.write_table(
                _table({k: v[rows] for k, v in copy.cols.items()}), data / f"episode_{e:06d}.parquet"
            )
    lengths = {int(e): len(copy.rows(int(e))) for e in episodes}
    copy.info.update(total_episodes=len(episodes), total_frames=len(copy.cols["episode_index"]))
    (copy.root / "meta" / "info.json").write_text(json.dumps(copy.info, indent=2))
    _write_lengths(copy, lengths)
    return copy.root


def _table(cols: Columns) -> pa.Table:
    out = {}
    for key, values in cols.items():
        if values.ndim == 2:
            out[key] = pa.FixedSizeListArray.from_arrays(
                pa.array(values.astype(np.float32).ravel()), values.shape[1]
            )
        else:
            out[key] = pa.array(values)
    return pa.table(out)


def _write_lengths(copy: Copy, lengths: dict[int, int]) -> None:
    meta = copy.root / "meta"
    if copy.version == "v2.1":
        rows = [json.loads(line) for line in (meta / "episodes.jsonl").read_text().splitlines()]
        for row in rows:
            row["length"] = lengths.get(row["episode_index"], row["length"])
        (meta / "episodes.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        return
    path = next((meta / "episodes").rglob("*.parquet"))
    table = pq.read_table(path)
    index = table.column("episode_index").to_pylist()
    new = [lengths.get(e, old) for e, old in zip(index, table.column("length").to_pylist(), strict=True)]
    pq.write_table(table.set_column(table.schema.get_field_index("length"), "length", pa.array(new)), path)


def renumber(copy: Copy) -> None:
    """After rows were added or removed: the global index 0, 1, 2, ... again."""
    copy.cols["index"] = np.arange(len(copy.cols["episode_index"]), dtype=np.int64)


def keep_rows(copy: Copy, rows: np.ndarray) -> None:
    copy.cols = {k: v[rows] for k, v in copy.cols.items()}
    renumber(copy)


# ------------------------------------------------------------------------------------------ faults
def backwards_time(c: Copy) -> dict[str, Any]:
    rows = c.rows(1)
    c.cols["timestamp"][rows[len(rows) // 2 :]] -= 1.0
    return {"episodes": [1]}


def dropped_frames(c: Copy) -> dict[str, Any]:
    c.cols["timestamp"][c.rows(1)[50:]] += 3 / c.fps()
    return {"episodes": [1]}


def fps_disagrees(c: Copy) -> dict[str, Any]:
    c.info["fps"] = c.fps() * 2
    return {}


def frame_index_broken(c: Copy) -> dict[str, Any]:
    c.cols["frame_index"][c.rows(1)[10]] += 5
    return {"episodes": [1]}


def index_break(c: Copy) -> dict[str, Any]:
    c.cols["index"][c.rows(2)[0] :] += 7
    return {}


def frozen(c: Copy) -> dict[str, Any]:
    rows = c.rows(1)
    held = rows[40 : 40 + int(0.45 * len(rows))]
    c.cols["action"][held] = c.cols["action"][held[0]]
    return {"episodes": [1]}


def stuck(c: Copy) -> dict[str, Any]:
    """The state dim whose action moves most in episode 1 (against its dataset range) holds still there."""
    rows = c.rows(1)
    action = c.cols["action"]
    moving = np.ptp(action[rows], axis=0) / np.maximum(np.ptp(action, axis=0), 1e-12)
    dim = int(np.argmax(moving))
    c.cols["observation.state"][rows, dim] = c.cols["observation.state"][rows[0], dim]
    return {"episodes": [1], "dims": [dim]}


def held(c: Copy) -> dict[str, Any]:
    """The action dim that moves most in episode 2 held at its first value for the whole episode (a
    disconnected command), while it moves in the other episodes."""
    rows = c.rows(2)
    action = c.cols["action"]
    dim = int(np.argmax(np.ptp(action[rows], axis=0) / np.maximum(np.ptp(action, axis=0), 1e-12)))
    action[rows, dim] = action[rows[0], dim]
    return {"episodes": [2], "dims": [dim]}


def spike(c: Copy) -> dict[str, Any]:
    action = c.cols["action"]
    step = np.diff(action, axis=0).std(axis=0)
    dim = int(np.argmax(step))
    action[c.rows(1)[50], dim] += 40 * step[dim]
    return {"episodes": [1]}


def outlier(c: Copy) -> dict[str, Any]:
    state = c.cols["observation.state"]
    q01, q99 = np.quantile(state[:, 2], [0.01, 0.99])
    state[c.rows(2)[20], 2] = q99 + 50 * (q99 - q01 + 1e-6)
    return {"episodes": [2]}


def short(c: Copy) -> dict[str, Any]:
    rows = c.rows(1)
    keep_rows(c, np.setdiff1d(np.arange(len(c.cols["episode_index"])), rows[20:]))
    return {"episodes": [1]}


def missing_episode(c: Copy) -> dict[str, Any]:
    keep_rows(c, np.flatnonzero(c.cols["episode_index"] != 1))
    return {"missing": [1]}


def duplicate(c: Copy) -> dict[str, Any]:
    """Episode 2's rows replaced by a copy of episode 1's (a merge that took one episode twice)."""
    ids = np.unique(c.cols["episode_index"])
    parts = [c.rows(1) if e == 2 else c.rows(int(e)) for e in ids]
    episode = np.concatenate([np.full(len(p), e) for p, e in zip(parts, ids, strict=True)])
    keep_rows(c, np.concatenate(parts))
    c.cols["episode_index"] = episode
    return {"groups": [[1, 2]]}


def partial_copy(c: Copy) -> dict[str, Any]:
    """Episode 3's first 60 rows replaced by episode 1's rows 10-69 (a partial re-upload): its digest
    and its means stay its own."""
    dest, src = c.rows(3)[:60], c.rows(1)[10:70]
    for key in VECTORS:
        c.cols[key][dest] = c.cols[key][src]
    return {"episodes": [3]}


def info_field(c: Copy) -> dict[str, Any]:
    del c.info["data_path"]
    return {}


def task_undeclared(c: Copy) -> dict[str, Any]:
    c.cols["task_index"][c.rows(1)] = 7
    return {}


def declared_absent(c: Copy) -> dict[str, Any]:
    c.info["features"]["language_instruction"] = {"dtype": "string", "shape": [1], "names": None}
    return {}


def stray_file(c: Copy) -> dict[str, Any]:
    (c.root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
    (c.root / "data" / "chunk-000" / "notes.txt").write_text("left by a copy script\n")
    return {}


def wrong_type(c: Copy) -> dict[str, Any]:
    c.cols["timestamp"] = np.array([f"{t:.4f}" for t in c.cols["timestamp"]])
    return {}


def videos_partial(c: Copy) -> dict[str, Any]:
    from pipeline.readers.lerobot_data import LeRobotData

    write(c)
    data = LeRobotData(c.root)
    path, _, _ = data.video_location(data.video_keys()[0], 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return {}


# name -> (plant, the row it must give, its severity)
FAULTS: dict[str, tuple[Callable[[Copy], dict[str, Any]], str, str]] = {
    "backwards_time": (backwards_time, "contract.health.time.order", "hard"),
    "dropped_frames": (dropped_frames, "contract.health.time.gaps", "soft"),
    "fps_disagrees": (fps_disagrees, "contract.health.time.fps", "hard"),
    "frame_index_broken": (frame_index_broken, "contract.health.time.frame_index", "soft"),
    "index_break": (index_break, "contract.health.time.index", "hard"),
    # hard: every command held 5-6 s while the joints moved (a recording dropout) and the model predicts it
    "frozen": (frozen, "contract.health.frozen:action", "hard"),
    "stuck": (stuck, "contract.health.stuck:observation.state", "hard"),
    "held": (held, "contract.health.held:action", "hard"),
    # hard: the model's action mode is not known (a training config would say), and under MIN_MAX the
    # spike alone widens the range every other action is scaled by (0.6-0.9 normalized units)
    "spike": (spike, "contract.health.spikes:action", "hard"),
    # a one-frame far value is a spike; clipping or a constant dim over the whole dataset is what the data
    # is (the profile), a departure only from a base's stats (test_health_departures.py)
    # soft: the model reads the state unnormalized (IDENTITY), so the far value moves no stat it uses
    "outlier": (outlier, "contract.health.spikes:observation.state", "soft"),
    "short": (short, "contract.health.episodes.short", "hard"),
    "missing_episode": (missing_episode, "contract.health.episodes.missing", "soft"),
    "duplicate": (duplicate, "contract.health.episodes.duplicates", "hard"),
    "partial_copy": (partial_copy, "contract.health.episodes.repeated_rows", "hard"),
    "info_field": (info_field, "contract.health.meta.info", "hard"),
    "task_undeclared": (task_undeclared, "contract.health.meta.tasks", "hard"),
    "declared_absent": (declared_absent, "contract.health.meta.columns", "hard"),
    "stray_file": (stray_file, "contract.health.meta.files", "soft"),
    "wrong_type": (wrong_type, "contract.health.meta.types", "hard"),
    "videos_partial": (videos_partial, "contract.health.videos", "hard"),
}


def planted(version: str, fault: str, dest: Path) -> tuple[Path, dict[str, Any]]:
    copy = copy_dataset(version, dest)
    expected = FAULTS[fault][0](copy) if fault != "clean" else {}
    return write(copy), expected


# ------------------------------------------------- whole real datasets, rewritten file by file
def load_columns(root: Path) -> Columns:
    """Every data file of a LeRobot dataset as columns (rows in file order)."""
    files = sorted((root / "data").rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    return {c: _column(table[c]) for c in table.column_names}


def rewritten(src: Path, dest: Path, edit: Callable[[Columns], Any]) -> Any:
    """A whole copy of a real dataset whose vector columns `edit` changed in place; every data file,
    its row count and its layout stay the real dataset's (meta/ too). Returns what `edit` returned."""
    shutil.copytree(src, dest)
    files = sorted((dest / "data").rglob("*.parquet"))
    cols = load_columns(dest)
    planted_ = edit(cols)
    offset = 0
    for path in files:
        table = pq.read_table(path)
        for name in table.column_names:
            values = cols[name][offset : offset + table.num_rows]
            if values.ndim == 2:
                kind = table.schema.field(name).type
                new = pa.FixedSizeListArray.from_arrays(
                    pa.array(values.astype(np.float32).ravel()), values.shape[1]
                )
                new = new if pa.types.is_fixed_size_list(kind) else pa.array(new.to_pylist(), type=kind)
                table = table.set_column(table.schema.get_field_index(name), name, new)
        pq.write_table(table, path)
        offset += table.num_rows
    return planted_
