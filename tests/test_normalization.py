"""The one placeholder rule both reload checks use, and the flat `<feature>.<stat>` layout."""

from __future__ import annotations

import numpy as np

from pipeline.normalization import flat_stats, nonfinite_counts, placeholder_problems, unflatten_stats


def test_placeholder_rule_covers_both_reload_checks() -> None:
    stats = {
        "mean": np.zeros(3),  # a zero mean is a real value
        "std": np.array([1.0, 0.0, 2.0]),  # zero in some dims: padding, judged by the contract's degenerate
        "q01": np.full(3, np.inf),  # LeRobot's unfilled buffer
        "q99": np.zeros(3),  # an upper stat zero everywhere was never filled
        "min": np.array([0.0, np.nan, 1.0]),
        "count": np.array([np.inf]),  # bookkeeping, not a statistic
    }
    problems = placeholder_problems(stats)
    assert sorted(problems) == ["min", "q01", "q99"]
    assert problems["q01"].startswith("3 non-finite (3 inf") and problems["q99"] == "all zeros"
    assert placeholder_problems({"std": np.zeros(2)}) == {"std": "all zeros"}
    assert placeholder_problems({"mean": np.ones(2)}, "MEAN_STD") == {"std": "missing"}
    assert placeholder_problems({"q01": [], "q99": [1.0]}, "QUANTILES") == {"q01": "empty"}
    assert placeholder_problems({"x": [1.0]}, "IDENTITY") == {}
    assert nonfinite_counts(np.array([1.0, np.inf, np.nan])) == {"inf": 1, "nan": 1, "size": 3}
    assert nonfinite_counts(np.ones(2)) is None


def test_flat_round_trip() -> None:
    stats = {"observation.state": {"mean": np.array([1.5, 2.5])}, "action": {"std": np.array([0.25])}}
    flat = flat_stats(stats, ["observation.state"])
    assert list(flat) == ["observation.state.mean"] and flat["observation.state.mean"].dtype == np.float32
    back = unflatten_stats(flat_stats(stats))
    assert (
        back["observation.state"]["mean"].tolist() == [1.5, 2.5] and back["action"]["std"].dtype == np.float64
    )
    assert unflatten_stats({"action/mean": [1.0]}, sep="/")["action"]["mean"].tolist() == [1.0]
