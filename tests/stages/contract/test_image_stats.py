"""Grey cameras and stale image stats (issue 34) from the frames decoded by `frame_rows`, on real lossy
video written here with PyAV (H.264, AV1) in both LeRobot layouts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.stages.contract.frames import frame_rows
from tests.stages.contract.alignment_data import (
    FIXED,
    WRIST,
    Faults,
    by_id,
    image_stats,
    sources,
    write,
    write_stats,
)

CASES = [("v2.1", "libx264"), ("v3.0", "libsvtav1")]


@pytest.mark.parametrize("version,codec", CASES)
def test_grey_camera_where_the_base_saw_colour_is_hard(tmp_path: Path, version: str, codec: str) -> None:
    colour = write(tmp_path / "colour", version, codec)
    base = {k: image_stats(v) for k, v in colour.items()}
    write(tmp_path / "grey", version, codec, Faults(grey=FIXED))
    found = by_id(frame_rows(sources(tmp_path / "grey", base=base)))
    row = found[f"frames.grey:{FIXED}"]
    assert (row.verdict, row.severity, row.actual) == ("mismatch", "hard", "grey")
    assert "grey camera where the base was trained on colour" in row.message and "grey <= 3.0" in row.message
    assert found[f"frames.grey:{WRIST}"].verdict == "match"
    clean = by_id(frame_rows(sources(tmp_path / "colour", base=base)))
    assert clean[f"frames.grey:{FIXED}"].verdict == "match"


@pytest.mark.parametrize("version,codec", CASES)
def test_stale_image_stats_past_a_quarter_std_are_hard(tmp_path: Path, version: str, codec: str) -> None:
    frames = write(tmp_path, version, codec)
    base = {k: image_stats(v) for k, v in frames.items()}
    write_stats(tmp_path, {FIXED: image_stats(frames[FIXED], shift=0.1), WRIST: image_stats(frames[WRIST])})
    found = by_id(frame_rows(sources(tmp_path, base=base)))
    stale, fresh = found[f"frames.stale_stats:{FIXED}"], found[f"frames.stale_stats:{WRIST}"]
    assert (stale.verdict, stale.severity) == ("mismatch", "hard"), stale.message
    assert stale.evidence["gap_in_std"] > 0.25 and "hard past 0.25 std" in stale.message
    assert f"{stale.evidence['gap_in_std']:.2f} std of the base's image std" in stale.message
    assert stale.evidence["episodes_frames"]
    assert (fresh.verdict, fresh.severity) == ("match", "soft"), fresh.message
