"""Calibration for the render_cache tolerance (issue 27): render the same states twice on each GL backend
available here (EGL, OSMesa) and across backends, and print what differs: the max per-pixel difference,
the fraction of differing pixels and the PSNR. These are the numbers a tolerance default must cover.
Then the synthetic driver-noise models (+/-`--levels` grey levels on `--fraction` of the pixels, every
channel alike, or of the values, each channel on its own; applied to the EGL renders) and the smallest
planted faults (+20 lighting, BGR, a one-pixel camera shift) against the stage's default tolerance
(`stages.render_cache.tolerance`): the noise must lie inside, the faults outside.

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


def _noisy(frames: np.ndarray, levels: int, fraction: float, per_channel: bool) -> np.ndarray:
    """+/-levels on `fraction` of the pixels (every channel alike) or of the values (each channel on
    its own, as drivers round per channel)."""
    rng = np.random.default_rng(0)
    noisy = frames.astype(np.int16)
    hit = rng.random(frames.shape if per_channel else frames.shape[:3]) < fraction
    step = rng.choice([-levels, levels], size=(int(hit.sum()),) if per_channel else (int(hit.sum()), 1))
    noisy[hit] += step.astype(np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def noise_model(frames: np.ndarray, levels: int, fraction: float) -> dict[str, object]:
    """The synthetic driver noise (per pixel, per channel) and the smallest faults (+20 lighting, BGR,
    the camera moved by one pixel), each judged by the default tolerance: noise in, faults out."""
    from pipeline.stages.render_cache.config import Tolerance
    from pipeline.stages.render_cache.tolerance import compare, json_metrics, within

    tol = Tolerance()
    cases = {
        f"noise_pm{levels}_{fraction:g}_pixels": _noisy(frames, levels, fraction, per_channel=False),
        f"noise_pm{levels}_{fraction:g}_values": _noisy(frames, levels, fraction, per_channel=True),
        "lighting_plus20": np.clip(frames.astype(np.int16) + 20, 0, 255).astype(np.uint8),
        "bgr": np.ascontiguousarray(frames[..., ::-1]),
        "camera_shift_1px": np.roll(frames, 1, axis=2),
    }
    out: dict[str, object] = {"default_tolerance": vars(tol)}
    for name, other in cases.items():
        per = [compare(a, b) for a, b in zip(frames, other, strict=True)]
        worst = min(per, key=lambda m: m["psnr_db"])
        pixels = float(np.mean(np.abs(frames.astype(np.int16) - other).max(-1) > 0))
        out[name] = {
            **json_metrics(worst),
            "frac_pixels_differ": round(pixels, 5),
            "within_default": all(within(m, tol) for m in per),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=4)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--levels", type=int, default=2)
    ap.add_argument("--fraction", type=float, default=0.03)
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
    if got:
        result["calibration"] = noise_model(next(iter(got.values()))["a"], args.levels, args.fraction)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
