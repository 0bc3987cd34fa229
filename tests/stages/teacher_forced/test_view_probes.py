"""The probes for what image stats cannot see (issue 34): a camera stored upside down or mirrored, and a
camera recorded late, named by the rotated / flipped / shifted alternative under the same rule as the
others (Bonferroni level, margin); a clean dataset keeps none. Real FFV1 video written with PyAV, the
deterministic pixel model reading each camera's channel means and halves, through the real loader path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.stages.teacher_forced.pixels import CAMERAS, FRONT, LOADER, WRIST, write_dataset, write_model


def _kept(tmp_path: Path, **planted: object) -> tuple[set[str], dict]:
    data = write_dataset(tmp_path / "data", spatial=True, **planted)  # type: ignore[arg-type]
    model = write_model(tmp_path / "models/base", list(CAMERAS), spatial=True)
    models = [{"name": "base", "path": model, "loader": LOADER}]
    rows = by_id(run_stage(str(data), tmp_path / "run", plots=False, models=models, samples=96))
    probes = {k.removeprefix("probe.base."): r for k, r in rows.items() if k.startswith("probe.base.")}
    return {k for k, r in probes.items() if r.verdict == "mismatch" and r.severity == "hard"}, probes


def test_a_clean_dataset_keeps_no_view_or_time_alternative(tmp_path: Path) -> None:
    hard, probes = _kept(tmp_path)
    assert hard == set()
    summary = probes["vectors"]
    assert "vector/target/view/time alternative(s) not kept" in summary.message
    assert summary.evidence["not_kept"] >= 2 * (4 + 10)  # per camera: 4 views, shifts -5..-1 and 1..5


@pytest.mark.parametrize("how", ["rotated180", "flipped_lr", "flipped_ud"])
def test_a_camera_stored_upside_down_or_mirrored_is_named(tmp_path: Path, how: str) -> None:
    hard, probes = _kept(tmp_path, stored_as={FRONT: how})
    assert hard == {f"{how}:{FRONT}"}
    assert "error drops" in probes[f"{how}:{FRONT}"].message


def test_a_camera_recorded_late_is_named_with_its_lag(tmp_path: Path) -> None:
    """Frame t shows row t-2: the frames 2 rows later are the ones the model was trained with."""
    hard, probes = _kept(tmp_path, lag={WRIST: 2})
    assert hard == {f"shifted:{WRIST}[+2]"}
    message = probes[f"shifted:{WRIST}[+2]"].message
    assert f"{WRIST}'s frames 2 row(s) later (the camera lags the state by 2 frame(s))" in message
