"""Which fault explains a frame that matches no render of its state (issue 27).

Each candidate explanation is a transform of the re-rendered frame, or another render, that reproduces
what a faulty cache writer would have stored: renderer noise (the render itself, judged by the calibrated
tolerance), channels reversed (BGR), a constant per-channel brightness offset (lighting), another camera
of the same scene, another render size resized to the cache's with the configured method, another row of
the episode (shift) or the same row of a neighbouring episode (swap). Every candidate is compared with the
cached frame (max / mean |diff|, differing fraction, PSNR); the first, cheapest first, that brings the
frame within tolerance is named, and the numbers of every one tried go in the row.

Only the first `diagnosis.frames` mismatching frames of a budget are diagnosed (in row order, so the
first N of a sharded run's merge are the unsharded run's first N); the cheap transforms come before the
renders, so a BGR or lighting fault costs no render at all, and a shifted or swapped one usually none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.stages.render_cache import release
from pipeline.stages.render_cache.tolerance import compare, json_metrics, resize, within

Candidate = tuple[str, Callable[[], np.ndarray | None]]


def lighting(cached: np.ndarray, claimed: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """`claimed` shifted by the per-channel offset that best explains `cached` (median over the pixels the
    cache did not clip), clipped as the cache's writer would have."""
    c, r = cached.astype(np.int16), claimed.astype(np.int16)
    offsets = []
    for ch in range(c.shape[-1]):
        free = (c[..., ch] > 0) & (c[..., ch] < 255)
        offsets.append(int(np.median((c - r)[..., ch][free])) if free.any() else 0)
    return np.clip(r + np.array(offsets, np.int16), 0, 255).astype(np.uint8), offsets


def candidates(case: dict[str, Any], cfg: Any, rs: Any) -> Iterator[Candidate]:
    """Cheapest first: transforms of the claimed render; other rows and episodes (renders the sample has
    usually made already: memo hits); then other cameras and sizes (new renders)."""
    cached, claimed, ep, entry, t = (case[k] for k in ("cached", "claimed", "ep", "entry", "t"))
    size, k, d = cached.shape[0], cfg.keys, cfg.diagnosis
    yield "noise", lambda: claimed
    yield "bgr", lambda: claimed[..., ::-1]
    light = lighting(cached, claimed)
    yield f"lighting{light[1]}", lambda: light[0]
    for shift in d.shifts:
        if 0 <= t + shift <= case["last"]:
            yield f"shift:{shift:+d}", lambda shift=shift: rs.frame(ep, entry, t + shift, cfg.pairing, size)
    for n_entry, n_ep in case["neighbours"]:
        n_t = min(t, len(n_ep[k.qpos]) - 1)
        yield (
            f"episode:{n_entry.archive_file}",
            lambda e=n_entry, a=n_ep, u=n_t: rs.frame(a, e, u, cfg.pairing, size),
        )

    for cam in rs.at(size).cameras():
        yield f"camera:{cam}", lambda cam=cam: rs.at(size).state(ep[k.qpos][t], ep[k.qvel][t], camera=cam)
    for factor in d.resize_factors:
        other = max(1, round(size * factor))
        if other != size:
            yield (
                f"resized:{other}",
                lambda other=other: _resized(rs.frame(ep, entry, t, cfg.pairing, other), size, d.resize),
            )


def _resized(frame: np.ndarray | None, size: int, method: str) -> np.ndarray | None:
    return None if frame is None else resize(frame, size, method)


def diagnose(case: dict[str, Any], cfg: Any, rs: Any) -> dict[str, Any]:
    """The first candidate that brings the cached frame within tolerance, with every candidate's numbers
    (name, max |diff|, mean |diff|, differing fraction, PSNR); "unexplained" with the closest otherwise."""
    tried, best = [], None
    for name, make in candidates(case, cfg, rs):
        m = compare(case["cached"], make())
        tried.append({"candidate": name, **json_metrics(m)})
        if best is None or (m["psnr_db"], -m["mean_abs"]) > (best[1]["psnr_db"], -best[1]["mean_abs"]):
            best = (name, m)
        if within(m, cfg.tolerance):
            return {"explanation": name, "fits": True, "fit": json_metrics(m), "tried": tried}
    assert best is not None  # "noise" is always tried
    return {
        "explanation": "unexplained",
        "fits": False,
        "closest": best[0],
        "fit": json_metrics(best[1]),
        "tried": tried,
    }


def diagnose_task(cfg: Any, rs: Any, data: dict[str, Any], found: list[dict[str, Any]], frames: Any) -> None:
    """Diagnose the first `diagnosis.frames` "different" frames of `found` (this task's sampled frames of
    one cache, `frames` its array) in place; each entry carries its episode index `e` and row `t`. A
    neighbouring episode that cannot be read is left out of the candidates (its own row reports it)."""
    todo = [r for r in found if r["class"] == "different"][: cfg.diagnosis.frames]
    k, entries = cfg.keys, data["entries"]
    need = (k.qpos, k.qvel) + ((k.control,) if cfg.pairing == "live_step" else ())
    for r in todo:
        e = r["e"]
        near = [i for i in (e + 1, e - 1, e + 2, e - 2) if 0 <= i < len(entries)][: cfg.diagnosis.episodes]
        neighbours = []
        for i in near:
            try:
                with release.open_episode(entries[i], need) as other:
                    neighbours.append((entries[i], {key: np.asarray(other[key]) for key in need}))
            except InputError:
                continue
        with release.open_episode(entries[e], need) as ep:
            cached = np.asarray(frames[r["row"]])
            case = {
                "cached": cached,
                "claimed": rs.frame(ep, entries[e], r["t"], cfg.pairing, cached.shape[0]),
                "ep": ep,
                "entry": entries[e],
                "t": r["t"],
                "last": r["last"],
                "neighbours": neighbours,
            }
            r["diagnosis"] = diagnose(case, cfg, rs)
