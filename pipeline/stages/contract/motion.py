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
    """One episode's consecutive frames `start..stop-1`: image motion and state speed, both of length
    `stop - start - 1` (step t is the change from frame start+t to start+t+1)."""

    episode: int
    start: int
    stop: int
    motion: np.ndarray
    speed: np.ndarray


def image_motion(frames: np.ndarray) -> np.ndarray:
    """Mean absolute difference of consecutive frames, grey levels 0-255, on a strided copy."""
    step = max(1, max(frames.shape[1:3]) // MOTION_SIDE)
    grey = frames[:, ::step, ::step].astype(np.float32).mean(axis=-1)
    return np.abs(np.diff(grey, axis=0)).mean(axis=(1, 2)).astype(np.float64)


def state_speed(state: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Norm of the step-to-step change of the state, each dim in units of its spread (so a gripper in
    millimetres does not drown joints in radians); dims that never move are left out."""
    moving = scale > 0
    if not moving.any():
        return np.zeros(max(len(state) - 1, 0))
    steps = np.diff(state[:, moving], axis=0) / scale[moving]
    return np.linalg.norm(steps, axis=1)


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
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def correlations(windows: list[Window], max_lag: int) -> np.ndarray:
    """Pearson correlation of image motion at t+k with state speed at t, k = -max_lag..max_lag, pooled
    over the windows (each standardized on its own, so a busy episode does not outweigh a calm one).
    A peak at k > 0: the picture changes k frames after the state does (the camera lags)."""
    lags = range(-max_lag, max_lag + 1)
    out = np.zeros(len(lags))
    for i, k in enumerate(lags):
        m_parts, s_parts = [], []
        for w in windows:
            m, s = _z(w.motion), _z(w.speed)
            n = len(m)
            lo, hi = max(0, -k), min(n, n - k)
            m_parts.append(m[lo + k : hi + k])
            s_parts.append(s[lo:hi])
        m_all, s_all = np.concatenate(m_parts), np.concatenate(s_parts)
        denom = np.sqrt((m_all**2).sum() * (s_all**2).sum())
        out[i] = float((m_all * s_all).sum() / denom) if denom > 0 else 0.0
    return out


def bootstrap_peaks(windows: list[Window], max_lag: int, draws: int, seed: int = 0) -> np.ndarray:
    """The peak lag of `draws` resamplings of the episodes (with replacement): how sure the peak is."""
    rng = np.random.default_rng(seed)
    peaks = np.empty(draws, np.int64)
    for b in range(draws):
        pick = rng.integers(0, len(windows), len(windows))
        peaks[b] = int(np.argmax(correlations([windows[i] for i in pick], max_lag))) - max_lag
    return peaks


def match(motion: np.ndarray, speed: np.ndarray, lag: int) -> float:
    """Correlation of one episode's image motion with one state speed profile at a given lag."""
    n = min(len(motion), len(speed))
    if n < 3:
        return 0.0
    w = Window(-1, 0, n + 1, motion[:n], speed[:n])
    return float(correlations([w], abs(lag))[lag + abs(lag)])
