"""When is one episode's behaviour on a dim a departure from that dim's own habit across the episodes?

A dataset's nature (a gripper held shut for long stretches, clipped actions, padding, rare far values of
human demonstrations) is what most of its episodes share; a fault is what one episode does that the
others do not. So every motion row turns a per-episode summary into a robust z against the summary's
distribution over the episodes (median and MAD, the MAD floored by a scale the row names so that a few
identical episodes do not make any difference look infinite), a one-sided normal tail probability per
(episode, dim), and the Benjamini-Hochberg false discovery rate over every (episode, dim) the row judges
(as `scipy.stats.false_discovery_control` computes it): with thousands of dims x episodes, a handful of
tail values is what clean data gives by chance, not a finding. A departure must also be large on the
row's own scale (its practical threshold), so that a very regular dataset does not flag a small
difference.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

MAD_SCALE = 1.4826  # MAD -> standard deviation under a normal distribution


@dataclass
class Departure:
    """Per (episode, dim): the robust z, the BH q-value (1 everywhere where no tested cell is large: not
    computed, nothing can depart) and whether it departs (q < alpha and large)."""

    z: np.ndarray
    q: np.ndarray
    flagged: np.ndarray
    centre: np.ndarray  # per dim: the median over the episodes (the habit)


def depart(
    value: np.ndarray,
    judged: np.ndarray,
    floor: np.ndarray | float,
    alpha: float,
    large: np.ndarray | None = None,
) -> Departure:
    """High-side departures of `value` [episodes, dims]: `judged` marks the (episode, dim) tested (the
    habit is taken over every finite value of the dim, judged or not); `floor` the smallest scale a
    dim's spread over episodes is given; `large` the practical threshold already applied per cell."""
    value = np.asarray(value, dtype=float)
    finite = np.isfinite(value)
    masked = np.where(finite, value, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a dim with no finite value: no habit, no test
        centre = np.nanmedian(masked, axis=0) if value.size else np.zeros(value.shape[1:])
        mad = np.nanmedian(np.abs(masked - centre), axis=0) * MAD_SCALE if value.size else centre
    centre, mad = np.nan_to_num(centre), np.nan_to_num(mad)
    scale = np.maximum(mad, np.broadcast_to(np.asarray(floor, dtype=float), centre.shape))
    scale = np.where(scale > 0, scale, 1.0)
    z = np.where(finite, (masked - centre) / scale, 0.0)
    tested = judged & finite
    q = np.ones_like(z)
    # the q-values matter only where a tested cell is also large: where none is, nothing departs whatever
    # they are, and they are left at 1 (on clean data, most rows: no tail probabilities, no BH sort)
    if (tested if large is None else tested & large).any():
        q[tested] = bh_adjusted(normal_sf(z[tested]))
    flagged = tested & (q < alpha) & (z > 0)
    if large is not None:
        flagged &= large
    return Departure(z, q, flagged, centre)


def normal_sf(z: np.ndarray) -> np.ndarray:
    """The standard normal's upper tail, bit for bit `scipy.stats.norm.sf(z)` (its `ndtr(-z)`): from
    `scipy.special`, whose import costs a fraction of `scipy.stats`'s (~1 s, a whole launch's worth)."""
    from scipy.special import ndtr

    return ndtr(-np.asarray(z, dtype=np.float64))


def normal_isf(p: float) -> float:
    """The standard normal's upper quantile, bit for bit `scipy.stats.norm.isf(p)` for 0 < p < 1."""
    from scipy.special import ndtri

    return float(-ndtri(p))


def bh_adjusted(ps: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values of a 1-d array, the same steps (so the same bits) as
    `scipy.stats.false_discovery_control(ps, method="bh")`: sorted, scaled by m / rank, the running
    minimum from the largest down, put back in place and clipped to [0, 1]."""
    ps = np.asarray(ps, dtype=np.float64)
    if ps.size <= 1:
        return ps
    order = np.argsort(ps)
    ranked = ps[order] * (ps.size / np.arange(1, ps.size + 1, dtype=np.float64))
    np.minimum.accumulate(ranked[::-1], out=ranked[::-1])
    out = np.empty_like(ranked)
    out[order] = ranked
    return np.clip(out, 0.0, 1.0)


__all__ = ["Departure", "bh_adjusted", "depart", "normal_isf", "normal_sf"]
