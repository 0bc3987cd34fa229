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

    if request.param == "numba" and not sketch_kernel.AVAILABLE:
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


def _check_all(x: np.ndarray, stats: dict[str, np.ndarray]) -> None:
    """Moments against float64 over the finite values, every quantile within the rank error."""
    for d in range(x.shape[1]):
        col = x[np.isfinite(x[:, d]), d]
        assert int(stats["nonfinite"][d]) == len(x) - len(col), d
        ref = col.astype(np.float64)
        assert stats["mean"][d] == pytest.approx(ref.mean(), rel=1e-9, abs=1e-9), d
        assert stats["std"][d] == pytest.approx(ref.std(), rel=1e-7, abs=1e-12), d
        assert stats["min"][d] == ref.min() and stats["max"][d] == ref.max(), d
        for name, p in QUANTILES.items():
            assert _rank_error(col, stats[name][d], p) <= 1e-3, (name, d)


def test_adversarial_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Heavy ties, a huge outlier, a constant column, NaN/inf, and a mean that dwarfs the spread."""
    rng = np.random.default_rng(11)
    n = 50_000
    ties = np.round(rng.normal(0, 1, n), 1)  # ~40 atoms
    ties[rng.random(n) < 1 / 3] = 0.25  # one atom with a third of the mass
    outlier = rng.normal(0, 1, n)
    outlier[n // 2] = 3e38
    constant = np.full(n, -7.5)
    holes = rng.normal(5, 2, n)
    holes[rng.random(n) < 0.01] = np.nan
    holes[::977] = np.inf
    holes[::1999] = -np.inf
    offset = 1e4 + rng.normal(0, 1e-3, n)  # float32 spacing ~1e-3: cancellation without the shift
    x = np.stack([ties, outlier, constant, holes, offset], axis=1).astype(np.float32)
    calls = _count_refines(monkeypatch)
    stats = _stats(x, 4_999)
    _check_all(x, stats)
    assert calls["n"] == 0
    assert stats["q50"][2] == -7.5 and stats["std"][2] == 0.0
    assert stats["max"][1] == np.float32(3e38)


def test_atom_among_neighbours_is_pinned_by_level_three(monkeypatch: pytest.MonkeyPatch) -> None:
    """An atom with values a few ULPs away (same top-16 bucket, same level-2 cell): only the level-3
    counters can return it exactly, in one pass."""
    from pipeline.readers import stats as module

    kept: dict[str, module.FeatureStats] = {}
    rng = np.random.default_rng(12)
    near = np.nextafter(np.float32(1.0), np.float32(2.0)) + rng.integers(0, 40, 60_000) * np.float32(1.2e-7)
    x = np.concatenate([np.full(40_000, 1.0, dtype=np.float32), near.astype(np.float32)])
    x = rng.permutation(x)[:, None]
    calls = _count_refines(monkeypatch)
    stats = compute_stats(lambda: iter_array_blocks(x, "f", 7_000), {"f": 1}, keep=kept)["f"]
    assert calls["n"] == 0
    assert kept["f"].sketch.low.counts.shape[0] > 0  # level 3 was used
    assert stats["q10"][0] == 1.0 and stats["q01"][0] == 1.0
    _check_all(x, stats)


def test_tracked_cells_stay_small() -> None:
    """Robot-like random walks over 14 dims: levels 2 and 3 cost KiBs, not the 512 KiB per tracked bucket
    of a 16-bit sub-histogram (256 MiB per feature in bench_stats before)."""
    from pipeline.readers.stats import FeatureStats

    rng = np.random.default_rng(13)
    walks = np.cumsum(rng.normal(0, 0.01, (100, 500, 14)), axis=1) + rng.normal(0, 0.3, (100, 1, 14))
    x = walks.reshape(-1, 14).astype(np.float32)
    fs = FeatureStats(14)
    for start in range(0, len(x), 10_000):
        fs.update(x[start : start + 10_000])
    assert fs.sketch.mid.counts.nbytes + fs.sketch.low.counts.nbytes <= 2 * 2**20
    assert sum(len(t) for t in fs.sketch.tracked) > 0


def test_compiled_and_numpy_kernels_agree() -> None:
    """The same block and sketch state through both kernels: identical counters, min/max and counts."""
    from pipeline.readers import sketch_kernel

    if not sketch_kernel.AVAILABLE:
        pytest.skip("numba is not installed: nothing to compare the numpy kernel with")
    rng = np.random.default_rng(14)
    values = rng.normal(0, 1, (5_000, 3)).astype(np.float32)
    values[:, 0] = rng.normal(0.1, 1e-4, 5_000)  # mostly inside the tracked bucket of 0.1
    values[::7, 1] = np.nan
    values[::11, 2] = -np.inf
    bits = values.view(np.int32)
    shift = np.array([0.5, -1.0, 0.0])
    lut = np.full((3, sketch_kernel.BUCKETS), -1, dtype=np.int32)
    top = (int(sketch_kernel.order_keys_scalar(0.1)) >> 16) + sketch_kernel.BUCKETS // 2
    lut[0, top] = 0
    lut2 = np.full((1, sketch_kernel.CELLS), -1, dtype=np.int32)
    lut2[0, :] = 0  # every level-2 cell of that bucket feeds level-3 row 0
    results = []
    for name in ("numba", "numpy"):
        reduce, count, _ = sketch_kernel.kernels(name)
        hist = np.zeros((3, sketch_kernel.BUCKETS), dtype=np.int64)
        mid = np.zeros((1, sketch_kernel.CELLS), dtype=np.int64)
        low = np.zeros((1, sketch_kernel.CELLS), dtype=np.int64)
        out = np.zeros((5, 3))
        reduce(values, bits, shift, hist, lut, mid, lut2, low, out)
        extra = np.zeros((2, sketch_kernel.CELLS), dtype=np.int64)
        ids = np.array([0, 0], dtype=np.int64)
        count(bits, ids, np.array([top, top]), np.array([-1, 3]), np.array([0, 1]), extra)
        results.append((hist, mid, low, out, extra))
    (h1, m1, l1, o1, e1), (h2, m2, l2, o2, e2) = results
    assert np.array_equal(h1, h2) and np.array_equal(m1, m2) and np.array_equal(l1, l2)
    assert np.array_equal(e1, e2) and np.array_equal(e1[0], m1[0]) and m1.sum() > 0
    assert np.array_equal(o1[[0, 3, 4]], o2[[0, 3, 4]])
    np.testing.assert_allclose(o1[1:3], o2[1:3], rtol=1e-12)
    assert o1[0].tolist() == [5_000, 5_000 - len(values[::7]), 5_000 - len(values[::11])]


@pytest.mark.parametrize("dim", [1, 3, 14, 70])
def test_compiled_kernel_flat_sums_match_numpy(dim: int) -> None:
    """The compiled kernel sums clean chunks in one flat sweep (accumulators per position of a stride
    that is a multiple of `dim`) and chunks with a non-finite value row by row: both paths, a row count
    that is not a multiple of the stride, and dims 1..70 give numpy's float64 sums and exact min/max."""
    from pipeline.readers import sketch_kernel

    if not sketch_kernel.AVAILABLE:
        pytest.skip("numba is not installed: nothing to compare the numpy kernel with")
    rng = np.random.default_rng(dim)
    rows = 3 * sketch_kernel.CHUNK + 7
    values = (rng.normal(5.0, 2.0, (rows, dim)) + np.arange(dim)).astype(np.float32)
    values[sketch_kernel.CHUNK + 5, 0] = np.nan  # only the second chunk takes the row-by-row path
    values.flags.writeable = False  # as arrow hands blocks over
    shift = values[0].astype(np.float64)
    got = []
    for name in ("numba", "numpy"):
        reduce, *_ = sketch_kernel.kernels(name)
        hist = np.zeros((dim, sketch_kernel.BUCKETS), dtype=np.int64)
        lut = np.full((dim, sketch_kernel.BUCKETS), -1, dtype=np.int32)
        table = np.zeros((1, sketch_kernel.CELLS), dtype=np.int64)
        out = np.zeros((5, dim))
        reduce(values, values.view(np.int32), shift, hist, lut, table, lut[:1, :256].copy(), table, out)
        got.append((hist, out))
    (h1, o1), (h2, o2) = got
    assert np.array_equal(h1, h2) and int(h1.sum()) == rows * dim - 1
    assert np.array_equal(o1[[0, 3, 4]], o2[[0, 3, 4]])
    np.testing.assert_allclose(o1[1:3], o2[1:3], rtol=1e-12)
    finite = np.where(np.isfinite(values), values, np.nan).astype(np.float64)
    np.testing.assert_allclose(o1[1], np.nansum(finite - shift, axis=0), rtol=1e-12)
    assert o1[3].tolist() == np.nanmin(finite, axis=0).tolist()


def test_compiled_pre_filter_never_skips_a_dim_track_would_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled `wanted` test may flag too much but never too little: every dim it leaves out gets
    nothing from `QuantileSketch.track` (checked on a copy of the sketch at each call), over peaked,
    atomic, drifting, uniform and constant columns."""
    import copy

    from pipeline.readers import sketch_kernel
    from pipeline.readers.stats import FeatureStats

    if not sketch_kernel.AVAILABLE:
        pytest.skip("numba is not installed: the numpy fallback does not pre-filter")
    rng = np.random.default_rng(15)
    n = 120_000
    drift = np.cumsum(rng.normal(0, 0.01, n))
    gripper = (rng.random(n) > 0.6).astype(np.float64)
    peaked = rng.normal(0.3, 1e-4, n)
    x = np.stack([drift, gripper, peaked, rng.uniform(-1, 1, n), np.zeros(n)], axis=1).astype(np.float32)
    reduce, count, wanted = sketch_kernel.kernels("numba")
    fs = FeatureStats(5, kernel="numba")
    flagged, skipped = [], []

    def checking(*args):  # type: ignore[no-untyped-def]
        wanted(*args)
        flags = args[-1]
        flagged.extend(np.flatnonzero(flags).tolist())
        for d in np.flatnonzero(~flags & (fs.sketch.total > 0)).tolist():
            new2, new3 = copy.deepcopy(fs.sketch).track(d)
            assert not new2 and not new3, d
            skipped.append(d)

    monkeypatch.setattr(sketch_kernel, "_COMPILED", [(reduce, count, checking)])
    for start in range(0, n, 6_000):
        fs.update(x[start : start + 6_000])
    assert flagged and skipped and 4 in skipped  # some dims start cells, the constant one never again
