"""Repeatability before conclusions (reference 002): is a stochastic model's per-sample error stable?

A diffusion or flow-matching policy's error on a sample changes with its noise seed. Before two such
models are compared, each sample is scored under K estimator seeds (even, >= 4); the seeds are split
in halves and the per-sample means of the halves must rank the samples alike (split-half Spearman and
Kendall, top-quartile overlap). Below the configured correlation the comparison is `unverifiable`.
Estimator seeds must be unique and disjoint from every compared artifact's seeds (a shared seed would
correlate the estimator with what it measures). Where a per-sample score is compared with a reference
measure, a seeded permutation control gives a one-sided p-value and leave-one-out shows the sign holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.errors import ConfigError


def check_seeds(estimator: Sequence[int], artifacts: Mapping[str, Sequence[int]], key: str) -> None:
    """Refuse estimator seeds that are too few, odd in number, repeated, or shared with an artifact."""
    seeds = [int(s) for s in estimator]
    if len(seeds) < 4 or len(seeds) % 2:
        raise ConfigError(f"{key}.estimator_seeds", f"expected an even count >= 4, got {len(seeds)}: {seeds}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"{key}.estimator_seeds", f"seeds must be unique; repeated: {repeated}")
    for name, used in artifacts.items():
        shared = sorted(set(seeds) & {int(s) for s in used})
        if shared:
            raise ConfigError(
                f"{key}.estimator_seeds",
                f"seeds {shared} are also seeds of compared artifact {name!r}; estimator seeds must be "
                "disjoint from the seeds of every artifact they are compared with",
            )


def same_outputs(first: np.ndarray, second: np.ndarray) -> dict[str, Any]:
    """Two runs' whole outputs (B, chunk, D), every chunk step: identical, or where and by how much not.
    A chunk model's outputs are compared whole, never against a copy already cut to the scored horizon."""
    shapes = [list(first.shape), list(second.shape)]
    if first.shape != second.shape:
        return {"identical": False, "shape": shapes, "differs": f"output shapes {shapes[0]} vs {shapes[1]}"}
    identical = bool(np.array_equal(first, second, equal_nan=True))
    out: dict[str, Any] = {"identical": identical, "shape": shapes[0]}
    if identical:
        return out
    diff = np.abs(first.astype(np.float64) - second)
    diff[np.isnan(first) & np.isnan(second)] = 0.0
    diff[np.isnan(diff)] = np.inf  # NaN under one seed only
    changed = diff > 0  # (B, chunk, D): models.infer returns every output as a chunk
    steps = np.flatnonzero(changed.any(axis=(0, 2))).tolist()
    out |= {
        "max_abs_diff": float(diff.max()),
        "chunk_steps_differing": steps[:20],
        "samples_differing": int(changed.any(axis=(1, 2)).sum()),
    }
    out["differs"] = f"max |diff| {out['max_abs_diff']:.3g} at {len(steps)} chunk step(s), first {steps[:1]}"
    return out


def split_half(matrix: np.ndarray) -> dict[str, Any]:
    """matrix (K seeds, N samples) of per-sample errors -> how alike the two halves rank the samples."""
    from scipy.stats import kendalltau, spearmanr  # ~0.8 s to import: not when a launch loads the stage

    k, n = matrix.shape
    if k < 4 or k % 2:
        raise ValueError(f"estimator matrix must have an even number >= 4 of rows, got {k}")
    first, second = matrix[: k // 2].mean(axis=0), matrix[k // 2 :].mean(axis=0)
    rho, tau = spearmanr(first, second), kendalltau(first, second)
    top = max(1, n // 4)
    overlap = len(set(np.argsort(first)[-top:]) & set(np.argsort(second)[-top:])) / top
    mean = matrix.mean(axis=0)
    cv = matrix.std(axis=0, ddof=1) / np.where(mean > 0, mean, np.nan)
    return {
        "seeds": k,
        "samples": n,
        "spearman": _finite(rho.statistic),
        "spearman_p": _finite(rho.pvalue),
        "kendall": _finite(tau.statistic),
        "kendall_p": _finite(tau.pvalue),
        "top25_overlap": overlap,
        "mean_abs_diff": float(np.mean(np.abs(first - second))),
        "max_abs_diff": float(np.max(np.abs(first - second))),
        "mean_cv": _finite(np.nanmean(cv)) if np.isfinite(cv).any() else None,
        "median_cv": _finite(np.nanmedian(cv)) if np.isfinite(cv).any() else None,
    }


def _finite(value: Any) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def permutation_control(score: np.ndarray, reference: np.ndarray, n: int, seed: int) -> dict[str, Any]:
    """Spearman of score vs reference, and how often a shuffled reference does at least as well."""
    from scipy.stats import rankdata, spearmanr  # ~0.8 s to import: not when a launch loads the stage

    observed = float(spearmanr(score, reference).statistic)
    rng = np.random.default_rng(seed)
    ranks_score, ranks_ref = rankdata(score), rankdata(reference)
    hits = 0
    for _ in range(n):
        shuffled = rng.permutation(ranks_ref)
        hits += float(np.corrcoef(ranks_score, shuffled)[0, 1]) >= observed
    return {
        "spearman": observed,
        "permutations": n,
        "seed": seed,
        "one_sided_p": (hits + 1) / (n + 1),
    }


def leave_one_out(score: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Spearman with each sample left out: the conclusion holds if no single sample carries it."""
    from scipy.stats import spearmanr  # ~0.8 s to import: not when a launch loads the stage

    rhos = [
        float(spearmanr(np.delete(score, i), np.delete(reference, i)).statistic) for i in range(len(score))
    ]
    return {
        "min_spearman": min(rhos),
        "max_spearman": max(rhos),
        "all_positive": all(r > 0 for r in rhos),
    }
