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


def sample_size(population: int, count: int, max_rate: float | None, confidence: float = 0.95) -> int:
    """How many rows to sample: `count`, or enough that 0 mismatches bound the rate below `max_rate`
    (1 - (1-c)^(1/n) <= rate  <=>  n >= ln(1-c) / ln(1-rate)); never more than the population."""
    if max_rate is not None:
        count = math.ceil(math.log(1 - confidence) / math.log(1 - max_rate))
    return max(0, min(int(count), int(population)))


def sample_rows(population: int, n: int, seed: int) -> np.ndarray:
    """A seeded, sorted sample of row indices (the same on every shard and in the unsharded run)."""
    if n >= population:
        return np.arange(population)
    return np.sort(np.random.default_rng(seed).choice(population, size=n, replace=False))


def bound_fields(mismatches: int, n: int, confidence: float) -> dict[str, object]:
    """The evidence every sampled row carries."""
    return {
        "n": int(n),
        "mismatches": int(mismatches),
        "confidence": confidence,
        "mismatch_rate_upper_bound": upper_bound(mismatches, n, confidence),
    }
