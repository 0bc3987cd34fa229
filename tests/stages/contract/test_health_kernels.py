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


EXACT = ("lo", "hi", "first", "last", "longest", "run", "row_longest", "row_run", "jump_at", "bounce_at")
EXACT += ("diff_n", "low", "low_count", "low_row", "high", "high_count", "high_row", "h1", "h2", "rowh")
STEPS = ("jump", "bounce", "last_step")  # numpy takes a float32 feature's steps in float32, the loop in 64


def _planted(dtype: type) -> np.ndarray:
    """Random walks with the faults the rows look for: a spike, a held dim, a frozen stretch, a jump, a
    quantized dim, NaN and inf values."""
    rng = np.random.default_rng(7)
    x = np.cumsum(rng.normal(size=(3000, 6)), axis=0)
    x[1000, 1] += 400.0  # a one-sample spike
    x[:, 2] = np.where(np.arange(3000) < 1500, 0.25, x[:, 2])  # held for whole episodes
    x[2000:2300, 3] = x[2000, 3]  # frozen
    x[2500:, 0] += 1000.0  # a jump
    x[:, 4] = np.round(x[:, 4])  # levels
    x[rng.random(x.shape) < 0.004] = np.nan
    x[rng.random(x.shape) < 0.002] = np.inf
    return np.ascontiguousarray(x.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cont", [False, True])
def test_the_compiled_motion_kernel_gives_the_numpy_reference_facts(
    dtype: type, cont: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled loop against `motion_numpy` on planted faults, in a block that continues an open
    episode or not: every extreme, frame, count and hash the same bits, the sums within rounding (and a
    float32 feature's steps within float32 rounding)."""
    pytest.importorskip("numba", reason="numba: the compiled kernel under test")
    from pipeline.readers import health_kernel, sketch_kernel

    x = _planted(dtype)
    starts = np.array([0, 350, 700, 701, 1500, 2100, 2600])
    ends = np.r_[starts[1:], len(x)]
    carry = (x[0] - 0.5, np.arange(6), np.array([2]), 11, np.array([0.3, -0.2, np.nan, 0.0, 1.0, -1.0]))
    args = (carry[0], carry[1], carry[2], carry[3], carry[4]) if cont else (None, np.zeros(6, np.int64))
    args = args + ((np.zeros(1, np.int64), 0, None) if not cont else ())

    def run() -> dict[str, np.ndarray]:
        return health_kernel.motion(x, starts, ends, cont, *args)

    monkeypatch.setattr(sketch_kernel, "HAVE_NUMBA", True)
    compiled = run()
    monkeypatch.setattr(sketch_kernel, "HAVE_NUMBA", False)
    reference = run()
    for name in EXACT:
        assert np.array_equal(compiled[name], reference[name], equal_nan=True), name
    for name in STEPS:
        tol = 1e-6 if dtype == np.float32 else 0.0
        np.testing.assert_allclose(compiled[name], reference[name], rtol=tol, atol=tol, err_msg=name)
    for name in ("total", "diff_sq"):
        np.testing.assert_allclose(compiled[name], reference[name], rtol=1e-6, err_msg=name)
    assert compiled["bounce"][3, 1] > 300 and compiled["bounce_at"][3, 1] == 299  # the spike, at its frame
