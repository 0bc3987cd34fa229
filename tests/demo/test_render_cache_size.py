"""Issue 26: `demo.render_cache.size` is the size the demo cache holds (it used to always be 64 px)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.demo import render_cache as demo
from pipeline.stages.render_cache.render import EvalRenderer

pytestmark = pytest.mark.render


def test_demo_renders_states_at_the_configured_size() -> None:
    size = 32  # not the env's own 64-px observation: the case that used to write 64 px
    with EvalRenderer(demo.ENV_ID, demo.TASK_ID, size, demo.CAMERA, "egl") as er:
        source = demo._at_size(er, size)
        qpos = er.data.qpos.copy()
        qvel = np.zeros_like(er.data.qvel)
        episode = {"qpos": np.stack([qpos, qpos]), "qvel": np.stack([qvel, qvel])}
        frames, goals = demo.render_states(source, [episode], [0], 1, {})
    assert frames.shape == (1, size, size, 3) and goals.shape == (1, size, size, 3)
    assert demo.stage_overrides({"size": size})["size"] == size
