"""Goal frames under the frames' calibrated tolerance: another driver's noise (+/-1-2 levels per channel,
PSNR ~57 dB) on goals and frames clears, and a goal showing another state still blocks.

Faults and noise are planted in a copy of the clean demo's cache with numpy; the re-render side is real
MuJoCo rendering (64 px).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.record.records import Check
from pipeline.stages.render_cache import budget, rows
from pipeline.stages.render_cache.partial import Renderers, episode_range
from pipeline.stages.render_cache.tolerance import compare
from tests.stages.render_cache.helpers import config

FRAMES, GOALS = "pix_b0002_frames.npy", "pix_b0002_goals.npy"


def _run(root: Path, rs: Renderers, **overrides: object) -> dict[str, Check]:
    """budget 2 (2 episodes, 8 rows, every one sampled) checked as the stage does; its rows by id."""
    cfg = config(budgets=[2], **overrides)
    got = rows.merge([episode_range(cfg, root / "release", root / "cache", 2, (0, 1), rs)])
    facts = budget.facts(cfg, root / "release", root / "cache", 2)
    return {c.id.removeprefix("render_cache."): c for c in rows.budget_rows(cfg, 2, facts, got)}


def _driver_noise(frames: np.ndarray, seed: int) -> np.ndarray:
    """+/-1 or 2 levels on 3 % of the values, each channel rounded on its own, independently per row."""
    rng = np.random.default_rng(seed)
    out = frames.astype(np.int16)
    hit = rng.random(frames.shape) < 0.03
    out[hit] += rng.choice([-2, -1, 1, 2], size=int(hit.sum()))
    return np.clip(out, 0, 255).astype(np.uint8)


@pytest.mark.render
def test_driver_noise_on_goals_and_frames_clears(clean_demo: Path, tmp_path: Path, rs: Renderers) -> None:
    root = tmp_path / "d"
    shutil.copytree(clean_demo, root)
    goals = np.load(root / "cache" / GOALS)
    noisy = _driver_noise(goals, 1)
    assert 50 < compare(goals[0], noisy[0])["psnr_db"] < 65 and not np.array_equal(noisy[0], noisy[1])
    np.save(root / "cache" / GOALS, noisy)
    np.save(root / "cache" / FRAMES, _driver_noise(np.load(root / "cache" / FRAMES), 2))
    found = _run(root, rs)
    goal = found["goals.terminal.b2"]
    assert goal.verdict == "match", goal.message
    assert goal.evidence["max_abs_pixel_diff"] == 2 and goal.evidence["tolerance"]["pixel"] == 2
    assert "2/2 episodes" in goal.message and "0 exact" in goal.message
    assert found["frames.b2.rerender"].verdict == "match", found["frames.b2.rerender"].message
    tight = _run(root, rs, tolerance={"pixel": 1}, diagnosis={"frames": 0})["goals.terminal.b2"]
    assert tight.verdict == "mismatch" and tight.blocking  # the same noise outside a tighter band


@pytest.mark.render
@pytest.mark.parametrize("fault", ["other_episode", "last_cached_row", "one_row"])
def test_a_goal_of_another_state_blocks_under_the_same_noise(
    clean_demo: Path, tmp_path: Path, rs: Renderers, fault: str
) -> None:
    root = tmp_path / "d"
    shutil.copytree(clean_demo, root)
    goals, frames = np.load(root / "cache" / GOALS), np.load(root / "cache" / FRAMES)
    if fault == "other_episode":  # episode 1's goal on episode 0's rows
        goals[0:4] = goals[4]
    elif fault == "last_cached_row":  # the goal rendered from the row before the terminal state
        goals[4:8] = frames[7]
    else:  # one row's goal from the other episode
        goals[6] = goals[0]
    np.save(root / "cache" / GOALS, _driver_noise(goals, 3))
    row = _run(root, rs)["goals.terminal.b2"]
    assert row.verdict == "mismatch" and row.blocking, row.message
    bad = "episode-0000" if fault == "other_episode" else "episode-0001"
    assert "1/2 episodes" in row.message and bad in row.message, row.message
    assert row.evidence["outside"][0][0].startswith(bad) and row.evidence["max_abs_pixel_diff"] > 20
