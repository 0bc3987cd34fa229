"""The alignment rows (issue 34) on real lossy video written here with PyAV (H.264 and AV1) in both LeRobot
layouts: a fixed camera watching the arm and a wrist camera moving with it, each lagging or leading the
state, an episode holding its neighbour's frames (v2.x: the neighbour's file; v3.0: from/to_timestamp off
by one episode), clean cases, and the inputs that cannot be measured."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.stages.contract.alignment import alignment_rows
from tests.stages.contract.alignment_data import FIXED, WRIST, Faults, by_id, sources, write
from tests.stages.contract.helpers import STAGE_CFG

LAYOUTS = [("v2.1", "libx264"), ("v2.1", "libsvtav1"), ("v3.0", "libx264"), ("v3.0", "libsvtav1")]


def rows(root: Path, cfg: object = STAGE_CFG) -> dict:
    return by_id(alignment_rows(sources(root, cfg)))


@pytest.mark.parametrize("version,codec", [LAYOUTS[0], LAYOUTS[3]])
def test_clean_cameras_are_in_step(tmp_path: Path, version: str, codec: str) -> None:
    write(tmp_path, version, codec)
    found = rows(tmp_path)
    assert {r.verdict for r in found.values()} == {"match"}, {k: r.message for k, r in found.items()}
    if version == "v3.0":  # every boundary inside the shared file shows its reset on from_timestamp
        for key in (FIXED, WRIST):  # (a reset that happens to return the arm near where it was: no jump)
            ev = found[f"frames.boundaries:{key}"].evidence
            assert ev["off"] == {} and len(ev["on"]) >= 2 and sorted(ev["on"] + ev["no_jump"]) == [1, 2, 3]
    else:
        assert f"frames.boundaries:{FIXED}" not in found  # one file per episode: no boundary inside one
    lag = found[f"frames.lag:{FIXED}"]
    assert lag.evidence["peak_lag"] == 0 and lag.evidence["r_at_0"] > 0.8
    assert lag.evidence["episodes_frames"] and lag.evidence["thresholds"]["max_lag"] == 5


@pytest.mark.parametrize("version,codec", LAYOUTS)
def test_lagging_fixed_and_leading_wrist_camera_are_hard_rows(
    tmp_path: Path, version: str, codec: str
) -> None:
    write(tmp_path, version, codec, Faults(lag={FIXED: 3, WRIST: -2}))
    found = rows(tmp_path)
    fixed, wrist = found[f"frames.lag:{FIXED}"], found[f"frames.lag:{WRIST}"]
    assert (fixed.verdict, fixed.severity, fixed.actual) == ("mismatch", "hard", 3)
    assert "lags the state by 3 frame(s) (0.300 s)" in fixed.message and "margin 0.1" in fixed.message
    assert (wrist.verdict, wrist.actual) == ("mismatch", -2) and "leads the state by 2" in wrist.message
    assert fixed.evidence["bootstrap"]["interval_90"] == [3, 3]
    assert found[f"frames.episode_frames:{FIXED}"].verdict == "match"


@pytest.mark.parametrize("version,codec", LAYOUTS)
def test_episode_holding_its_neighbours_frames_is_named(tmp_path: Path, version: str, codec: str) -> None:
    write(tmp_path, version, codec, Faults(neighbour=1))
    found = rows(tmp_path)
    for key in (FIXED, WRIST):
        row = found[f"frames.episode_frames:{key}"]
        assert (row.verdict, row.severity) == ("mismatch", "hard")
        assert "episode 1 holds episode 2's frames" in row.message and row.actual == {"1": 2}
        assert found[f"frames.lag:{key}"].verdict == "match"  # the other episodes still set the lag at 0


def test_camera_not_following_the_robot_is_a_soft_row(tmp_path: Path) -> None:
    write(tmp_path, "v3.0", "libx264", Faults(unrelated=FIXED))
    found = rows(tmp_path)
    row = found[f"frames.lag:{FIXED}"]
    assert (row.verdict, row.severity) == ("unverifiable", "soft")
    assert "follows the state at no lag in -5..5" in row.message and "r >= 0.3" in row.message
    assert f"frames.episode_frames:{FIXED}" not in found
    assert found[f"frames.lag:{WRIST}"].verdict == "match"


def test_still_camera_short_episodes_and_short_video_are_unverifiable(tmp_path: Path) -> None:
    write(tmp_path / "still", "v2.1", "libx264", Faults(still=WRIST))
    row = rows(tmp_path / "still")[f"frames.lag:{WRIST}"]
    assert row.verdict == "unverifiable" and "still camera" in row.message
    write(tmp_path / "short", "v3.0", "libx264", n=10)
    row = rows(tmp_path / "short")[f"frames.lag:{FIXED}"]
    assert row.verdict == "unverifiable" and "10 frames < 2*max_lag+1 = 11" in str(row.evidence["skipped"])
    write(tmp_path / "cut", "v2.1", "libx264")
    for e in range(4):
        path = tmp_path / f"cut/videos/chunk-000/{WRIST}/episode_{e:06d}.mp4"
        path.write_bytes(path.read_bytes()[:600])  # the camera's videos end long before their rows
    found = rows(tmp_path / "cut")
    assert found[f"frames.lag:{WRIST}"].verdict == "unverifiable"
    assert "episode_000000.mp4" in str(found[f"frames.lag:{WRIST}"].evidence["skipped"])
    assert found[f"frames.lag:{FIXED}"].verdict == "match"


def test_every_threshold_comes_from_the_config(tmp_path: Path) -> None:
    write(tmp_path, "v3.0", "libx264", Faults(lag={FIXED: 3}))
    narrow = replace(STAGE_CFG, frames=replace(STAGE_CFG.frames, max_lag=2))
    row = rows(tmp_path, narrow)[f"frames.lag:{FIXED}"]
    assert row.verdict == "match" or abs(row.actual) <= 2
    assert "lags -2..2" in row.message and row.evidence["thresholds"]["max_lag"] == 2


@pytest.mark.parametrize("codec", ["libx264", "libsvtav1"])
def test_reset_jumps_off_their_from_timestamp_are_named(tmp_path: Path, codec: str) -> None:
    """v3.0: episode 1's span starts 2 frames early (its first frames are episode 0's), episode 2's 3 late."""
    write(tmp_path, "v3.0", codec, Faults(span_shift={1: -2, 2: 3}))
    found = rows(tmp_path)
    for key in (FIXED, WRIST):
        row = found[f"frames.boundaries:{key}"]
        assert (row.verdict, row.severity, row.actual) == ("mismatch", "hard", {"1": 2, "2": -3}), row.message
        assert "episode 1: the reset jump lies 2 frame(s) after its from_timestamp" in row.message
        assert "episode 2: the reset jump lies 3 frame(s) before" in row.message and "2.0x" in row.message


def test_boundaries_without_a_reset_jump_decide_nothing_and_block_nothing() -> None:
    """A recording that runs on through its resets (no clear jump at any sampled boundary: a small demo,
    a fixed camera over a scene reset by hand) places no boundary: informational, not `unverifiable`,
    which the gate blocks on by default. Boundaries that could not be decoded at all stay unverifiable."""
    from pipeline.stages.contract.boundaries import _row
    from pipeline.stages.contract.config import FramesConfig

    quiet = {"on": [], "off": {}, "no_jump": [3, 7, 11], "skipped": {}}
    row = _row(FramesConfig(), FIXED, quiet)
    assert (row.verdict, row.severity, row.evidence["informational"]) == ("match", "soft", True), row.message
    assert "3 without a clear jump" in row.message
    failed = {"on": [], "off": {}, "no_jump": [], "skipped": {"3": "camera x, episode 3: no frame decoded"}}
    assert _row(FramesConfig(), FIXED, failed).verdict == "unverifiable"
