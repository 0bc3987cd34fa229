"""The health pass's fast paths against their references, bit for bit: the tail probabilities and
Benjamini-Hochberg q-values against scipy.stats (whose import the stage no longer pays)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.stages.contract.health.departure import bh_adjusted, normal_isf, normal_sf


@pytest.mark.parametrize("n", [1, 2, 5, 100, 20000])
def test_tails_and_q_values_are_scipy_stats_bits(n: int) -> None:
    stats = pytest.importorskip("scipy.stats", reason="scipy.stats: the reference the q-values copy")
    rng = np.random.default_rng(n)
    z = rng.normal(size=n) * rng.choice([0.1, 1.0, 10.0], size=n)
    z[: n // 10] = np.round(z[: n // 10])  # ties among the p-values
    if n > 3:
        z[:2] = np.inf, -np.inf
    assert np.array_equal(normal_sf(z), stats.norm.sf(z))
    assert np.array_equal(bh_adjusted(normal_sf(z)), stats.false_discovery_control(stats.norm.sf(z)))
    for p in (1e-9, 1e-5, 0.01, 0.3):
        assert normal_isf(p) == float(stats.norm.isf(p))
