"""render_cache re-render throughput vs bare `mujoco.Renderer.render()`, and the sharded speed-up.

    python benchmarks/bench_render_cache.py [--episodes 2] [--steps 8] [--dir DIR]

Builds a small demo release + cache (64x64 base cache and a 224x224 cache of the same rows), then in
this one process, on the same states:

- bare:  `data.qpos/qvel = ...; mj_forward; renderer.update_scene(data, camera); renderer.render()`
         with a `mujoco.Renderer` of the eval env's model, nothing else;
- stage: the stage's own re-render path (`partial.classify`: render under the claimed pairing and
         compare with the cached frame), fresh memo, so every state is rendered once;

at 64x64 and 224x224 (ratio = stage frames/s / bare frames/s), and at 64x64 once more with every cached
frame carrying the synthetic driver noise (+/-2 levels on 3 % of pixels), so every frame takes the
tolerance path (compared, within tolerance, no further render). Then the stage's per-task work
(`run_part`'s `episode_range`) for one budget as 1 task vs 2 tasks run as a submitit LocalExecutor
`map_array` (two processes): speed-up = wall(1 task) / wall(2 tasks).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from pipeline.stages.config import typed  # noqa: E402
from pipeline.stages.render_cache import release  # noqa: E402
from pipeline.stages.render_cache.config import RenderCacheConfig  # noqa: E402
from pipeline.stages.render_cache.partial import Renderers, classify, episode_range  # noqa: E402


def states(root: Path, budget: int) -> list[tuple[release.Entry, dict[str, np.ndarray], int]]:
    out = []
    for entry in release.read_manifest(root, "subsets/subset-{budget:04d}.jsonl", budget, "data"):
        with np.load(entry.path) as z:
            ep = {k: z[k] for k in ("qpos", "qvel", "control")}
        out += [(entry, ep, t) for t in range(entry.transition_count)]
    return out


def bare(cfg: RenderCacheConfig, rows: list, size: int) -> float:
    """Frames/s of a bare mujoco.Renderer on the same model, camera and states."""
    import mujoco

    rs = Renderers(cfg)
    env_r = rs.at(size)  # the eval env's model (and its offscreen buffer size)
    model, data = env_r.model, env_r.data
    renderer = mujoco.Renderer(model, height=size, width=size)
    try:
        started = time.perf_counter()
        for _entry, ep, t in rows:
            data.qpos[:], data.qvel[:] = ep["qpos"][t], ep["qvel"][t]
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=cfg.camera)
            renderer.render()
        return len(rows) / (time.perf_counter() - started)
    finally:
        renderer.close()
        rs.close()


def noisy(frames: np.ndarray) -> np.ndarray:
    """The frames with +/-2 grey levels on 3 % of their pixels (the calibration's driver-noise model)."""
    rng = np.random.default_rng(0)
    out = np.asarray(frames).astype(np.int16)
    hit = rng.random(out.shape[:3]) < 0.03
    out[hit] += rng.choice(np.array([-2, 2], np.int16), size=(int(hit.sum()), 1))
    return np.clip(out, 0, 255).astype(np.uint8)


def stage(cfg: RenderCacheConfig, rows: list, frames: np.ndarray, size: int) -> tuple[float, int]:
    """Frames/s of the stage's re-render + compare path; also how many frames were exact or within the
    tolerance (a frame outside it would also be diagnosed: that is a finding, not the common path)."""
    rs = Renderers(cfg)
    rs.at(size)  # renderer construction is not part of either measurement
    try:
        started = time.perf_counter()
        exact = 0
        for j, (entry, ep, t) in enumerate(rows):
            got = classify(np.asarray(frames[j]), ep, entry, t, len(ep["qpos"]) - 1, cfg, rs)
            exact += got["class"] in ("exact", "tolerance")
        return len(rows) / (time.perf_counter() - started), exact
    finally:
        rs.close()


def sharded(cfg: RenderCacheConfig, root: Path, budget: int, folder: Path) -> dict[str, float]:
    """Wall time of one budget's task work as 1 task vs 2 tasks (submitit LocalExecutor map_array)."""
    import submitit

    def wall(count: int) -> float:
        ex = submitit.LocalExecutor(folder=folder / f"n{count}" / "%j")
        ex.update_parameters(timeout_min=30)
        started = time.perf_counter()
        jobs = ex.map_array(_task, [str(root)] * count, [budget] * count, range(count), [count] * count)
        [job.result() for job in jobs]
        return time.perf_counter() - started

    one, two = wall(1), wall(2)
    return {"one_task_s": round(one, 2), "two_tasks_s": round(two, 2), "speedup_2_tasks": round(one / two, 3)}


def _task(root: str, budget: int, index: int, count: int) -> int:
    cfg = _config(int(budget))
    rs = Renderers(cfg)
    try:
        out = episode_range(cfg, Path(root) / "release", Path(root) / "cache", budget, (index, count), rs)
    finally:
        rs.close()
    return len(out["frames"])


def _config(budget: int) -> RenderCacheConfig:
    return typed(RenderCacheConfig, {"budgets": [budget], "hires": []}, "stages.render_cache")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    from pipeline.demo.render_cache import build

    work = Path(args.dir or tempfile.mkdtemp(prefix="bench_render_cache-"))
    budget = args.episodes
    started = time.perf_counter()
    build({"episodes": budget, "steps": args.steps, "budgets": [budget], "hires": 224, "raw_frames": 0}, work)
    build_s = time.perf_counter() - started
    cfg, rows = _config(budget), states(work / "release", budget)
    out: dict[str, object] = {"frames": len(rows), "build_s": round(build_s, 1)}
    base64 = f"pix_b{budget:04d}_frames.npy"
    cases = ((64, base64, False), (224, f"vla_b{budget:04d}_frames224.npy", False), (64, base64, True))
    for size, name, noise in cases:
        frames = np.load(work / "cache" / name, mmap_mode="r")
        base = bare(cfg, rows, size)
        ours, exact = stage(cfg, rows, noisy(frames) if noise else frames, size)
        out[f"{size}_noisy" if noise else f"{size}"] = {
            "bare_fps": round(base, 2),
            "stage_fps": round(ours, 2),
            "ratio": round(ours / base, 3),
            "exact_or_within_tolerance": f"{exact}/{len(rows)}",
        }
    out["sharded"] = sharded(cfg, work, budget, work / "submitit")
    print(json.dumps(out))
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
