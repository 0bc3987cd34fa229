"""Calibration for the render_cache tolerance (issue 27): render the same states twice on each GL backend
available here (EGL, OSMesa) and across backends, and print what differs: the max per-pixel difference,
the fraction of differing pixels and the PSNR. These are the numbers a tolerance default must cover.

    python benchmarks/bench_render_tolerance.py [--states 4] [--size 64]

Each backend runs in its own process (MUJOCO_GL is fixed per process). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def _render(backend: str, states: int, size: int, out: Path) -> None:
    """Child: `states` perturbed states of the demo env, each rendered twice."""
    from pipeline.demo.render_cache import CAMERA, ENV_ID, TASK_ID
    from pipeline.stages.render_cache.render import EvalRenderer

    rng = np.random.default_rng(0)
    with EvalRenderer(ENV_ID, TASK_ID, size, CAMERA, backend) as er:
        q0, v0 = er.data.qpos.copy(), np.zeros_like(er.data.qvel)
        qs = [q0 + rng.normal(0, 0.02, q0.shape) * (i > 0) for i in range(states)]
        a = np.stack([er.state(q, v0) for q in qs])
        b = np.stack([er.state(q, v0) for q in qs])
        gl = str(er.gl.get("GL_RENDERER"))
    np.savez(out, a=a, b=b, gl=np.array(gl))


def _diff(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    d = np.abs(x.astype(np.int16) - y.astype(np.int16))
    mse = float(np.mean(d.astype(np.float64) ** 2))
    psnr = float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
    return {"max_abs": int(d.max()), "frac_pixels_differ": float(np.mean(d.max(-1) > 0)), "psnr_db": psnr}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--child", nargs=2, metavar=("BACKEND", "OUT"))
    args = ap.parse_args()
    if args.child:
        _render(args.child[0], args.states, args.size, Path(args.child[1]))
        return
    tmp, got, errors = Path(tempfile.mkdtemp()), {}, {}
    for backend in ("egl", "osmesa"):
        out = tmp / f"{backend}.npz"
        cmd = [sys.executable, __file__, "--states", str(args.states), "--size", str(args.size)]
        proc = subprocess.run(
            [*cmd, "--child", backend, str(out)],
            env={**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend},
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode == 0 and out.is_file():
            got[backend] = dict(np.load(out))
        else:
            errors[backend] = (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]
    result = {"states": args.states, "size": args.size, "unavailable": errors}
    for name, g in got.items():
        result[f"{name}_repeat"] = {"renderer": str(g["gl"]), **_diff(g["a"], g["b"])}
    if len(got) == 2:
        result["egl_vs_osmesa"] = _diff(got["egl"]["a"], got["osmesa"]["a"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
