"""The signals the alignment rows compare (issue 34): how much a camera's picture changes from one frame
to the next, against how fast the robot's state moves, over a window of consecutive frames per sampled
episode.

A camera that shows the robot (fixed, watching the arm, or moving with it) changes most when the robot
moves most, whatever the scene: the mean absolute difference of consecutive (downsampled, grey) frames
rises and falls with the speed of the state vector. Where the two peak apart, the pictures are not the
ones recorded with the rows. Only the window's frames are decoded (one seek per episode, through the
one frame reader); the state comes from the rows already in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# motion is measured on frames strided down to about this many pixels on their longer side: the
# robot's motion survives, the decoding noise of a lossy codec averages out, and it costs nothing
MOTION_SIDE = 32


@dataclass(frozen=True)
class Window:
    """One episode's consecutive frames `start..stop-1`: image motion [m] and the state's per-dim step
    sizes [m, D] (each dim in units of its spread), m = stop - start - 1 (step t: frame start+t to +1)."""

    episode: int
    start: int
    stop: int
    motion: np.ndarray
    steps: np.ndarray

    @property
    def speed(self) -> np.ndarray:
        return np.linalg.norm(self.steps, axis=1)


def image_motion(frames: np.ndarray) -> np.ndarray:
    """Mean absolute difference of consecutive frames, grey levels 0-255, on a strided copy."""
    step = max(1, max(frames.shape[1:3]) // MOTION_SIDE)
    grey = frames[:, ::step, ::step].astype(np.float32).mean(axis=-1)
    return np.abs(np.diff(grey, axis=0)).mean(axis=(1, 2)).astype(np.float64)


def state_steps(state: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """|state[t+1] - state[t]| per dim in units of the dim's spread (a gripper in millimetres does not
    drown joints in radians); dims that never move are left out."""
    moving = scale > 0
    return np.abs(np.diff(state[:, moving], axis=0)) / scale[moving]


def busiest(speed: np.ndarray, width: int) -> int:
    """Start of the `width` consecutive speed steps whose speed varies most: a window where the robot
    moves and stops (idle stretches carry no timing), chosen from the rows before anything is decoded."""
    if speed.size <= width:
        return 0
    s1 = np.concatenate([[0.0], np.cumsum(speed)])
    s2 = np.concatenate([[0.0], np.cumsum(speed**2)])
    total, square = s1[width:] - s1[:-width], s2[width:] - s2[:-width]
    return int(np.argmax(square / width - (total / width) ** 2))


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0)
    return np.where(sd > 0, (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0), 0.0)


def _pairs(windows: list[Window], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Image motion at t+k against the state's steps at t, every window standardized on its own (a busy
    episode does not outweigh a calm one), pooled."""
    m_parts, x_parts = [], []
    for w in windows:
        m, x = _z(w.motion), _z(w.steps)
        n = len(m)
        lo, hi = max(0, -k), min(n, n - k)
        m_parts.append(m[lo + k : hi + k])
        x_parts.append(x[lo:hi])
    return np.concatenate(m_parts), np.concatenate(x_parts)


@dataclass(frozen=True)
class Moments:
    """Per window and lag, the least-squares sums (X'X, X'm, m'm, n): a fit over any set of windows
    (a bootstrap draw) adds them up instead of touching the samples again."""

    xx: np.ndarray  # [windows, lags, D, D]
    xm: np.ndarray  # [windows, lags, D]
    mm: np.ndarray  # [windows, lags]
    n: np.ndarray  # [windows, lags]

    @classmethod
    def of(cls, windows: list[Window], max_lag: int) -> Moments:
        lags = range(-max_lag, max_lag + 1)
        d = windows[0].steps.shape[1] if windows else 0
        xx = np.zeros((len(windows), len(lags), d, d))
        xm = np.zeros((len(windows), len(lags), d))
        mm, n = np.zeros((len(windows), len(lags))), np.zeros((len(windows), len(lags)))
        for i, w in enumerate(windows):
            for j, k in enumerate(lags):
                m, x = _pairs([w], k)
                xx[i, j], xm[i, j], mm[i, j], n[i, j] = x.T @ x, x.T @ m, m @ m, len(m)
        return cls(xx, xm, mm, n)

    def fits(self, pick: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Adjusted multiple correlation per lag, and the coefficients per lag, over the windows `pick`
        (all when None; repeats count twice, as a bootstrap draw wants)."""
        take = slice(None) if pick is None else pick
        xx, xm, mm, n = (a[take].sum(axis=0) for a in (self.xx, self.xm, self.mm, self.n))
        d = xx.shape[-1]
        # one batched solve over the lags; a ridge of 1e-9 of the diagonal keeps dims still in every
        # window (all-zero columns) from making X'X singular, and moves nothing else
        ridge = 1e-9 * np.maximum(np.trace(xx, axis1=1, axis2=2), 1.0)[:, None, None] * np.eye(d)
        betas = np.linalg.solve(xx + ridge, xm[..., None])[..., 0]
        ok = (n > d + 2) & (mm > 0)
        r2 = np.einsum("ld,ld->l", betas, xm) / np.where(ok, mm, 1.0)  # 1 - RSS/TSS at the optimum
        adjusted = 1.0 - (1.0 - r2) * (n - 1) / np.where(ok, n - d - 1, 1.0)
        r = np.where(ok, np.sqrt(np.clip(adjusted, 0.0, None)), 0.0)
        return r, betas


def fit(windows: list[Window], k: int) -> tuple[float, np.ndarray]:
    """How well the state's steps explain the image motion k frames later: the multiple correlation of a
    least-squares fit over the dims (which dims the camera sees, and velocity dims, weigh themselves),
    adjusted for the number of dims (chance alone fits D dims to N steps with R^2 ~ D/N)."""
    moments = Moments.of(windows, abs(k))
    r, betas = moments.fits()
    return float(r[k + abs(k)]), betas[k + abs(k)]


def correlations(windows: list[Window], max_lag: int) -> np.ndarray:
    """The fit's (adjusted) correlation at each lag k = -max_lag..max_lag, pooled over the windows. A peak
    at k > 0: the picture changes k frames after the state does (the camera lags)."""
    return Moments.of(windows, max_lag).fits()[0]


def bootstrap_peaks(windows: list[Window], max_lag: int, draws: int, seed: int = 0) -> np.ndarray:
    """The peak lag of `draws` resamplings of the episodes (with replacement): how sure the peak is."""
    moments = Moments.of(windows, max_lag)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(windows), (draws, len(windows)))
    return np.array([int(np.argmax(moments.fits(p)[0])) - max_lag for p in picks], np.int64)


def match(motion: np.ndarray, steps: np.ndarray, beta: np.ndarray, lag: int) -> float:
    """Correlation of one episode's image motion with a state's steps (weighted by the pooled fit's
    `beta`) `lag` frames earlier: whose state these pictures follow."""
    n = min(len(motion), len(steps))
    if n - abs(lag) < 3 or steps.shape[1] != beta.size:
        return 0.0
    m, x = _pairs([Window(-1, 0, n + 1, motion[:n], steps[:n])], lag)
    pred = x @ beta
    denom = np.sqrt((m**2).sum() * (pred**2).sum())
    return float((m * pred).sum() / denom) if denom > 0 else 0.0
