"""A camera shifted by whole episodes: every episode's frames are another episode's (a v3.0
`from_timestamp` off by one episode for the whole file after a merge, v2.x video files renumbered from
one), so each episode shows its neighbour's motion.

The per-episode row (`frames.episode_frames`) compares each episode with its neighbours under the fit
the lag row made from the episodes' own states; when every episode is shifted that fit is made from the
wrong pairs, the lag row finds no peak, and nothing names the cause. Here the question is asked of the
whole camera instead: for each offset d in ±1..±`max_episode_shift`, the image motion of the sampled
windows is fitted to the state of episode e+d (the same pooled least squares at each lag as the lag row,
`pipeline.stages.contract.motion`) and set against the fit to the episodes' own state over the same
windows. An offset counts when its fit reaches `lag_min_corr`, beats the own fit by `neighbour_margin`,
and does so in `lag_confidence` of a bootstrap over the episodes, over at least `lag_min_episodes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.records import Check, Rows
from pipeline.stages.contract.config import FramesConfig
from pipeline.stages.contract.motion import Moments, Window
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


def paired(window: Window, own: np.ndarray, theirs: np.ndarray, need: int) -> tuple[Window, Window] | None:
    """The window's motion against its own and another episode's state steps over the same frame indices,
    both cut to the shortest of the three; None where fewer than `need` steps are left."""
    own, theirs = own[window.start : window.stop - 1], theirs[window.start : window.stop - 1]
    n = min(len(own), len(theirs), len(window.motion))
    if n < need:
        return None
    e, start, motion = window.episode, window.start, window.motion[:n]
    pair = [Window(e, start, start + n + 1, motion, steps[:n]) for steps in (own, theirs)]
    return pair[0], pair[1]


def offset_fit(
    cfg: FramesConfig, windows: list[Window], states: StateSource, shift: int, seed: int = 0
) -> Offset | None:
    """The fits of offset `shift` against the own state on the windows whose episode e+shift was read;
    None where no window has one."""
    L = cfg.max_lag
    pairs = [
        paired(w, states.steps(w.episode), states.steps(w.episode + shift), 2 * L + 3)
        for w in windows
        if states.has(w.episode + shift)
    ]
    kept = [p for p in pairs if p is not None]
    if not kept:
        return None
    m_own, m_theirs = Moments.of([p[0] for p in kept], L), Moments.of([p[1] for p in kept], L)
    r_own, r_theirs = m_own.fits()[0], m_theirs.fits()[0]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(kept), (cfg.lag_bootstrap, len(kept)))
    wins = [m_theirs.fits(p)[0].max() > m_own.fits(p)[0].max() for p in picks]
    return Offset(
        shift,
        [p[0].episode for p in kept],
        float(r_theirs.max()),
        int(np.argmax(r_theirs)) - L,
        float(r_own.max()),
        float(np.mean(wins)),
    )


def shift_row(
    cfg: FramesConfig, key: str, windows: list[Window], states: StateSource, base: dict[str, Any]
) -> Check | None:
    """Hard where the camera's frames follow episode e+d's state clearly better than their own (the
    offset with the largest gain among those that qualify); `match` where their own state fits and no
    offset comes near; nothing where no state fits them (the lag row already says so) or no offset was
    tested (`max_episode_shift` 0, or no neighbour read)."""
    offsets = [s for d in range(1, cfg.max_episode_shift + 1) for s in (d, -d)]
    found = [f for f in (offset_fit(cfg, windows, states, s) for s in offsets) if f is not None]
    if not found:
        return None
    evidence = {**base, "offsets": {f"{o.shift:+d}": o.facts() for o in found}}
    limits = (
        f"limits: r >= {cfg.lag_min_corr}, margin {cfg.neighbour_margin}, share >= {cfg.lag_confidence}, "
        f">= {cfg.lag_min_episodes} episodes, offsets ±1..±{cfg.max_episode_shift}"
    )
    fits = [o for o in found if o.r >= cfg.lag_min_corr and o.gain >= cfg.neighbour_margin]
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
    """The finding: hard where the bootstrap and the episode count back it, else soft unverifiable."""
    d, n = best.shift, len(best.episodes)
    said = (
        f"each sampled episode e's frames follow episode e{d:+d}'s state (pooled r={best.r:.3f} at lag "
        f"{best.lag:+d}) rather than its own (r={best.own_r:.3f}), over {n} episodes {best.episodes}, "
        f"better in {best.share:.0%} of the bootstrap"
    )
    if best.share >= cfg.lag_confidence and n >= cfg.lag_min_episodes:
        plural = "" if abs(d) == 1 else "s"
        text = f"{key}: the camera's frames are shifted by {d:+d} episode{plural}: {said}; {limits}"
        return ROWS(
            "frames.episode_shift:" + key, key, "mismatch", text, expected=0, actual=d, evidence=evidence
        )
    text = f"{key}: a whole-episode shift of {d:+d} fits but is not settled: {said}; {limits}"
    return ROWS("frames.episode_shift:" + key, key, "unverifiable", text, severity="soft", evidence=evidence)
