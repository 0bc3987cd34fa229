"""Sample sizes that mean something: every sampled check reports n and the upper bound on the mismatch
rate it supports (exact one-sided Clopper-Pearson; 0 of n bounds the rate by about 3/n at 95 %)."""

from __future__ import annotations

import math

import numpy as np


def upper_bound(mismatches: int, n: int, confidence: float = 0.95) -> float | None:
    """One-sided Clopper-Pearson upper bound on the mismatch rate; None when nothing was sampled."""
    from scipy.stats import beta  # ~0.8 s to import: here, not when every launch loads the stage

    if n <= 0:
        return None
    if mismatches >= n:
        return 1.0
    return float(beta.ppf(confidence, mismatches + 1, n - mismatches))


def sample_size(population: int, count: int | None, max_rate: float | None, confidence: float = 0.95) -> int:
    """How many rows to sample: `count` where given, else enough that 0 mismatches bound the rate below
    `max_rate` (1 - (1-c)^(1/n) <= rate  <=>  n >= ln(1-c) / ln(1-rate)); never more than the population."""
    if count is None:
        count = math.ceil(math.log(1 - confidence) / math.log(1 - (max_rate or 0.005)))
    return max(0, min(int(count), int(population)))


def sample_rows(population: int, n: int, seed: int, starts: np.ndarray | None = None) -> np.ndarray:
    """A seeded, sorted sample of row indices (the same on every shard and in the unsharded run). With
    episode `starts` and room for it, stratified: one row of every episode first (a single bad episode
    is the common fault), the rest drawn from the remaining rows."""
    if n >= population:
        return np.arange(population)
    rng = np.random.default_rng(seed)
    bounds = [] if starts is None else [int(s) for s in starts if 0 <= int(s) <= population]
    spans = [(a, b) for a, b in zip(bounds, bounds[1:] + [population], strict=False) if b > a]
    if not spans or len(spans) > n:
        return np.sort(rng.choice(population, size=n, replace=False))
    first = np.array([rng.integers(a, b) for a, b in spans], dtype=np.int64)
    rest = np.setdiff1d(np.arange(population), first)
    more = rng.choice(rest, size=n - len(first), replace=False) if n > len(first) else np.array([], int)
    return np.sort(np.concatenate([first, more]).astype(np.int64))


def bound_fields(mismatches: int, n: int, confidence: float) -> dict[str, object]:
    """The evidence every sampled row carries."""
    return {
        "n": int(n),
        "mismatches": int(mismatches),
        "confidence": confidence,
        "mismatch_rate_upper_bound": upper_bound(mismatches, n, confidence),
    }
