"""Cameras aligned with the rows in time (issue 34): the lag of each camera behind the state, and
episodes whose frames are a neighbouring episode's.

A camera recorded late (USB capture latency, an asynchronous recorder) or an episode whose video span
points at the next episode's frames (a v3.0 `from_timestamp` off by one episode after a merge) passes
every structural check: counts, fps and shapes agree. Only the pictures tell: their motion
(`pipeline.stages.contract.motion`) follows the state's speed at some lag, pooled over sampled
episodes, with a bootstrap over episodes for how sure the peak is. A camera whose every episode holds
another episode's frames is named by `episode_shift.py`, and its lag row then points there. Every
threshold is a field of `frames` in the contract config and is printed in its row, with the episodes and
frames used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader
from pipeline.readers.moments import Moments, accumulate, mean_std
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.boundaries import boundary_rows
from pipeline.stages.contract.config import FramesConfig
from pipeline.stages.contract.episode_shift import shift_row
from pipeline.stages.contract.frames import frames_here, informational
from pipeline.stages.contract.motion import (
    Window,
    bootstrap_peaks,
    busiest,
    correlations,
    fit,
    image_motion,
    match,
    state_steps,
)
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "layout")


@dataclass(frozen=True)
class States:
    """The state columns of every row, with each dim's spread (the speed's units)."""

    episode: np.ndarray
    state: np.ndarray
    scale: np.ndarray
    keys: tuple[str, ...]

    def steps(self, episode: int) -> np.ndarray:
        return state_steps(self.state[self.episode == episode], self.scale)

    def has(self, episode: int) -> bool:
        return bool((self.episode == episode).any())


def alignment_rows(src: Sources) -> list[Check]:
    """A lag row and an episode-frames row per camera; nothing where there are no frames (frame_rows
    then says why) and one unverifiable row where the rows hold no state to compare with. Rows about
    cameras the model does not read are informational, as every frames row is."""
    reader = frames_here(src) if src.c.path else None
    if reader is None:
        return []
    return [informational(src, row) for row in _camera_alignment(src, reader, reader.cameras())]


def _camera_alignment(src: Sources, reader: FrameReader, cams: list[str]) -> list[Check]:
    keys = tuple(k for k, f in src.c.features.items() if f.role == "state")
    if not keys:
        why = "the dataset's rows hold no state feature (role state) to time the cameras against"
        return [ROWS("frames.lag", "|".join(cams), "unverifiable", why, severity="soft")]
    episodes = sampled_episodes(reader, src.cfg.frames.align_episodes)
    try:
        states = _states(reader, keys, episodes, max(1, src.cfg.frames.max_episode_shift))
    except InputError as exc:
        return [ROWS("frames.lag", "|".join(cams), "error", str(exc), evidence={"state": list(keys)})]
    out: list[Check] = []
    for key in cams:
        out += camera_rows(src.cfg.frames, reader, key, states)
        out += boundary_rows(src.cfg.frames, reader, key, episodes)
    return out


def _states(reader: FrameReader, keys: tuple[str, ...], episodes: list[int], reach: int = 1) -> States:
    """The sampled episodes' state rows and their neighbours' up to `reach` episodes away (the
    episode-frames and episode-shift rows), each read from its own data file (`EpisodeRows`), and each
    dim's spread over every row, streamed: the whole dataset's state is never held (it grew ~110 B a
    row, issue 35)."""
    data = reader.data
    acc: dict[str, Moments | None] = {k: None for k in keys}
    for block in data.blocks({k: data.feature_dim(k) for k in keys}):
        for key in keys:
            acc[key] = accumulate(acc[key], block[key])
    scale = np.concatenate([mean_std(m)[1] if m is not None else np.zeros(0) for m in acc.values()])
    wanted = sorted({e + d for e in episodes for d in range(-reach, reach + 1) if e + d >= 0})
    episode, state = [], []
    for e, table in reader.rows.tables(wanted, list(keys)).items():
        if table.num_rows:
            cols = reader.rows.convert(table, list(keys))
            state.append(
                np.concatenate([np.asarray(cols[k], np.float64).reshape(table.num_rows, -1) for k in keys], 1)
            )
            episode.append(np.full(table.num_rows, e, np.int64))
    if not state:
        where = data.root / "data"
        raise InputError(f"{where}: no rows for episodes {episodes}", path=where, field="episode_index")
    return States(np.concatenate(episode), np.concatenate(state), scale, keys)


def sampled_episodes(reader: FrameReader, count: int) -> list[int]:
    """First, last and evenly between, as the other frame rows sample."""
    eps = reader.data.episodes()
    index = [0] if eps is None or eps.index.size == 0 else eps.index.tolist()
    pick = np.unique(np.linspace(0, len(index) - 1, min(count, len(index))).round().astype(int))
    return [int(index[i]) for i in pick]


def windows_of(
    cfg: FramesConfig, reader: FrameReader, key: str, states: States
) -> tuple[list[Window], dict[int, str]]:
    """One window of consecutive frames per sampled episode, placed where the state moves most; the
    episodes left out, each with why (too short for the lag window, a state that never moves, a
    camera shorter than its rows)."""
    need = 2 * cfg.max_lag + 1
    windows, skipped = [], {}
    for ep in sampled_episodes(reader, cfg.align_episodes):
        steps = states.steps(ep)
        speed = np.linalg.norm(steps, axis=1)
        n = len(steps) + 1
        if n < need:
            skipped[ep] = f"{n} frames < 2*max_lag+1 = {need}"
            continue
        width = min(cfg.align_frames, n)
        start = busiest(speed, width - 1)
        if speed[start : start + width - 1].std() == 0:
            skipped[ep] = "the state does not move in the window"
            continue
        try:
            frames = reader.frames(key, ep, range(start, start + width))
        except InputError as exc:
            skipped[ep] = str(exc)
            continue
        windows.append(
            Window(ep, start, start + width, image_motion(frames), steps[start : start + width - 1])
        )
    return windows, skipped


def camera_rows(cfg: FramesConfig, reader: FrameReader, key: str, states: States) -> list[Check]:
    """The camera's lag row and, where its motion follows the state, its episode-frames row."""
    windows, skipped = windows_of(cfg, reader, key, states)
    used = {w.episode: [w.start, w.stop - 1] for w in windows}
    base = {"episodes_frames": used, "skipped": skipped, "state": list(states.keys), **_limits(cfg)}
    still = [w for w in windows if w.motion.max() < cfg.still_level]
    if not windows or len(still) == len(windows):
        why = "no episode left to measure" if not windows else f"a still camera (motion < {cfg.still_level}"
        why += " grey levels in every window)" if windows else ""
        return [_unverifiable(key, why, base)]
    fps = float(reader.data.info.get("fps") or 0)
    lag_row, lag = _lag_row(cfg, key, windows, fps, base)
    shift = shift_row(cfg, reader, key, states, (sampled_episodes(reader, cfg.align_episodes), base))
    if shift is not None and shift.verdict == "mismatch":  # the lag and per-episode fits used wrong pairs
        return [_lag_of_shifted(lag_row, shift), shift]
    rows = [lag_row] if lag is None else [lag_row, _neighbour_row(cfg, key, windows, states, lag, base)]
    return rows + ([shift] if shift is not None else [])


def _lag_of_shifted(lag_row: Check, shift: Check) -> Check:
    """The lag row of a camera whose frames are another episode's: its fit against the episodes' own
    state says nothing about timing, so it is soft `unverifiable` and points at the cause."""
    d = shift.actual
    text = (
        f"{lag_row.feature}: lag not measurable against the episodes' own state: the frames are episode "
        f"e{d:+d}'s ({shift.id.removeprefix(NAME + '.')}); against their own state: "
        f"{lag_row.message.split(': ', 1)[-1]}"
    )
    return replace(lag_row, verdict="unverifiable", severity="soft", message=text, actual=None)


def _limits(cfg: FramesConfig) -> dict[str, Any]:
    names = ("max_lag", "align_episodes", "align_frames", "lag_min_corr", "lag_margin", "lag_confidence")
    names += ("lag_min_episodes", "lag_bootstrap", "max_episode_shift")
    return {"thresholds": {n: getattr(cfg, n) for n in (*names, "neighbour_margin", "still_level")}}


def _unverifiable(key: str, why: str, evidence: dict[str, Any]) -> Check:
    return ROWS(
        "frames.lag:" + key,
        key,
        "unverifiable",
        f"{key}: lag not measurable: {why}",
        severity="soft",
        evidence=evidence,
    )


def _lag_row(
    cfg: FramesConfig, key: str, windows: list[Window], fps: float, base: dict[str, Any]
) -> tuple[Check, int | None]:
    """Hard where the pooled peak lies clearly away from 0 (above the correlation at 0 by the margin,
    and at the same lag in the bootstrap's share); soft where the motion follows the state at no lag."""
    L = cfg.max_lag
    r = correlations(windows, L)
    lag = int(np.argmax(r)) - L
    peaks = bootstrap_peaks(windows, L, cfg.lag_bootstrap)
    share = float(np.mean(peaks == lag))
    lo, hi = (int(v) for v in np.percentile(peaks, [5, 95]))
    seconds = lag / fps if fps else float("nan")
    evidence = {
        **base,
        "correlation": {str(k - L): round(float(v), 4) for k, v in enumerate(r)},
        "peak_lag": lag,
        "peak_r": round(float(r.max()), 4),
        "r_at_0": round(float(r[L]), 4),
        "bootstrap": {"share_at_peak": round(share, 3), "interval_90": [lo, hi], "draws": len(peaks)},
    }
    said = (
        f"peak r={r.max():.3f} at lag {lag:+d} frames ({seconds:+.3f} s; bootstrap 90% {lo:+d}..{hi:+d},"
        f" {share:.0%} at the peak), r={r[L]:.3f} at 0, over {len(windows)} episode(s)"
    )
    limits = (
        f"limits: r >= {cfg.lag_min_corr}, margin {cfg.lag_margin}, share >= {cfg.lag_confidence},"
        f" lags -{L}..{L}"
    )
    if r.max() < cfg.lag_min_corr:
        text = f"{key}: its motion follows the state at no lag in -{L}..{L} ({said}; {limits})"
        return ROWS("frames.lag:" + key, key, "unverifiable", text, severity="soft", evidence=evidence), None
    clear = lag != 0 and r.max() - r[L] >= cfg.lag_margin and share >= cfg.lag_confidence
    if clear and len(windows) < cfg.lag_min_episodes:
        text = (
            f"{key}: the motion peaks at lag {lag:+d} frames but only {len(windows)} episode(s) were "
            f"measured (< lag_min_episodes {cfg.lag_min_episodes}: a bootstrap over them says nothing): "
            f"{said}; {limits}"
        )
        return ROWS("frames.lag:" + key, key, "unverifiable", text, severity="soft", evidence=evidence), None
    how = "lags" if lag > 0 else "leads"
    text = (
        f"{key}: camera {how} the state by {abs(lag)} frame(s) ({abs(seconds):.3f} s): {said}; {limits}"
        if clear
        else f"{key}: in step with the state: {said}; {limits}"
    )
    row = ROWS(
        "frames.lag:" + key,
        key,
        "mismatch" if clear else "match",
        text,
        expected=0,
        actual=lag if clear else 0,
        evidence=evidence,
    )
    return row, (lag if clear else 0)


def _neighbour_row(
    cfg: FramesConfig, key: str, windows: list[Window], states: States, lag: int, base: dict[str, Any]
) -> Check:
    """An episode whose picture motion follows a neighbouring episode's state (same frame indices)
    clearly better than its own holds that episode's frames."""
    beta = fit(windows, lag)[1]
    found: dict[int, dict[str, Any]] = {}
    scores: dict[int, dict[str, float]] = {}
    for w in windows:
        own = match(w.motion, w.steps, beta, lag)
        scores[w.episode] = {"own": round(own, 3)}
        for other in (w.episode - 1, w.episode + 1):
            if not states.has(other):
                continue
            theirs = match(w.motion, states.steps(other)[w.start : w.stop - 1], beta, lag)
            scores[w.episode][str(other)] = round(theirs, 3)
            if theirs >= cfg.lag_min_corr and theirs - own >= cfg.neighbour_margin:
                found[w.episode] = {"frames_of": other, "r": round(theirs, 3), "own_r": round(own, 3)}
    evidence = {**base, "scores": scores, "lag_used": lag}
    limits = f"limits: r >= {cfg.lag_min_corr}, margin {cfg.neighbour_margin}"
    if found:
        named = "; ".join(
            f"episode {e} holds episode {f['frames_of']}'s frames (r={f['r']:.3f} against its "
            f"own {f['own_r']:.3f})"
            for e, f in found.items()
        )
        return ROWS(
            "frames.episode_frames:" + key,
            key,
            "mismatch",
            f"{key}: {named}; {limits}",
            expected="own episode",
            actual={str(e): f["frames_of"] for e, f in found.items()},
            evidence={**evidence, "found": {str(e): f for e, f in found.items()}},
        )
    text = f"{key}: every sampled episode's frames follow its own state best ({limits})"
    return ROWS("frames.episode_frames:" + key, key, "match", text, evidence=evidence)
