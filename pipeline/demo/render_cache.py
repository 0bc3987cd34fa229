"""The render_cache demo: a small release (OGBench's shipped oracle on the state env) and a frame cache
re-rendered from it with the visual env's own renderer, two budgets; `faults` plants the three faults of
issue 8 (a row shifted by one between frames and actions, a frame rendered with another camera, a
manifest that is not a prefix of the next).

Trajectories come from the state env (~800 steps/s); only what the cache needs is rendered (~7 fps on
CPU). The release stores `control` (the ctrl of each step) so the live-step pairing can be replayed, and
optionally raw frames of episode 0 as the collection renderer saw them (the frame `env.step` returned).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.demo.once import build_once
from pipeline.progress import progress, track
from pipeline.stages.render_cache.render import EvalRenderer, reset_quietly

DEFAULTS: dict[str, Any] = {
    "variant": "default",
    "seed": 0,
    "episodes": 4,
    "steps": 10,  # transitions per episode (the release holds steps + 1 states)
    "budgets": [2, 4],
    "size": 64,
    "hires": 224,  # 0: no higher-resolution cache
    "raw_frames": 224,  # 0: no raw frames in the release (then the domain gap has nothing to measure)
    "faults": {},
}
ENV_ID, STATE_ENV_ID, CAMERA, OTHER_CAMERA, TASK_ID = (
    "visual-cube-single-v0",
    "cube-single-v0",
    "front_pixels",
    "front",
    1,
)
MARKER = "render_cache_demo.json"


def settings(raw: Any) -> dict[str, Any]:
    if raw is not None and not isinstance(raw, Mapping):
        from omegaconf import OmegaConf

        raw = OmegaConf.to_container(raw, resolve=True)
    out = {**DEFAULTS, **{k: v for k, v in dict(raw or {}).items() if v is not None}}
    out["faults"] = dict(out.get("faults") or {})
    return out


def rollouts(n: int, steps: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Oracle episodes on the state env: qpos, qvel, action, observation, control, goal position."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import gymnasium
        import ogbench  # noqa: F401
        from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle

        env = gymnasium.make(
            STATE_ENV_ID, terminate_at_goal=False, mode="data_collection", disable_env_checker=True
        )
    saved, out = np.random.get_state(), []
    try:
        for i in track(range(n), f"render_cache demo: {n} oracle episodes"):
            np.random.seed(seed * 1000 + i)
            ob, info = reset_quietly(env, seed=seed * 1000 + i)
            u = env.unwrapped
            oracle = CubeMarkovOracle(env=env, min_norm=0.4)
            oracle.reset(ob, info)
            rows: dict[str, list[np.ndarray]] = {
                k: [] for k in ("qpos", "qvel", "action", "observation", "control", "goal")
            }
            for t in range(steps + 1):
                action = np.clip(oracle.select_action(ob, info), -1, 1) if t < steps else np.zeros(5)
                rows["qpos"].append(u.data.qpos.copy())
                rows["qvel"].append(u.data.qvel.copy())
                rows["observation"].append(np.asarray(ob, dtype=np.float64))
                rows["goal"].append(u.data.mocap_pos[u._cube_target_mocap_ids].copy())
                rows["action"].append(np.asarray(action, dtype=np.float32))
                if t < steps:
                    ob, _, _, _, info = env.step(action)
                    rows["control"].append(np.asarray(info["control"]))
            rows["control"].append(np.zeros_like(rows["control"][-1]))
            out.append({k: np.stack(v) for k, v in rows.items()})
    finally:
        np.random.set_state(saved)
        env.close()
    return out


def _npy(path: Path, arr: np.ndarray) -> None:
    import io

    from pipeline.storage import atomic_write_bytes

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


def _npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    import io

    from pipeline.storage import atomic_write_bytes

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def write_release(
    root: Path, episodes: list[dict[str, np.ndarray]], cfg: Mapping[str, Any], raw: np.ndarray | None
) -> list[str]:
    """data/episode-XXXX.npz + subsets/subset-XXXX.jsonl per budget (faults: a non-nested manifest)."""
    from pipeline.storage import atomic_write_text

    names = [f"episode-{i:04d}.npz" for i in range(len(episodes))]
    for i, (name, ep) in enumerate(zip(names, episodes, strict=True)):
        arrays = {k: v for k, v in ep.items() if k != "goal"}
        arrays["variation.cube.goal_position"] = ep["goal"]
        if raw is not None and i == 0:
            arrays["pixels.front"] = raw
        _npz(root / "data" / name, arrays)
    for b in cfg["budgets"]:
        order = list(range(b))
        if cfg["faults"].get("non_prefix") and b == min(cfg["budgets"]) and b >= 2:
            order[0], order[1] = order[1], order[0]
        lines = [json.dumps({"archive_file": names[i], "transition_count": int(cfg["steps"])}) for i in order]
        atomic_write_text(root / "subsets" / f"subset-{b:04d}.jsonl", "\n".join(lines) + "\n")
    return names


def _manifest(root: Path, b: int) -> list[int]:
    lines = (root / "subsets" / f"subset-{b:04d}.jsonl").read_text().splitlines()
    return [int(json.loads(line)["archive_file"].split("-")[1].split(".")[0]) for line in lines]


def render_states(
    r: Any, episodes: list[dict[str, np.ndarray]], order: list[int], steps: int, memo: dict
) -> tuple[np.ndarray, np.ndarray]:
    """frames[t] = the eval env's own pixel observation of state t; goals = its terminal state's.
    `memo` keeps renders across budgets (a smaller budget's episodes are the larger's)."""

    def frame(i: int, t: int) -> np.ndarray:
        if (i, t) not in memo:
            r.set_state(episodes[i]["qpos"][t], episodes[i]["qvel"][t])
            memo[(i, t)] = np.array(r.get_pixel_observation())
        return memo[(i, t)]

    pairs = [(i, t) for i in order for t in range(steps)]
    frames = [frame(i, t) for i, t in track(pairs, f"render_cache demo: rendering {len(pairs)} frames")]
    goals = [frame(i, steps) for i in order for _ in range(steps)]
    return np.stack(frames), np.stack(goals)


class _Sized:
    """The eval renderer behind the env's set_state/get_pixel_observation pair, at a size the env's own
    observation (64 px) does not have: so `demo.render_cache.size` is what the cache holds (issue 26)."""

    def __init__(self, er: EvalRenderer) -> None:
        self.er, self.qpos, self.qvel = er, None, None

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self.qpos, self.qvel = qpos, qvel

    def get_pixel_observation(self) -> np.ndarray:
        return self.er.state(self.qpos, self.qvel)


def _at_size(er: EvalRenderer, size: int) -> Any:
    """The env itself when its observation already has `size` pixels (the bytes a policy sees), else
    the eval renderer at `size`."""
    u = er.env.unwrapped
    return u if u.get_pixel_observation().shape[0] == size else _Sized(er)


def write_cache(root: Path, rel: Path, episodes: list[dict[str, np.ndarray]], cfg: Mapping[str, Any]) -> None:
    """Per budget: frames, goals, meta, proprio (+ the largest budget's higher-resolution cache)."""
    steps, faults, largest = int(cfg["steps"]), cfg["faults"], max(cfg["budgets"])
    with EvalRenderer(ENV_ID, TASK_ID, int(cfg["size"]), CAMERA, "egl") as er:
        u, memo = _at_size(er, int(cfg["size"])), {}
        for b in cfg["budgets"]:
            order = _manifest(rel, b)
            frames, goals = render_states(u, episodes, order, steps, memo)
            if b == largest:
                frames = _plant_frame_faults(er, frames, episodes, order, steps, faults)
            tag = f"b{b:04d}"
            _npy(root / f"pix_{tag}_frames.npy", frames)
            _npy(root / f"pix_{tag}_goals.npy", goals)
            _npz(root / f"pix_{tag}_meta.npz", _meta(episodes, order, steps, er))
            _npy(
                root / f"prop_{tag}.npy",
                np.concatenate([episodes[i]["observation"][:steps, :19] for i in order]).astype(np.float32),
            )
    if cfg["hires"]:
        size = int(cfg["hires"])
        with EvalRenderer(ENV_ID, TASK_ID, size, CAMERA, "egl") as er:
            order = _manifest(rel, largest)
            frames = np.stack(
                [
                    er.state(episodes[i]["qpos"][t], episodes[i]["qvel"][t])
                    for i, t in track(
                        [(i, t) for i in order for t in range(steps)], f"render_cache demo: {size} px frames"
                    )
                ]
            )
            _npy(root / f"vla_b{largest:04d}_frames{size}.npy", frames)
            _npz(root / f"vla_b{largest:04d}_meta.npz", _meta(episodes, order, steps, er))


def _meta(
    episodes: list[dict[str, np.ndarray]], order: list[int], steps: int, er: Any
) -> dict[str, np.ndarray]:
    """The rows' actions, states, trajectory ids and goals, and the GL_RENDERER the frames were drawn
    with (so the stage's rerender row names the renderer on both sides)."""
    pick = [episodes[i] for i in order]
    return {
        "gl_renderer": np.array(str(er.gl.get("GL_RENDERER") or "unknown")),
        "action": np.concatenate([e["action"][:steps] for e in pick]).astype(np.float32),
        "state": np.concatenate([e["observation"][:steps] for e in pick]).astype(np.float32),
        "traj_id": np.repeat(np.arange(len(pick), dtype=np.int32), steps),
        "goal_xy": np.concatenate([e["goal"][:steps, 0, :] for e in pick]).astype(np.float32),
    }


def _plant_frame_faults(
    er: Any, frames: np.ndarray, episodes: list, order: list[int], steps: int, faults: Mapping[str, Any]
) -> np.ndarray:
    """shift_row: that row shows the next state (one row shifted against the actions);
    camera_row: that row rendered from another camera."""
    frames = frames.copy()
    if faults.get("shift_row") is not None:
        j = int(faults["shift_row"])
        ep, t = episodes[order[j // steps]], j % steps
        frames[j] = er.state(ep["qpos"][t + 1], ep["qvel"][t + 1])
    if faults.get("camera_row") is not None:
        j = int(faults["camera_row"])
        ep, t = episodes[order[j // steps]], j % steps
        er.camera = OTHER_CAMERA
        frames[j] = er.state(ep["qpos"][t], ep["qvel"][t])
        er.camera = CAMERA
    return frames


def raw_frames(episode: dict[str, np.ndarray], size: int) -> np.ndarray:
    """What the collection renderer recorded: the frame env.step returned (kinematics one substep old)."""
    with EvalRenderer(ENV_ID, TASK_ID, size, CAMERA, "egl") as er:
        out = [er.state(episode["qpos"][0], episode["qvel"][0])]
        for t in track(range(1, len(episode["qpos"])), "render_cache demo: raw release frames"):
            out.append(
                er.live_step(episode["qpos"][t - 1], episode["qvel"][t - 1], episode["control"][t - 1])
            )
    return np.stack(out)


def digest(cfg: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build(raw_cfg: Any, out: Path) -> dict[str, Any]:
    """Generate release/ and cache/ under `out`; returns their paths and the budgets."""
    cfg = settings(raw_cfg)
    out = Path(out)
    started = time.time()
    with progress(f"building the render_cache demo ({cfg['variant']}, once)", 3) as phase:
        episodes = rollouts(int(cfg["episodes"]), int(cfg["steps"]), int(cfg["seed"]))
        phase()
        raw = raw_frames(episodes[0], int(cfg["raw_frames"])) if cfg["raw_frames"] else None
        write_release(out / "release", episodes, cfg, raw)
        phase()
        write_cache(out / "cache", out / "release", episodes, cfg)
        phase()
    paths = {"release": str(out / "release"), "cache": str(out / "cache"), "budgets": list(cfg["budgets"])}
    from pipeline.storage import atomic_write_json

    atomic_write_json(
        out / MARKER, {"settings": cfg, "digest": digest(cfg), "build_s": round(time.time() - started, 2)}
    )
    return paths


def stage_overrides(raw_cfg: Any) -> dict[str, Any]:
    """What `stages.render_cache` must say about the demo's cache (its budgets and sizes)."""
    cfg = settings(raw_cfg)
    hires = (
        [{"size": int(cfg["hires"]), "frames": "vla_b{budget:04d}_frames" + str(int(cfg["hires"])) + ".npy"}]
        if cfg["hires"]
        else []
    )
    return {
        "budgets": list(cfg["budgets"]),
        "size": int(cfg["size"]),
        "hires": hires,
    }


def ensure(raw_cfg: Any, root: Path) -> dict[str, Any]:
    """Build the variant once under `root/render_cache-<variant>`, reused while its settings are the same
    (concurrent launches: each builds in a private folder and renames it into place)."""
    cfg = settings(raw_cfg)
    target = build_once(
        Path(root),
        f"render_cache-{cfg['variant']}",
        lambda t: _current(t, cfg),
        lambda folder: build(cfg, folder),
    )
    return {
        "release": str(target / "release"),
        "cache": str(target / "cache"),
        "budgets": list(cfg["budgets"]),
    }


def _current(target: Path, cfg: Mapping[str, Any]) -> bool:
    try:
        return json.loads((target / MARKER).read_text()).get("digest") == digest(cfg)
    except (OSError, ValueError):
        return False


def built(raw_cfg: Any, root: Path) -> bool:
    """Whether `ensure(raw_cfg, root)` would find the variant built (nothing to do)."""
    cfg = settings(raw_cfg)
    return _current(Path(root) / f"render_cache-{cfg['variant']}", cfg)


if __name__ == "__main__":  # `python -m pipeline.demo.render_cache SETTINGS_JSON ROOT`: the provider's worker
    import sys

    ensure(json.loads(sys.argv[1]), Path(sys.argv[2]))
