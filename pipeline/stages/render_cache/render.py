"""The eval renderer: one MuJoCo offscreen renderer on the eval env's model, closed explicitly.

`MUJOCO_GL` is read once, when `mujoco` is first imported, so `EvalRenderer` sets it from the config
before that import and records what the process actually got (a mismatch means something imported
mujoco earlier). The GL_RENDERER string is recorded: a software renderer (llvmpipe, OSMesa) on a node
with a GPU is a finding. A renderer left to the garbage collector prints a traceback at exit, so every
user closes it (`with EvalRenderer(...) as r:`).

Two pairings of frame t with state t (issue 8, measured): "state" renders `set_state(q_t, v_t)` +
`mj_forward`; "live_step" is what `env.step` returned: after `mj_step` the kinematics used for rendering
describe the state before the last substep, so it is reproduced by replaying the step from t-1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

SOFTWARE = ("llvmpipe", "softpipe", "swrast", "mesa offscreen", "osmesa")


def set_gl(backend: str) -> dict[str, Any]:
    """Set MUJOCO_GL (and PyOpenGL's platform) before mujoco is imported; report the backend mujoco
    actually took (its GLContext class), which differs when something imported mujoco earlier."""
    imported = "mujoco" in sys.modules
    if not imported:
        os.environ["MUJOCO_GL"] = backend
        if backend in ("egl", "osmesa"):
            os.environ["PYOPENGL_PLATFORM"] = backend
    import mujoco

    actual = getattr(getattr(mujoco, "GLContext", None), "__module__", "none").rsplit(".", 1)[-1]
    return {"requested": backend, "MUJOCO_GL": actual, "mujoco_imported_before": imported}


def gpu_present() -> bool:
    """Does this node have an NVIDIA GPU (then a software GL renderer is a finding)?"""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


# what OGBench's episode init makes gymnasium say on every reset (a Box built from float64 bounds): true,
# harmless, and not ours to fix; silenced for that call and that message only
OGBENCH_BOX = ".*precision lowered by casting to float32.*"


def reset_quietly(env: Any, **kwargs: Any) -> Any:
    """`env.reset(**kwargs)` without OGBench's Box-precision warning (nothing else is filtered)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OGBENCH_BOX, category=UserWarning)
        return env.reset(**kwargs)


def make_env(env_id: str, task_id: int) -> Any:
    """The OGBench env, reset on a fixed task (reset(seed=) alone takes the task from np.random)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import gymnasium
        import ogbench  # noqa: F401  (registers the manipspace envs)

        env = gymnasium.make(env_id, disable_env_checker=True)  # its Box checks warn on every make
    with _pixels_unrendered(env):
        reset_quietly(env, seed=0, options={"task_id": task_id, "render_goal": False})
    return env


@contextlib.contextmanager
def _pixels_unrendered(env: Any) -> Iterator[None]:
    """A visual env's reset without its pixel observations: a task reset renders four frames nobody here
    reads (two settling steps, the goal, the first observation) and makes the env's own renderer for them,
    about half of a visual env's make (measured on llvmpipe: ~1 of ~2 CPU-s). Every caller sets a state
    before it renders (with its own renderer, or with the env's, which is then made on first use), and
    rendering changes neither model nor data: the env is left as a rendering reset leaves it."""
    u = env.unwrapped
    if getattr(u, "_ob_type", None) != "pixels" or not hasattr(u, "get_pixel_observation"):
        yield
        return
    u.get_pixel_observation = lambda: None  # an instance attribute shadows the method for the reset
    try:
        yield
    finally:
        del u.get_pixel_observation


class EvalRenderer:
    """Renders states of `env_id` at `size` from `camera` with the env's own scene options."""

    def __init__(self, env_id: str, task_id: int, size: int, camera: str, backend: str) -> None:
        self.gl = set_gl(backend)
        import mujoco

        self._mj = mujoco
        self.env = make_env(env_id, task_id)
        u = self.env.unwrapped
        self.model, self.data = u.model, u.data
        self.n_substeps = int(getattr(u, "_n_steps", 1))
        self.scene_option = getattr(u, "_scene_option", None)
        self.size, self.camera = size, camera
        self.model.vis.global_.offwidth = max(int(self.model.vis.global_.offwidth), size)
        self.model.vis.global_.offheight = max(int(self.model.vis.global_.offheight), size)
        self.renderer = mujoco.Renderer(self.model, height=size, width=size)
        self.gl["GL_RENDERER"] = self._gl_string()

    def _gl_string(self) -> str | None:
        try:
            self.renderer.update_scene(self.data, camera=self.camera)
            self.renderer.render()
            self.renderer._gl_context.make_current()  # glGetString needs the renderer's context current
            from OpenGL import GL
            from OpenGL.error import GLError

            try:
                value = GL.glGetString(GL.GL_RENDERER)
            except GLError as exc:  # a GL error left pending by an earlier call; the string is in it
                value = exc.result
            return value.decode() if isinstance(value, bytes) else str(value)
        except Exception as exc:  # noqa: BLE001 - the string is evidence; rendering is what matters
            return f"unknown ({type(exc).__name__}: {exc})"

    def software(self) -> bool:
        return any(s in str(self.gl.get("GL_RENDERER") or "").lower() for s in SOFTWARE)

    def _frame(self) -> np.ndarray:
        self.renderer.update_scene(self.data, camera=self.camera, scene_option=self.scene_option)
        return np.array(self.renderer.render(), copy=True)

    def state(self, qpos: np.ndarray, qvel: np.ndarray, camera: str | None = None) -> np.ndarray:
        """Frame of `set_state(qpos, qvel)` + `mj_forward` (the "state" pairing); `camera` overrides the
        configured one for this frame (the diagnosis tries the scene's other cameras)."""
        self.data.qpos[:], self.data.qvel[:] = qpos, qvel
        self._mj.mj_forward(self.model, self.data)
        if camera is None:
            return self._frame()
        configured, self.camera = self.camera, camera
        try:
            return self._frame()
        finally:
            self.camera = configured

    def cameras(self) -> list[str]:
        """The model's named cameras other than the configured one."""
        obj = self._mj.mjtObj.mjOBJ_CAMERA
        names = [self._mj.mj_id2name(self.model, obj, i) for i in range(self.model.ncam)]
        return [n for n in names if n and n != self.camera]

    def live_step(self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> np.ndarray:
        """The frame `env.step` returned stepping from (qpos, qvel) with `ctrl` (the "live_step" pairing)."""
        self.data.qpos[:], self.data.qvel[:] = qpos, qvel
        self._mj.mj_forward(self.model, self.data)
        self.data.ctrl[:] = ctrl
        self._mj.mj_step(self.model, self.data, nstep=self.n_substeps)
        self._mj.mj_rnePostConstraint(self.model, self.data)
        return self._frame()

    def close(self) -> None:
        if getattr(self, "renderer", None) is not None:
            self.renderer.close()
            self.renderer = None
        if getattr(self, "env", None) is not None:
            self.env.close()
            self.env = None

    def __enter__(self) -> EvalRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay_state_obs(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """The state env's observation after `set_state` + `mj_forward` (what a replay reproduces)."""
    import mujoco

    u = env.unwrapped
    u.data.qpos[:], u.data.qvel[:] = qpos, qvel
    mujoco.mj_forward(u.model, u.data)
    return np.asarray(u.compute_observation(), dtype=np.float64)
