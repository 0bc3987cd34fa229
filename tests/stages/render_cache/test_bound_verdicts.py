"""Sampling changes the verdict: 0 mismatches is `match` only when every row was re-rendered or the
Clopper-Pearson bound lies below max_mismatch_rate; and the sample reaches every episode first."""

from __future__ import annotations

import numpy as np

from pipeline.stages.config import typed
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.rows import frame_rows
from pipeline.stages.render_cache.stats import sample_rows, sample_size

CFG = typed(RenderCacheConfig, {}, "stages.render_cache")


def exact(rows: list[int]) -> list[dict]:
    return [{"row": j, "class": "exact", "max_abs": 0, "mean_abs": 0.0} for j in rows]


def test_zero_mismatches_in_a_small_sample_of_a_large_budget_is_unverifiable_saying_how_many():
    rerender = frame_rows(CFG, "frames.b", "frames", exact(list(range(64))), 64, population=200_000)[0]
    assert rerender.verdict == "unverifiable"
    assert "sample 598 frames" in rerender.message and rerender.evidence["exhaustive"] is False


def test_every_row_checked_or_a_bound_below_the_rate_is_match():
    whole = frame_rows(CFG, "frames.b", "frames", exact(list(range(40))), 64, population=40)[0]
    assert whole.verdict == "match" and whole.evidence["exhaustive"] is True
    n = sample_size(200_000, None, CFG.max_mismatch_rate, CFG.confidence)
    bounded = frame_rows(CFG, "frames.b", "frames", exact(list(range(n))), 64, population=200_000)[0]
    assert bounded.verdict == "match" and bounded.evidence["mismatch_rate_upper_bound"] < 0.005


def test_a_sample_reaches_every_episode_before_a_second_frame_of_any():
    starts = np.arange(0, 1000, 50)  # 20 episodes of 50 rows
    rows = sample_rows(1000, 25, seed=3, starts=starts)
    assert len(rows) == 25 and len(set((rows // 50).tolist())) == 20
