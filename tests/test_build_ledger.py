"""The guard against duplicated demo builds (tests/build_ledger.py) sees what it must see: a second
in-process build of the same settings, and a demo a launch built itself (not one seeded into it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.demo.build import build, digest, settings
from tests import build_ledger
from tests.build_ledger import LEDGER, BuildLedger

# the smallest demo the build accepts in a few seconds: one short episode, no cameras, a few steps
TINY = {"variant": "default", "seed": 5, "episodes": 1, "steps": 12, "train_steps": 3, "hidden": 8}
TINY_CFG = {**TINY, "cameras": {"size": 0}}


def test_a_second_build_of_the_same_settings_is_a_duplicate_naming_both(tmp_path: Path) -> None:
    mine = BuildLedger()
    undo = build_ledger.install(lambda: mine)
    try:
        with LEDGER.allow_rebuild():  # the session's guard would fail this test for the planted rebuild
            mine.current = "first"
            build(TINY_CFG, tmp_path / "a")
            mine.current = "second"
            build(TINY_CFG, tmp_path / "b")
            mine.current = "other settings"
            build({**TINY_CFG, "seed": 6}, tmp_path / "c")
    finally:
        undo()
    wanted = digest(settings(TINY_CFG))
    assert list(mine.built) == [wanted, digest(settings({**TINY_CFG, "seed": 6}))]
    assert len(mine.duplicates) == 1
    assert mine.duplicates[0].startswith("second (built in-process")
    assert wanted in mine.duplicates[0] and "already built by first" in mine.duplicates[0]


def test_a_launch_build_is_told_from_a_seeded_copy(tmp_path: Path) -> None:
    source = tmp_path / "built"
    with LEDGER.allow_rebuild():
        build(TINY_CFG, source / "default")
    root = tmp_path / "preflight"
    # seeded just before the launch, within the mtime's rounding of the build (a tiny demo copies fast)
    shutil.copytree(source / "default", root / "demo" / "default")
    before = build_ledger.markers(root)
    assert build_ledger.launch_builds(root, before) == []
    marker = root / "demo" / "default" / "demo.json"
    marker.write_text(marker.read_text())  # what a launch's own build leaves: the marker rewritten
    os.utime(marker, ns=(before[marker] + 1, before[marker] + 1))  # the mtime moved, even within its rounding
    assert build_ledger.launch_builds(root, before) == [(digest(settings(TINY_CFG)), "default")]
