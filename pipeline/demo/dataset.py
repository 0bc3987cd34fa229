"""The demo dataset: OGBench `cube-single` episodes from the scripted oracle, written as LeRobot v3.0.

Stable API (the demo's build and trainers import it; stages never do):
`generate_episodes(n_episodes, steps, seed)`, `write_dataset(...)`, `read_frames(dataset_dir)` (through
the one LeRobot data API), `STATE_NAMES`, `ENV_NAMES`, `ACTION_NAMES`.

Generation is local (MuJoCo through ogbench/gymnasium, no downloads, no rendering) and deterministic for
a seed: the env is reset with the seed and the oracle's global-numpy randomness is seeded per episode,
then the caller's numpy state is restored. The on-disk layout is LeRobot v3.0's: `meta/info.json` (with
names for every vector feature), `meta/stats.json` (mean, std, min, max, q01/q10/q50/q90/q99, count),
`meta/episodes/chunk-000/file-000.parquet`, `meta/tasks.parquet`, `data/chunk-000/file-000.parquet`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.demo.cameras import CAMERAS
from pipeline.demo.features import (  # noqa: F401  (re-exported: the dataset's stable API)
    ACTION_KEY,
    ACTION_NAMES,
    ENV_KEY,
    ENV_NAMES,
    FPS,
    STATE_KEY,
    STATE_NAMES,
)
from pipeline.demo.videos import write_cameras
from pipeline.progress import track
from pipeline.readers import LeRobotData
from pipeline.readers.frames import FrameReader
from pipeline.readers.stats import compute_stats, iter_array_blocks

ENV_ID = "cube-single-v0"
TASK = "Pick up the cube and place it at the target."
NAMES = {STATE_KEY: STATE_NAMES, ENV_KEY: ENV_NAMES, ACTION_KEY: ACTION_NAMES}
VECTOR_KEYS = (STATE_KEY, ENV_KEY, ACTION_KEY)
ROW_KEYS = ("state", "env_state", "action")
POSE_KEYS = ("qpos", "mocap_pos", "mocap_quat")  # what the cameras draw a row from (demo/cameras.py)
ALL_STATS = ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99", "count")


def _state(info: Mapping[str, Any]) -> np.ndarray:
    return np.concatenate(
        [
            info["proprio/joint_pos"],
            info["proprio/effector_pos"],
            info["proprio/effector_yaw"],
            info["proprio/gripper_opening"],
        ]
    ).astype(np.float32)


def _env_state(info: Mapping[str, Any]) -> np.ndarray:
    return np.concatenate([info["privileged/block_0_pos"], info["privileged/block_0_yaw"]]).astype(np.float32)


def generate_episodes(n_episodes: int, steps: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Scripted-oracle rollouts: per episode `{state, env_state, action}` arrays of `steps` rows, and the
    physics pose of every row (`qpos`, `mocap_pos`, `mocap_quat`) so the cameras can draw it later."""
    # imported here, not at the top: the trainers that only read a dataset (reference_trainer and its
    # twins) would otherwise import pipeline.stages (hydra, omegaconf) with it, ~0.11 CPU-s per process
    from pipeline.stages.render_cache.render import reset_quietly

    os.environ.setdefault("MUJOCO_GL", "egl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import gymnasium
        import ogbench  # noqa: F401  (registers the manipspace envs)
        from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle

        env = gymnasium.make(
            ENV_ID,
            terminate_at_goal=False,
            mode="data_collection",
            max_episode_steps=steps,
            disable_env_checker=True,
        )
    saved = np.random.get_state()
    episodes = []
    try:
        for index in track(range(n_episodes), f"demo: {n_episodes} oracle episodes"):
            np.random.seed(seed * 1000 + index)
            ob, info = reset_quietly(env, seed=seed * 1000 + index)
            oracle = CubeMarkovOracle(env=env, min_norm=0.4)
            oracle.reset(ob, info)
            rows: dict[str, list[np.ndarray]] = {k: [] for k in (*ROW_KEYS, *POSE_KEYS)}
            for _ in range(steps):
                action = np.clip(oracle.select_action(ob, info), -1.0, 1.0).astype(np.float32)
                rows["state"].append(_state(info))
                rows["env_state"].append(_env_state(info))
                rows["action"].append(action)
                physics = env.unwrapped.data  # the pose the cameras draw for this row
                rows["qpos"].append(physics.qpos.copy())
                rows["mocap_pos"].append(physics.mocap_pos.copy())
                rows["mocap_quat"].append(physics.mocap_quat.copy())
                ob, _, _, _, info = env.step(action)
            episodes.append({k: np.stack(v) for k, v in rows.items()})
    finally:
        np.random.set_state(saved)
        env.close()
    return episodes


def feature_arrays(episodes: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {
        STATE_KEY: np.concatenate([e["state"] for e in episodes]),
        ENV_KEY: np.concatenate([e["env_state"] for e in episodes]),
        ACTION_KEY: np.concatenate([e["action"] for e in episodes]),
    }


def dataset_stats(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Stats in LeRobot's shape, computed with the same streaming code the contract stage uses."""
    out = {}
    for key, arr in arrays.items():
        out[key] = compute_stats(lambda a=arr, k=key: iter_array_blocks(a, k), {key: arr.shape[1]})[key]
        out[key].pop("nonfinite", None)
    return out


def _fixed_list(arr: np.ndarray) -> pa.FixedSizeListArray:
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), arr.shape[1])


def _info(arrays: Mapping[str, np.ndarray], n_episodes: int, robot_type: str) -> dict[str, Any]:
    features: dict[str, Any] = {
        key: {"dtype": "float32", "shape": [int(arrays[key].shape[1])], "names": list(NAMES[key])}
        for key in VECTOR_KEYS
    }
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    rows = int(arrays[STATE_KEY].shape[0])
    return {
        "codebase_version": "v3.0",
        "robot_type": robot_type,
        "total_episodes": n_episodes,
        "total_frames": rows,
        "total_tasks": 1,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 500,
        "fps": FPS,
        "splits": {"train": f"0:{n_episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
    }


def _stats_json(stats: Mapping[str, Mapping[str, np.ndarray]], keep: Iterable[str]) -> dict[str, Any]:
    keep = set(keep)
    return {
        key: {s: np.asarray(v).tolist() for s, v in block.items() if s in keep}
        for key, block in stats.items()
    }


def write_dataset(
    out_dir: str | Path,
    episodes: Sequence[Mapping[str, np.ndarray]],
    *,
    stats_keep: Iterable[str] = ALL_STATS,
    stats_drop_features: Iterable[str] = (),
    robot_type: str = "ogbench_ur5e_robotiq",
    row_group_rows: int = 1000,
) -> Path:
    """Write a LeRobot v3.0 dataset; `stats_*` let the faulty demo ship incomplete stats."""
    root = Path(out_dir)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    (root / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
    arrays = feature_arrays(episodes)
    lengths = [len(e["state"]) for e in episodes]
    episode_index = np.repeat(np.arange(len(episodes)), lengths)
    frame_index = np.concatenate([np.arange(n) for n in lengths])
    table = pa.table(
        {
            STATE_KEY: _fixed_list(arrays[STATE_KEY]),
            ENV_KEY: _fixed_list(arrays[ENV_KEY]),
            ACTION_KEY: _fixed_list(arrays[ACTION_KEY]),
            "timestamp": pa.array(_timestamps(episodes)),
            "frame_index": pa.array(frame_index.astype(np.int64)),
            "episode_index": pa.array(episode_index.astype(np.int64)),
            "index": pa.array(np.arange(len(frame_index), dtype=np.int64)),
            "task_index": pa.array(np.zeros(len(frame_index), dtype=np.int64)),
        }
    )
    pq.write_table(table, root / "data" / "chunk-000" / "file-000.parquet", row_group_size=row_group_rows)
    cams = [k for k in CAMERAS if k in episodes[0]]
    video_features, video_columns, video_stats = (
        write_cameras(root, [{k: e[k] for k in cams} for e in episodes], FPS) if cams else ({}, {}, {})
    )
    stats = {**dataset_stats(arrays), **video_stats}
    stats = {k: v for k, v in stats.items() if k not in set(stats_drop_features)}
    (root / "meta" / "stats.json").write_text(json.dumps(_stats_json(stats, stats_keep), indent=2) + "\n")
    info = _info(arrays, len(episodes), robot_type)
    info["features"] = {**{k: info["features"][k] for k in VECTOR_KEYS}, **video_features, **info["features"]}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4) + "\n")
    _write_episodes(root, episodes, lengths, video_columns)
    _write_tasks(root)
    return root


def _timestamps(episodes: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
    """Each episode's own `timestamp` where it has one (a planted fault), else frame / fps."""
    parts = [e["timestamp"] if "timestamp" in e else np.arange(len(e["state"])) / FPS for e in episodes]
    return np.concatenate(parts).astype(np.float32)


def _write_episodes(
    root: Path,
    episodes: Sequence[Mapping[str, np.ndarray]],
    lengths: list[int],
    video_columns: Mapping[str, Any],
) -> None:
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    columns: dict[str, Any] = {
        "episode_index": pa.array(np.arange(len(episodes), dtype=np.int64)),
        "tasks": pa.array([[TASK]] * len(episodes), type=pa.list_(pa.string())),
        "length": pa.array(np.asarray(lengths, dtype=np.int64)),
        "data/chunk_index": pa.array(np.zeros(len(episodes), dtype=np.int64)),
        "data/file_index": pa.array(np.zeros(len(episodes), dtype=np.int64)),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + np.asarray(lengths, dtype=np.int64)),
    }
    per_episode = [dataset_stats(feature_arrays([e])) for e in episodes]
    for key in VECTOR_KEYS:
        for stat in ALL_STATS:
            columns[f"stats/{key}/{stat}"] = pa.array(
                [np.asarray(s[key][stat]).tolist() for s in per_episode]
            )
    columns.update({k: pa.array(v) for k, v in video_columns.items()})
    columns["meta/episodes/chunk_index"] = pa.array(np.zeros(len(episodes), dtype=np.int64))
    columns["meta/episodes/file_index"] = pa.array(np.zeros(len(episodes), dtype=np.int64))
    pq.write_table(pa.table(columns), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")


def _write_tasks(root: Path) -> None:
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    table = pa.table({"task_index": pa.array([0], pa.int64()), "__index_level_0__": pa.array([TASK])})
    table = table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
    pq.write_table(table, root / "meta" / "tasks.parquet")


def camera_frames(dataset_dir: str | Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Every row's frame of each camera (uint8 [n, H, W, 3], parquet row order), decoded through the frame
    reader exactly as LeRobot's loader would: what training and the determinism twins see."""
    data = LeRobotData(dataset_dir)
    reader = FrameReader(data)
    order = data.frames(["episode_index"])["episode_index"]
    episodes = list(dict.fromkeys(order.tolist()))  # in row order
    return {k: np.concatenate([reader.frames(k, int(e)) for e in episodes]) for k in keys}


def read_frames(dataset_dir: str | Path, keys: Sequence[str] = VECTOR_KEYS) -> dict[str, np.ndarray]:
    """All rows of the dataset's vector features ([n, D]) plus `episode_index` and `frame_index` ([n]),
    through the one LeRobot data API (the demo is small; training reads it whole)."""
    return LeRobotData(dataset_dir).frames([*keys, "episode_index", "frame_index"])
