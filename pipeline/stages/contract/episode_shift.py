"""A camera shifted by whole episodes: every episode's frames are another episode's (a v3.0
`from_timestamp` off by one episode for the whole file after a merge, v2.x video files renumbered from
one), so each episode shows its neighbour's motion.

The per-episode row (`frames.episode_frames`) compares each episode with its neighbours under the fit
the lag row made from the episodes' own states; when every episode is shifted that fit is made from the
wrong pairs, the lag row finds no peak (or a weak one), and nothing names the cause. Here the question is
asked of the whole camera instead, as the lag row asks it of the lags: for each offset d in
±1..±`max_episode_shift`, one window of `align_frames` frames per sampled episode e, placed where episode
e+d's state moves most, is decoded, and its image motion is fitted to episode e+d's state and to its
own (the same pooled least squares at each lag, `pipeline.stages.contract.motion`). An offset counts
when its fit reaches `lag_min_corr`, beats the own fit on the same frames by `lag_margin`, and does so in
`lag_confidence` of a bootstrap over the episodes, measured on at least `lag_min_episodes` of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.config import FramesConfig
from pipeline.stages.contract.motion import Moments, Window, busiest, image_motion
from pipeline.stages.contract.rows import NAME

ROWS = Rows(NAME, "layout")


class StateSource(Protocol):
    """The sampled episodes' state steps (alignment.States)."""

    def steps(self, episode: int) -> np.ndarray: ...

    def has(self, episode: int) -> bool: ...


@dataclass(frozen=True)
class Offset:
    """The pooled fits of one offset d over the windows whose episode e+d exists: d's and the own."""

    shift: int
    episodes: list[int]
    r: float  # peak adjusted correlation over the lags, against episode e+d's state
    lag: int  # ... at this lag
    own_r: float  # the same windows against their own state
    share: float  # bootstrap draws (over the episodes) where e+d fits better than the own state

    @property
    def gain(self) -> float:
        return self.r - self.own_r

    def facts(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "r": round(self.r, 4),
            "lag": self.lag,
            "own_r": round(self.own_r, 4),
            "gain": round(self.gain, 4),
            "bootstrap_share": round(self.share, 3),
        }


def offset_windows(
    cfg: FramesConfig, reader: FrameReader, key: str, states: StateSource, episodes: list[int], shift: int
) -> list[tuple[Window, Window]]:
    """Per sampled episode e whose episode e+shift was read: one window of its frames placed where e+shift's
    state moves most (where frames that are e+shift's show the most), paired with the own and the other
    state's steps. An episode too short, or whose frames do not decode, is left out (the lag row says why)."""
    out: list[tuple[Window, Window]] = []
    for e in episodes:
        if not states.has(e + shift) or not states.has(e):
            continue
        own, theirs = states.steps(e), states.steps(e + shift)
        width = min(cfg.align_frames - 1, len(own), len(theirs))  # steps in the window
        if width < 2 * cfg.max_lag + 3:
            continue
        start = busiest(np.linalg.norm(theirs[: len(own)], axis=1), width)
        try:
            motion = image_motion(reader.frames(key, e, range(start, start + width + 1)))
        except InputError:
            continue
        if len(motion) == width:
            stop = start + width + 1
            pair = [Window(e, start, stop, motion, x[start : stop - 1]) for x in (own, theirs)]
            out.append((pair[0], pair[1]))
    return out


def offset_fit(cfg: FramesConfig, pairs: list[tuple[Window, Window]], shift: int, seed: int = 0) -> Offset:
    """The pooled fits of offset `shift` and of the own state on the same windows, and the share of a
    bootstrap over the episodes in which the offset fits better."""
    L = cfg.max_lag
    m_own, m_theirs = Moments.of([p[0] for p in pairs], L), Moments.of([p[1] for p in pairs], L)
    r_own, r_theirs = m_own.fits()[0], m_theirs.fits()[0]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), (cfg.lag_bootstrap, len(pairs)))
    wins = [m_theirs.fits(p)[0].max() > m_own.fits(p)[0].max() for p in picks]
    return Offset(
        shift,
        [p[0].episode for p in pairs],
        float(r_theirs.max()),
        int(np.argmax(r_theirs)) - L,
        float(r_own.max()),
        float(np.mean(wins)),
    )


def shift_row(
    cfg: FramesConfig,
    reader: FrameReader,
    key: str,
    states: StateSource,
    at: tuple[list[int], dict[str, Any]],
) -> Check | None:
    """Hard where the camera's frames follow episode e+d's state clearly better than their own (the
    offset with the largest gain among those that qualify); `match` where their own state fits and no
    offset comes near; nothing where no state fits them (the lag row already says so) or no offset was
    measured on `lag_min_episodes` episodes (`max_episode_shift` 0, too few episodes with a neighbour):
    one window's fit to any state is high by chance. `at`: the sampled episodes and the row's evidence."""
    episodes, base = at
    offsets = [s for d in range(1, cfg.max_episode_shift + 1) for s in (d, -d)]
    found = []
    for shift in offsets:
        pairs = offset_windows(cfg, reader, key, states, episodes, shift)
        if len(pairs) >= cfg.lag_min_episodes:
            found.append(offset_fit(cfg, pairs, shift))
    if not found:
        return None
    evidence = {**base, "offsets": {f"{o.shift:+d}": o.facts() for o in found}}
    limits = (
        f"limits: r >= {cfg.lag_min_corr}, margin {cfg.lag_margin}, share >= {cfg.lag_confidence}, "
        f">= {cfg.lag_min_episodes} episodes, offsets ±1..±{cfg.max_episode_shift}"
    )
    fits = [o for o in found if o.r >= cfg.lag_min_corr and o.gain >= cfg.lag_margin]
    if fits:
        return _shifted(cfg, key, max(fits, key=lambda o: o.gain), limits, evidence)
    own = max(found, key=lambda o: len(o.episodes))
    if own.own_r < cfg.lag_min_corr:
        return None
    best = max(found, key=lambda o: o.gain)
    text = (
        f"{key}: the frames follow their own episode's state (pooled r={own.own_r:.3f} over "
        f"{len(own.episodes)} episodes) better than any episode ±1..±{cfg.max_episode_shift} away "
        f"(best {best.shift:+d}: r={best.r:.3f} against {best.own_r:.3f}); {limits}"
    )
    return ROWS("frames.episode_shift:" + key, key, "match", text, expected=0, actual=0, evidence=evidence)


def _shifted(cfg: FramesConfig, key: str, best: Offset, limits: str, evidence: dict[str, Any]) -> Check:
    """The finding: hard where the bootstrap backs it, else soft unverifiable."""
    d, n = best.shift, len(best.episodes)
    said = (
        f"each sampled episode e's frames follow episode e{d:+d}'s state (pooled r={best.r:.3f} at lag "
        f"{best.lag:+d}) rather than its own (r={best.own_r:.3f}), over {n} episodes {best.episodes}, "
        f"better in {best.share:.0%} of the bootstrap"
    )
    if best.share >= cfg.lag_confidence:
        plural = "" if abs(d) == 1 else "s"
        text = f"{key}: the camera's frames are shifted by {d:+d} episode{plural}: {said}; {limits}"
        return ROWS(
            "frames.episode_shift:" + key, key, "mismatch", text, expected=0, actual=d, evidence=evidence
        )
    text = f"{key}: a whole-episode shift of {d:+d} fits but is not settled: {said}; {limits}"
    return ROWS("frames.episode_shift:" + key, key, "unverifiable", text, severity="soft", evidence=evidence)
