"""Teacher-forced action error: per sample, per action dim, per chunk step, in two units.

Dataset units are what the robot executes; normalized units divide by the dataset's per-dim action
std so dims are comparable and thresholds are unit-free. Errors at chunk steps beyond an episode's end
are masked (NaN), never compared with the next episode's frames. The gripper dims are reported apart
because their error is bimodal (open/closed) and would hide or dominate the arm's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from pipeline.stages.teacher_forced.samples import Frames


def targets(frames: Frames, rows: np.ndarray, key: str, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Ground truth (N, H, D) for each sample's next `horizon` frames of its own episode, and validity."""
    actions = frames.columns[key]
    n, d = len(rows), actions.shape[1]
    out = np.full((n, horizon, d), np.nan, dtype=np.float32)
    valid = np.zeros((n, horizon), dtype=bool)
    for h in range(horizon):
        nxt = np.minimum(rows + h, len(actions) - 1)
        ok = (rows + h < len(actions)) & (frames.episode[nxt] == frames.episode[rows])
        ok &= frames.frame[nxt] == frames.frame[rows] + h
        out[ok, h] = actions[nxt[ok]]
        valid[:, h] = ok
    return out, valid


@dataclass
class Scored:
    """One model's errors on the samples: `l1_norm` is (N, H, D) with NaN where masked."""

    pred: np.ndarray
    l1: np.ndarray
    l1_norm: np.ndarray
    per_sample: np.ndarray  # (N,) mean normalized L1 over valid steps and all dims


def score(pred: np.ndarray, truth: np.ndarray, valid: np.ndarray, scale: np.ndarray) -> Scored:
    horizon = min(pred.shape[1], truth.shape[1])
    pred, truth, valid = pred[:, :horizon], truth[:, :horizon], valid[:, :horizon]
    if pred.shape[-1] != truth.shape[-1]:
        raise ValueError(f"model predicts {pred.shape[-1]} action dims, the dataset has {truth.shape[-1]}")
    l1 = np.abs(pred.astype(np.float64) - truth)
    l1[~valid] = np.nan
    l1_norm = l1 / scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a sample with only NaN outputs stays NaN
        per_sample = np.nanmean(l1_norm.reshape(len(l1), -1), axis=1)
    broken = ~np.isfinite(pred.reshape(len(pred), -1)).all(axis=1)
    per_sample[broken] = np.inf  # a NaN/inf output is the worst error, never a sample left out
    return Scored(pred, l1, l1_norm, per_sample)


def _nanmean(x: np.ndarray, axis: Any) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis).round(6).tolist()


def summary(
    scored: Scored, gripper: Sequence[int], labels: Sequence[str], names: Sequence[str]
) -> dict[str, Any]:
    """The numbers the record keeps for one model (means over the valid samples/steps)."""
    arm = [d for d in range(scored.l1.shape[-1]) if d not in set(gripper)]
    labels_arr = np.asarray(labels)
    return {
        "dims": list(names),
        "l1": _nanmean(scored.l1, (0, 1)),
        "l1_norm": _nanmean(scored.l1_norm, (0, 1)),
        "mse": _nanmean(scored.l1**2, (0, 1)),
        "mse_norm": _nanmean(scored.l1_norm**2, (0, 1)),
        "l1_norm_by_step": _nanmean(scored.l1_norm, (0, 2)),
        "l1_norm_mean": float(np.nanmean(scored.per_sample))
        if not np.isnan(scored.per_sample).all()
        else None,
        "arm_l1_norm": float(np.nanmean(scored.l1_norm[..., arm])) if arm else None,
        "gripper_l1_norm": float(np.nanmean(scored.l1_norm[..., list(gripper)])) if gripper else None,
        "gripper_dims": list(gripper),
        "subsets": {
            str(s): float(np.nanmean(scored.per_sample[labels_arr == s])) for s in sorted(set(labels))
        },
    }


def nonfinite(pred: np.ndarray) -> dict[str, Any]:
    """Samples whose prediction holds NaN or inf anywhere."""
    bad = ~np.isfinite(pred.reshape(len(pred), -1)).all(axis=1)
    return {"samples": int(bad.sum()), "first": np.flatnonzero(bad)[:10].tolist()}


def collapse(pred: np.ndarray, truth: np.ndarray, ratio: float) -> dict[str, Any]:
    """Spread of each output dim across samples relative to the ground truth's (first chunk step).

    A model whose outputs barely move while the data's actions do is collapsed (all dims) or has
    inactive dims (some); a dim that is constant in the data is not counted against it.
    """
    p, t = pred[:, 0].astype(np.float64), truth[:, 0].astype(np.float64)
    keep = np.isfinite(t).all(axis=1) & np.isfinite(p).all(axis=1)
    p_std, t_std = p[keep].std(axis=0), t[keep].std(axis=0)
    moving = t_std > 1e-9
    rel = np.where(moving, p_std / np.where(moving, t_std, 1.0), np.inf)
    inactive = np.flatnonzero(moving & (rel < ratio)).tolist()
    return {
        "relative_std": np.where(np.isfinite(rel), rel, -1.0).round(6).tolist(),
        "inactive_dims": inactive,
        "collapsed": bool(moving.any()) and len(inactive) == int(moving.sum()),
        "samples": int(keep.sum()),
    }


def paired(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """Per-sample error of model a minus model b on the same samples: bootstrap CI and Wilcoxon p."""
    diff = (a - b)[np.isfinite(a) & np.isfinite(b)]
    if len(diff) < 3 or np.allclose(diff, diff[0]):
        same = len(diff) >= 3
        return {"n": len(diff), "mean_diff": float(diff.mean()) if same else None, "ci": None, "p": None}
    boot = stats.bootstrap(
        (diff,),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        random_state=np.random.default_rng(seed),
        method="BCa",
    )
    test = stats.wilcoxon(diff)
    return {
        "n": len(diff),
        "mean_diff": float(diff.mean()),
        "median_diff": float(np.median(diff)),
        "ci": [float(boot.confidence_interval.low), float(boot.confidence_interval.high)],
        "confidence": confidence,
        "p": float(test.pvalue),
    }


def subset_gap(per_sample: np.ndarray, labels: Sequence[str]) -> dict[str, Any] | None:
    """The worst subset's mean error over the mean of the others (the covariate-shift signature)."""
    labels_arr = np.asarray(labels)
    names = sorted(set(labels))
    if len(names) < 2:
        return None
    means = {s: float(np.nanmean(per_sample[labels_arr == s])) for s in names}
    worst = max(means, key=lambda s: means[s])
    rest = per_sample[(labels_arr != worst) & np.isfinite(per_sample)]
    base = float(rest.mean()) if len(rest) else float("nan")
    return {"worst": worst, "means": means, "ratio": means[worst] / base if base > 0 else float("inf")}
