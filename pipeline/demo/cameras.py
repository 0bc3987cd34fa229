"""The demo's two cameras: a fixed front view and one that moves with the arm, rendered from the
recorded physics states.

Why these two: a policy conditioned on both is what the gate must guard against BGR frames and exchanged
camera keys, and a moving camera is what tells the two apart from the data alone (its image changes
with the arm's motion; the fixed one's mostly does not).

Why rendering is shaped like this (measured on 2 CPU cores, Mesa llvmpipe, 64 px): the scene's visual
meshes hold 390k vertices and its shadow map is 4096 px, so a frame costs ~200 ms as OGBench draws it;
without the shadow map and multisampling ~20 ms; drawing the arm's collision geoms (group 3, capsules
and boxes) instead of its visual meshes ~10 ms. The demo's 20 x 200 states x 2 cameras are then ~80 s
of one core, so they render in two processes, and are cached on this machine under a key made of the
states themselves (qpos and mocap poses), the size and this module's version: a second build, another
variant of the same episodes, or the next test run re-renders nothing. The frames are a pure function of
that key (MuJoCo's software rasterizer is deterministic here; see benchmarks/bench_render_tolerance.py).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.demo.cache_entries import Damaged, discard, expect_array, expect_names, kept, load_npz
from pipeline.storage import user_cache
from pipeline.storage.atomic import atomic_write_bytes

ENV_ID = "cube-single-v0"
VERSION = 1  # bump when the way frames are drawn changes: the cache key includes it
FRONT = "observation.images.front"
WRIST = "observation.images.wrist"
CAMERAS = (FRONT, WRIST)  # the order the policy's config.json declares them
WRIST_BODY = "ur5e/wrist_3_link"
WRIST_VIEW = {"distance": 0.45, "azimuth": 180.0, "elevation": -50.0}  # tracks the wrist, fixed angles
GEOM_GROUPS = (1, 1, 0, 1, 0, 0)  # scene and object geoms plus the arm's collision geoms, no visual meshes
State = tuple[np.ndarray, np.ndarray, np.ndarray]  # qpos, mocap_pos, mocap_quat rows of one episode
POSE = ("qpos", "mocap_pos", "mocap_quat")
PARALLEL_FROM = 600  # states; below this one process is faster than starting two


def cache_dir() -> Path:
    """Where rendered frames are kept between builds (in the user's cache)."""
    return user_cache() / "demo-cameras"


def render_episodes(episodes: Sequence[Mapping[str, np.ndarray]], size: int) -> list[dict[str, np.ndarray]]:
    """Per episode `{camera key: uint8 [T, size, size, 3]}` for the recorded `qpos`/`mocap_*` rows."""
    key = _key(episodes, size)
    cached = cache_dir() / f"{key}.npz"
    try:
        if kept(cached):
            return _kept_frames(cached, [len(e["qpos"]) for e in episodes], size)
    except Damaged as exc:  # rendered again and replaced
        discard(cached, exc)
    states: list[State] = [(e["qpos"], e["mocap_pos"], e["mocap_quat"]) for e in episodes]
    total = sum(len(s[0]) for s in states)
    workers = min(2, os.cpu_count() or 1, len(states)) if total >= PARALLEL_FROM else 1
    frames = _render_chunk(states, size) if workers == 1 else _render_in_processes(states, size, workers)
    _store(cached, frames)
    return frames


def _render_in_processes(states: Sequence[State], size: int, workers: int) -> list[dict[str, np.ndarray]]:
    """Interleaved chunks (equal work) rendered by `python -m pipeline.demo.cameras` workers: plain
    processes with their own GL context, independent of whatever script or job called us (a spawned
    multiprocessing worker would re-import the caller's main module)."""
    with tempfile.TemporaryDirectory(prefix="demo-cameras-") as tmp:
        jobs = []
        for w in range(workers):
            given, wanted = Path(tmp) / f"states-{w}.npz", Path(tmp) / f"frames-{w}.npz"
            chunk = states[w::workers]
            np.savez(
                given, **{f"{i}/{n}": a for i, s in enumerate(chunk) for n, a in zip(POSE, s, strict=True)}
            )
            argv = [sys.executable, "-m", "pipeline.demo.cameras", str(given), str(wanted), str(size)]
            jobs.append((subprocess.Popen(argv), wanted, len(chunk)))
        done = []
        for proc, wanted, count in jobs:
            if proc.wait() != 0:
                raise RuntimeError(f"demo camera worker {' '.join(proc.args)} exited {proc.returncode}")
            done.append(_load(wanted, count))
    return [done[i % workers][i // workers] for i in range(len(states))]


def _key(episodes: Sequence[Mapping[str, np.ndarray]], size: int) -> str:
    import mujoco

    h = hashlib.sha256(f"{VERSION} {size} {mujoco.__version__} {CAMERAS} {WRIST_VIEW}".encode())
    for e in episodes:
        for name in POSE:
            h.update(np.ascontiguousarray(e[name], np.float64).tobytes())
    return h.hexdigest()[:32]


def _kept_frames(path: Path, lengths: Sequence[int], size: int) -> list[dict[str, np.ndarray]]:
    """The kept frames, or `Damaged`: one uint8 [T, size, size, 3] array per episode and camera, T that
    episode's rows, nothing else (frames of another size would be used as they are, and the demo's
    models would then look broken)."""
    arrays = load_npz(path)
    expect_names(list(arrays), [f"{i}/{cam}" for i in range(len(lengths)) for cam in CAMERAS])
    for i, rows in enumerate(lengths):
        for cam in CAMERAS:
            expect_array(f"{i}/{cam}", arrays[f"{i}/{cam}"], (rows, size, size, 3), np.uint8)
    return [{cam: arrays[f"{i}/{cam}"] for cam in CAMERAS} for i in range(len(lengths))]


def _load(path: Path, n: int) -> list[dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as z:
        return [{cam: z[f"{i}/{cam}"] for cam in CAMERAS} for i in range(n)]


def _store(path: Path, frames: list[dict[str, np.ndarray]]) -> None:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **{f"{i}/{cam}": f[cam] for i, f in enumerate(frames) for cam in CAMERAS})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
    except OSError:
        pass  # an unwritable cache costs the next build time, never the frames


def _render_chunk(states: Sequence[State], size: int) -> list[dict[str, np.ndarray]]:
    """Episodes' frames from both cameras with one GL context (in a worker process or the caller's)."""
    scene = _Scene(size)
    try:
        out = []
        for qpos, mocap_pos, mocap_quat in states:
            frames = {cam: np.empty((len(qpos), size, size, 3), np.uint8) for cam in CAMERAS}
            for t in range(len(qpos)):
                scene.pose(qpos[t], mocap_pos[t], mocap_quat[t])
                for cam in CAMERAS:
                    frames[cam][t] = scene.frame(cam)
            out.append(frames)
        return out
    finally:
        scene.close()


class _Scene:
    """The env's MuJoCo model drawn without shadows or multisampling, from the two demo cameras."""

    def __init__(self, size: int) -> None:
        from pipeline.stages.render_cache.render import make_env, set_gl

        set_gl(os.environ.get("MUJOCO_GL", "egl"))
        import mujoco

        self.mj = mujoco
        self.env = make_env(ENV_ID, 1)
        u = self.env.unwrapped
        self.model, self.data = u.model, u.data
        self.model.vis.quality.shadowsize = 0
        self.model.vis.quality.offsamples = 0
        self.renderer = mujoco.Renderer(self.model, height=size, width=size)
        self.option = mujoco.MjvOption()
        self.option.geomgroup[:] = GEOM_GROUPS
        self.wrist = mujoco.MjvCamera()
        self.wrist.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.wrist.trackbodyid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, WRIST_BODY)
        for name, value in WRIST_VIEW.items():
            setattr(self.wrist, name, value)

    def pose(self, qpos: np.ndarray, mocap_pos: np.ndarray, mocap_quat: np.ndarray) -> None:
        self.data.qpos[:] = qpos
        self.data.mocap_pos[:] = mocap_pos
        self.data.mocap_quat[:] = mocap_quat
        self.mj.mj_forward(self.model, self.data)

    def frame(self, camera: str) -> np.ndarray:
        view: Any = "front" if camera == FRONT else self.wrist
        self.renderer.update_scene(self.data, camera=view, scene_option=self.option)
        return self.renderer.render()

    def close(self) -> None:
        """Explicitly: a renderer left to the garbage collector prints a traceback at exit."""
        self.renderer.close()
        self.env.close()


def _worker(given: str, wanted: str, size: str) -> None:
    """`python -m pipeline.demo.cameras STATES.npz FRAMES.npz SIZE`: one worker of `render_episodes`."""
    with np.load(given, allow_pickle=False) as z:
        count = len({k.split("/")[0] for k in z.files})
        states = [tuple(z[f"{i}/{n}"] for n in POSE) for i in range(count)]
    frames = _render_chunk(states, int(size))  # type: ignore[arg-type]
    np.savez(wanted, **{f"{i}/{cam}": f[cam] for i, f in enumerate(frames) for cam in CAMERAS})


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
