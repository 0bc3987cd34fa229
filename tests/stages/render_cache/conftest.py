"""Tiny render_cache demos built once per session (real MuJoCo rendering, ~10-15 frames each)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROBE = (
    "import mujoco; m = mujoco.MjModel.from_xml_string("
    "'<mujoco><worldbody><geom size=\"1\"/></worldbody></mujoco>');"
    "r = mujoco.Renderer(m, 8, 8); r.update_scene(mujoco.MjData(m)); r.render(); r.close()"
)
CLEAN = {"episodes": 2, "steps": 4, "budgets": [1, 2], "hires": 0, "raw_frames": 0}
FAULTY = {
    "variant": "faulty",
    "episodes": 3,
    "steps": 3,
    "budgets": [2, 3],
    "hires": 0,
    "raw_frames": 0,
    "faults": {"non_prefix": True, "shift_row": 4, "camera_row": 7},
}


@pytest.fixture(scope="session")
def gl() -> None:
    """Skip rendering tests where no offscreen GL context can be made (MUJOCO_GL=egl)."""
    env = {**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"no EGL context for MuJoCo (MUJOCO_GL=egl): {proc.stderr.strip()[-300:]}")


@pytest.fixture(scope="session")
def clean_demo(gl: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.demo.render_cache import build

    out = tmp_path_factory.mktemp("rc_clean")
    build(CLEAN, out)
    return out


@pytest.fixture(scope="session")
def faulty_demo(gl: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipeline.demo.render_cache import build

    out = tmp_path_factory.mktemp("rc_faulty")
    build(FAULTY, out)
    return out


@pytest.fixture(scope="session")
def clean_checks(clean_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> list:
    """The clean demo checked unsharded, once for the session: its rows are asserted one by one
    (test_render_stage.py) and are what the local executor's sharded merge must equal
    (test_launch_array.py): one check instead of two (an env, a renderer, ~12 renders)."""
    from pipeline.stages.render_cache import check
    from tests.stages.render_cache.helpers import config

    out = tmp_path_factory.mktemp("rc_unsharded")
    checks, _ = check(config(budgets=[1, 2]), clean_demo / "release", clean_demo / "cache", None, out)
    return checks


@pytest.fixture(scope="session")
def rs(gl: None) -> Iterator[Any]:
    """One `Renderers` for the session's tests on the clean demo and its copies, which keep the clean
    demo's release states: its memo (a frame per archive file, row, pairing and size) stays true for all
    of them. Its renderer and state env are made once (each an OGBench env: two model compiles), not
    once per test or module; a test on other states (the faulty demo) makes its own."""
    from pipeline.stages.render_cache.partial import Renderers
    from tests.stages.render_cache.helpers import config

    renderers = Renderers(config(budgets=[2]))
    yield renderers
    renderers.close()
