"""Frame comparison under a calibrated tolerance (issue 27), and the one resize both the diagnosis and the
high-resolution order check use.

Two renders of one state agree bit for bit with one renderer (bench_render_tolerance.py: EGL and OSMesa
on llvmpipe, 0 differing pixels), but another driver or GPU shifts a few edge pixels by a grey level or
two. A frame therefore matches within tolerance when three things hold at once:

- no channel of any pixel differs by more than `pixel` grey levels (a real fault moves far more);
- at most `max_fraction` of the values (each channel of each pixel counted on its own) differ at all
  (noise sits on edges, a fault covers the frame);
- the PSNR is at least `psnr_db` (catches a fault hiding under the first two on a flat frame).

Values, not pixels: drivers round each channel on its own, so noise on 3 % of the values touches some
channel of ~8.7 % of the pixels (1 - 0.97^3); counted per pixel it would leave the band while being the
same noise. The synthetic noise models the defaults were calibrated on (bench_render_tolerance.py: +/-2
levels on 3 % of the pixels, every channel, or on 3 % of the values, each channel on its own) give max 2,
~3 % of values differing and ~57 dB: inside every bound with room; the smallest planted faults (a +20
lighting offset, BGR, the camera moved by one pixel) differ on most values: outside.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def compare(a: np.ndarray, b: np.ndarray | None) -> dict[str, Any]:
    """max / mean |diff|, the fraction of values (pixel channels) differing, PSNR (inf when identical);
    another shape (or no frame) is the worst possible comparison."""
    if b is None or a.shape != b.shape:
        return {"max_abs": 255, "mean_abs": 255.0, "frac_differ": 1.0, "psnr_db": 0.0}
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    mse = float(np.mean(d.astype(np.float64) ** 2))
    return {
        "max_abs": int(d.max()) if d.size else 0,
        "mean_abs": float(d.mean()) if d.size else 0.0,
        "frac_differ": float(np.mean(d > 0)) if d.size else 0.0,
        "psnr_db": math.inf if mse == 0 else round(10 * math.log10(255.0**2 / mse), 2),
    }


def within(m: dict[str, Any], tol: Any) -> bool:
    """Do the comparison's numbers lie inside the tolerance (cfg.tolerance: pixel, max_fraction, psnr_db)?"""
    return m["max_abs"] <= tol.pixel and m["frac_differ"] <= tol.max_fraction and m["psnr_db"] >= tol.psnr_db


def json_metrics(m: dict[str, Any]) -> dict[str, Any]:
    """The numbers as a row carries them: PSNR of identical frames as null (JSON has no inf)."""
    out = dict(m)
    out["psnr_db"] = None if math.isinf(out["psnr_db"]) else out["psnr_db"]
    out["mean_abs"] = round(float(out["mean_abs"]), 3)
    out["frac_differ"] = round(float(out["frac_differ"]), 5)
    return out


def resize(frame: np.ndarray, size: int, method: str) -> np.ndarray:
    """`frame` resized to size x size with `method` (area | bilinear | nearest | bicubic), uint8 out.
    An integer area reduction is a block mean done in numpy (exact and fast); the rest go through PIL."""
    h = frame.shape[0]
    if h == size:
        return np.asarray(frame)
    if method == "area" and h % size == 0:
        k = h // size
        blocks = np.asarray(frame, dtype=np.float64).reshape(size, k, size, k, -1).mean(axis=(1, 3))
        return np.clip(np.rint(blocks), 0, 255).astype(np.uint8).reshape(size, size, *frame.shape[2:])
    from PIL import Image

    how = {
        "area": Image.Resampling.BOX,
        "bilinear": Image.Resampling.BILINEAR,
        "nearest": Image.Resampling.NEAREST,
        "bicubic": Image.Resampling.BICUBIC,
    }[method]
    return np.asarray(Image.fromarray(np.asarray(frame)).resize((size, size), how), dtype=np.uint8)
