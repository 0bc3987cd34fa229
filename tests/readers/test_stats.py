"""The streaming stats: exact moments/min/max, quantiles within the promised rank error, any blocking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.readers.stats import (
    QUANTILES,
    compute_stats,
    iter_array_blocks,
    keys_to_float,
    order_keys,
    rank_of,
)


def _rank_error(column: np.ndarray, value: float, p: float) -> float:
    """How far (as a fraction of n) `value` is from being a valid p-quantile of `column`."""
    col = np.sort(column.astype(np.float32))
    lo, hi = np.searchsorted(col, np.float32(value), "left"), np.searchsorted(col, np.float32(value), "right")
    target = p * (len(col) - 1)
    return 0.0 if lo <= target <= hi else min(abs(lo - target), abs(hi - target)) / len(col)


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def _no_coalescing(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """Blocks reach the sketch as given, so the per-block merge and tracking paths are exercised; every
    test runs with the compiled kernel and with the numpy formulation."""
    from pipeline.readers import sketch_kernel
    from pipeline.readers import stats as module

    if request.param == "numba" and sketch_kernel.numba is None:
        pytest.skip("numba is not installed: the compiled kernel cannot run")
    monkeypatch.setattr(module, "MIN_BLOCK", 1)
    monkeypatch.setattr(module, "KERNEL", request.param)
    return request.param


def _stats(x: np.ndarray, rows: int = 997) -> dict[str, np.ndarray]:
    return compute_stats(lambda: iter_array_blocks(x, "f", rows), {"f": x.shape[1]})["f"]


def test_order_keys_round_trip_and_order() -> None:
    values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 7e30, np.inf], dtype=np.float32)
    keys = order_keys(values)
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)
    assert np.array_equal(keys_to_float(keys).view(np.int32), values.view(np.int32))


def test_moments_exact_and_quantiles_within_rank_error() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            rng.normal(1.5, 0.1, (30_000, 2)),  # peaked: needs the refine pass
            rng.integers(-3, 4, (30_000, 1)),  # atoms
            rng.standard_cauchy((30_000, 1)),
        ],
        axis=1,
    ).astype(np.float32)
    stats = _stats(x)
    ref = x.astype(np.float64)
    np.testing.assert_allclose(stats["mean"], ref.mean(0), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(stats["std"], ref.std(0), rtol=1e-7)
    np.testing.assert_array_equal(stats["min"], ref.min(0))
    np.testing.assert_array_equal(stats["max"], ref.max(0))
    assert int(stats["count"][0]) == len(x)
    for name, p in QUANTILES.items():
        for d in range(x.shape[1]):
            assert _rank_error(x[:, d], stats[name][d], p) <= 1e-3, (name, d)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=400), st.integers(1, 50)
)
def test_quantiles_any_data_any_blocking(values: list[float], rows: int) -> None:
    x = np.asarray(values, dtype=np.float32)[:, None]
    stats = _stats(x, rows)
    assert stats["min"][0] == x.min() and stats["max"][0] == x.max()
    for name, p in QUANTILES.items():
        assert _rank_error(x[:, 0], stats[name][0], p) <= 1e-3, name


def test_nonfinite_values_are_counted_and_excluded() -> None:
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    x[3, 1] = np.nan
    x[5, 1] = np.inf
    stats = _stats(x, 4)
    assert stats["nonfinite"].tolist() == [0, 2]
    finite = x[np.isfinite(x[:, 1]), 1].astype(np.float64)
    assert stats["mean"][1] == pytest.approx(finite.mean())
    assert stats["std"][1] == pytest.approx(finite.std())
    assert stats["max"][1] == finite.max()


def test_rank_of_brackets_atoms() -> None:
    from pipeline.readers.stats import FeatureStats

    fs = FeatureStats(1)
    x = np.concatenate([np.full(300, -1.0), np.linspace(-0.9, 0.9, 400), np.full(300, 1.0)]).astype(
        np.float32
    )
    fs.update(x[:, None])
    lo, hi = rank_of(fs, np.array([-1.0]))[0]
    assert lo == 0.0 and hi == pytest.approx(0.3)
    lo, hi = rank_of(fs, np.array([1.0]))[0]
    assert lo <= 0.7 <= hi and hi == 1.0


def _count_refines(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    from pipeline.readers import stats as module

    calls = {"n": 0}
    original = module._refine

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "_refine", counting)
    return calls


def test_peaked_stationary_data_needs_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heavy quantile buckets are resolved by the second-level histograms started in pass 1."""
    calls = _count_refines(monkeypatch)
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(1.5, 0.01, (200_000, 1)), (rng.random((200_000, 1)) > 0.5)], axis=1)
    x = x.astype(np.float32)
    stats = _stats(x, 20_000)
    assert calls["n"] == 0
    for name, p in QUANTILES.items():
        for d in range(2):
            assert _rank_error(x[:, d], stats[name][d], p) <= 1e-3, (name, d)
    assert stats["q50"][1] in (0.0, 1.0)  # an atom is returned exactly


def test_late_heavy_bucket_falls_back_to_a_second_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spread-out data first, then a tight cluster: the median's bucket turns heavy only late, with more
    earlier values in it than the rank budget allows, so pass 2 re-reads it."""
    calls = _count_refines(monkeypatch)
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(4, 6, 60_000), rng.normal(5.0, 0.0005, 60_000)]).astype(np.float32)[
        :, None
    ]
    stats = _stats(x, 5_000)
    assert calls["n"] == 1
    for name, p in QUANTILES.items():
        assert _rank_error(x[:, 0], stats[name][0], p) <= 1e-3, name


def test_small_blocks_are_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.readers import stats as module

    monkeypatch.setattr(module, "MIN_BLOCK", 100)
    blocks = [{"a": np.full((30, 2), i), "b": np.full((29,), i)} for i in range(7)]
    out = list(module.coalesce(blocks))
    assert [len(b["a"]) for b in out] == [120, 90] and [len(b["b"]) for b in out] == [116, 87]
    assert out[0]["a"][:, 0].tolist() == [0] * 30 + [1] * 30 + [2] * 30 + [3] * 30
