"""Build the embedded demo: dataset (C), base checkpoint (A) and training config (B), per variant.

`default` is a consistent triple, so the gate clears. `faulty` keeps the same base checkpoint (trained
on the clean data) and plants the mismatches named in `pipeline/conf/demo/faulty.yaml` into the dataset and
the training config, so a new user sees the gate block with the rows that explain why:
a swapped pair of state dims (data only, names unchanged), an action dim recorded in degrees, stats
shipped without quantiles plus a MEAN_STD override of the QUANTILES base, a feature whose stats key
is missing (the normalizer would pass it through silently), one camera recorded BGR and two camera keys
exchanged.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline.demo import memo
from pipeline.demo.cameras import render_episodes
from pipeline.demo.dataset import ALL_STATS, FPS, generate_episodes, write_dataset
from pipeline.demo.marker import MARKER, built_paths, digest, settings
from pipeline.demo.once import build_once
from pipeline.demo.policy import save_pretrained
from pipeline.demo.teacher_forced import build_models
from pipeline.demo.train import train_policy
from pipeline.progress import Advance, progress


def plant_faults(
    episodes: list[dict[str, np.ndarray]], faults: Mapping[str, Any]
) -> list[dict[str, np.ndarray]]:
    """The data-side faults: swap state columns, record action columns in degrees instead of radians, an
    episode whose timestamps run backwards, camera faults, a camera shifted by whole episodes, an episode
    recorded twice."""
    out = copy.deepcopy(episodes)
    swap = faults.get("swap_state_dims")
    degrees = faults.get("degrees_action_dims") or []
    for episode in out:
        if swap:
            i, j = (int(d) for d in swap)
            episode["state"][:, [i, j]] = episode["state"][:, [j, i]]
        for d in degrees:
            episode["action"][:, int(d)] *= np.float32(180.0 / np.pi)
    last = len(out) - 1  # a smaller demo (demo.episodes) takes its last episodes instead
    if faults.get("backwards_time_episode") is not None:  # the recorder's clock reset mid-episode
        episode = out[min(int(faults["backwards_time_episode"]), last)]
        steps = np.arange(len(episode["state"]), dtype=np.float64)
        steps[len(steps) // 2 :] -= len(steps) // 4
        episode["timestamp"] = (steps / FPS).astype(np.float32)
    _camera_faults(out, faults)
    _episode_shift(out, dict(faults.get("episode_shift_camera") or {}))
    if faults.get("duplicate_episode") is not None:  # a merge that took one episode twice
        twice = int(faults["duplicate_episode"])
        out.append(copy.deepcopy(out[twice if twice <= last else max(last - 1, 0)]))
    return out


def _camera_faults(episodes: list[dict[str, np.ndarray]], faults: Mapping[str, Any]) -> None:
    """One camera recorded BGR (an OpenCV capture written as is), then two camera keys exchanged, and a
    camera recorded late (frame t shows the scene of t - k, the first frame repeated: capture latency)."""
    bgr = faults.get("bgr_camera")
    swap = faults.get("swap_cameras")
    lag = dict(faults.get("lag_camera") or {})
    for episode in episodes:
        if bgr and bgr in episode:
            episode[bgr] = np.ascontiguousarray(episode[bgr][..., ::-1])
        if swap and all(k in episode for k in swap):
            a, b = swap
            episode[a], episode[b] = episode[b], episode[a]
        for key, k in lag.items():
            if key in episode:
                late = np.clip(np.arange(len(episode[key])) - int(k), 0, None)
                episode[key] = np.ascontiguousarray(episode[key][late])


def _episode_shift(episodes: list[dict[str, np.ndarray]], shifts: Mapping[str, int]) -> None:
    """A camera shifted by whole episodes: episode e's frames under the key are episode e+k's (a v3.0
    `from_timestamp` off by k episodes for the whole file, v2.x files renumbered), counted round the end;
    each episode keeps its own frame count (the other's cut, or its last frame repeated)."""
    n = len(episodes)
    for key, k in shifts.items():
        if not n or not all(key in e for e in episodes):
            continue
        source = [episodes[(e + int(k)) % n][key] for e in range(n)]
        for episode, frames in zip(episodes, source, strict=True):
            pick = np.clip(np.arange(len(episode[key])), 0, len(frames) - 1)
            episode[key] = np.ascontiguousarray(frames[pick])


def build(demo_cfg: Any, out_dir: str | Path) -> dict[str, str]:
    """Generate the whole demo into `out_dir` (model/, dataset/, training.yaml, demo.json)."""
    cfg = settings(demo_cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with progress(f"building the demo ({cfg['variant']}, once)", 4) as phase:
        paths, policy = _build_parts(cfg, out, phase)
    marker = {
        "settings": cfg,
        "digest": digest(cfg),
        "paths": {k: Path(v).name for k, v in paths.items()},
        "build_s": round(time.time() - started, 2),
        "final_loss": getattr(policy, "final_loss", None),
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2, default=str) + "\n")
    return paths


def _build_parts(cfg: dict[str, Any], out: Path, phase: Advance) -> tuple[dict[str, str], Any]:
    """The build's four phases (episodes, dataset, policy, teacher_forced models), each a progress step."""
    n, steps, seed = int(cfg["episodes"]), int(cfg["steps"]), int(cfg["seed"])
    episodes = memo.episodes(n, steps, seed, lambda: generate_episodes(n, steps, seed))
    size = int(cfg["cameras"].get("size") or 0)
    if size:
        for episode, frames in zip(episodes, render_episodes(episodes, size), strict=True):
            episode.update(frames)
    phase()
    clean = out / "base_training_data"
    if not cfg["faults"]:
        write_dataset(clean, episodes)  # the default's own dataset; faulty writes it only to train on
    phase()
    fit = {"seed": seed, "steps": int(cfg["train_steps"]), "hidden": int(cfg["hidden"])}
    policy, stats, spec = memo.policy(episodes, fit, lambda: train_policy(_written(clean, episodes), **fit))
    phase()
    save_pretrained(
        policy,
        stats,
        out / "model",
        spec,
        extra_config={"demo": {"variant": cfg["variant"], "seed": cfg["seed"]}},
    )
    build_models(out, cfg, episodes)  # the teacher_forced stage's models (pipeline/demo/teacher_forced.py)
    phase()
    faults = cfg["faults"]
    if faults:
        shutil.rmtree(clean, ignore_errors=True)
        keep = faults.get("stats_keep") or ALL_STATS
        write_dataset(
            out / "dataset",
            plant_faults(episodes, faults),
            stats_keep=keep,
            stats_drop_features=faults.get("drop_stats_features") or (),
        )
    else:
        clean.rename(out / "dataset")
    training = _training_config(out, spec.normalization_mapping, faults)
    header = "# The demo's training config (LeRobot train_config layout; paths relative to this file).\n"
    (out / "training.yaml").write_text(header + yaml.safe_dump(training, sort_keys=False))
    paths = {
        "model": str(out / "model"),
        "dataset": str(out / "dataset"),
        "training": str(out / "training.yaml"),
    }
    return paths, policy


def _written(folder: Path, episodes: list[dict[str, np.ndarray]]) -> Path:
    if not folder.exists():
        write_dataset(folder, episodes)
    return folder


def _training_config(out: Path, base_modes: Mapping[str, str], faults: Mapping[str, Any]) -> dict[str, Any]:
    modes = {**base_modes, **dict(faults.get("normalization_override") or {})}
    return {
        "dataset": {"repo_id": "local/demo_cube_single", "root": "dataset"},
        "policy": {"type": "demo_mlp", "pretrained_path": "model", "normalization_mapping": modes},
        "seed": 0,
        "batch_size": 256,
        "steps": 300,
    }


DEMO_BYTES = 12 * 2**20  # the default demo is ~4.3 MB (3.7 MB video); twice that while copied, and a margin


def ensure(demo_cfg: Any, root: str | Path) -> dict[str, str]:
    """Build the variant once under `root/<variant>` and reuse it while its settings are unchanged.

    Concurrent launches are safe: each builds in a private temporary directory and renames it into
    place; the loser of the race discards its copy and uses the winner's.
    """
    cfg = settings(demo_cfg)
    target = build_once(
        Path(root),
        str(cfg["variant"]),
        lambda t: built_paths(t, cfg) is not None,
        lambda folder: build(cfg, folder),
        needed=DEMO_BYTES,
    )
    found = built_paths(target, cfg)
    assert found is not None
    return found
