"""tests/in_process_launch.py: a launch run in the test's process leaves the process as it found it, so
the next test (or launch) sees what a fresh `python -m pipeline.launch` would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline import stages
from tests.in_process_launch import launch_here


def test_an_in_process_launch_restores_the_process_and_unregisters_its_plugin(tmp_path: Path) -> None:
    before = (os.getcwd(), list(sys.argv), list(sys.path), os.environ.get("PYTHONPATH"), set(stages.load()))
    overrides = ("launcher=local", "~demo", "plugins=[preflight_typed_stage]", "+stages.typed.limit=-1")
    for _ in range(2):  # the second launch imports and registers the plugin again, as its own process would
        proc = launch_here(tmp_path, *overrides)
        assert proc.returncode == 2 and "stages.typed.limit" in proc.stdout, proc.stdout + proc.stderr
    after = (os.getcwd(), list(sys.argv), list(sys.path), os.environ.get("PYTHONPATH"), set(stages.load()))
    assert after == before and "typed" not in after[-1]
    assert "preflight_typed_stage" not in sys.modules
