"""Repeatability of real LeRobot ACT policies (issue 31, item 4): ACT is bitwise deterministic, and its
whole chunk (n_action_steps = chunk_size = 100 for the pack's `act_trained`) under two seeds must be
found identical, also where the stage scores only the first `horizon` steps (it compared the full
chunk with a prediction already cut to horizon 1, and called ACT seed-dependent).

Optional: runs only where `lerobot` is importable (scripts/test_lerobot.sh builds that venv)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.stages.teacher_forced import models, repeatability
from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.stages.teacher_forced.test_lerobot_policy import CHUNK, LEROBOT, tiny  # noqa: F401 (fixture)
from tests.trainers.helpers import LEROBOT_ONLY

pytestmark = LEROBOT_ONLY


def test_the_real_trained_act_is_deterministic_over_its_whole_chunk(real_data: Path):
    path = real_data / "lerobot-0.4.4/act_trained/pretrained_model"
    loaded = models.load("act", str(path), LEROBOT, "cpu", [], "stages.teacher_forced.models[act]")
    rng = np.random.default_rng(0)
    widths = {"observation.state": 11, "observation.environment_state": 4}
    batch = {k: rng.normal(size=(16, widths[k])).astype(np.float32) for k in loaded.inputs}
    first, second = (models.infer(loaded.predict, batch, 8, seed, "act") for seed in (9300, 9301))
    same = repeatability.same_outputs(first, second)
    assert same["identical"] and same["shape"] == [16, 100, 5], same
    assert np.ptp(first[:, 0], axis=0).max() > 0  # the inputs reach the output
    assert not repeatability.same_outputs(first, second[:, :1])["identical"]  # the old comparison


@pytest.mark.parametrize("horizon", [1, CHUNK])
def test_the_stage_finds_act_deterministic_at_any_horizon(tiny, horizon, tmp_path):  # noqa: F811
    specs = [{"name": "act", "path": str(tiny["policy"]), "loader": LEROBOT}]
    rows = by_id(run_stage(str(tiny["root"]), tmp_path / "run", models=specs, samples=32, horizon=horizon))
    row = rows["repeatability.act"]
    assert row.verdict == "match" and row.evidence["shape"] == [16, CHUNK, 2], row.message
