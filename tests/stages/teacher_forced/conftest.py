"""Fixtures for the teacher_forced tests: a small real demo (OGBench episodes, trained MLPs), the
stage run in-process on it, and the test loaders (tests/plugins/preflight_tf_models.py) importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.demo.build import build
from tests.stages.teacher_forced.helpers import SMALL

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
FAULTY = {**SMALL, "variant": "faulty", "faults": {"degrees_action_dims": [3]}}

if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build(SMALL, tmp_path_factory.mktemp("tf_demo") / "default")


@pytest.fixture(scope="session")
def faulty_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build(FAULTY, tmp_path_factory.mktemp("tf_demo") / "faulty")
