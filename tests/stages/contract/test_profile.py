"""The dataset profile on real data: what each dim is (open_50 pads unused hand joints with constants,
holds its hand joints at their limits; SO-101's gripper), written as the contract's artifacts, and the
record's section built from them, apart from the findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.readers.dataset import read_dataset
from pipeline.record.profile_md import profile_section
from pipeline.record.records import StageResult
from pipeline.stages.contract import scan_options, sides
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.profile import SCHEMA, write_profile
from pipeline.stages.contract.rows import Sources
from tests.conftest import REAL_DATA

OPEN50 = REAL_DATA / "yipiandanxinxiangyangkai__open_50"
KEYS = {"feature", "dim", "name", "kind", "levels", "min", "max", "at_limits", "held_longest", "step_p50"}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if not OPEN50.is_dir():
        pytest.skip(f"real dataset not found: {OPEN50}")
    config = ContractConfig()
    c = read_dataset(str(OPEN50), scan_options(config))
    a, b = sides.dataset_alone(c)
    return write_profile(tmp_path_factory.mktemp("profile"), Sources(a, b, c, config))


def test_the_profile_says_what_each_dim_is(written: dict[str, str]) -> None:
    doc = json.loads(Path(written["profile"]).read_text())
    assert doc["schema"] == SCHEMA and doc["episodes"] == 50
    rows = {(r["feature"], r["dim"]): r for r in doc["rows"]}
    assert len(rows) == 2 * 34 and all(KEYS <= set(r) for r in rows.values())
    padding = rows[("state", 14)]  # left_hand.joint_1.pos: never moves anywhere
    assert padding["kind"] == "constant" and padding["at_limits"] == 1.0 and padding["min"] == padding["max"]
    hand = rows[("state", 25)]  # right_hand.joint_2.pos: at its max in 95 % of the rows
    assert hand["name"] == "right_hand.joint_2.pos" and hand["at_limits"] > 0.9
    arm = rows[("state", 0)]
    assert arm["kind"] == "continuous" and arm["levels"] is None and 0 <= arm["step_p50"] <= arm["step_p99"]
    assert Path(written["profile_plot"]).read_bytes()[:4] == b"\x89PNG"


def test_the_record_shows_the_profile_apart_from_findings(written: dict[str, str]) -> None:
    result = StageResult.from_checks("contract", [], artifacts=written)
    lines = profile_section((result,), lambda name, path: f"![{name}]({path})")
    assert lines[0] == "## Dataset profile"
    assert any("`state` | 14 (left\\_hand.joint\\_1.pos) | constant" in line for line in lines)
    assert f"![profile_plot]({written['profile_plot']})" in lines


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    head = Path(path).read_bytes()[16:24]
    return int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")


def test_a_4000_dim_state_gets_plots_of_a_bounded_size(tmp_path: Path) -> None:
    """The profile plot would ask for a 72,300 px wide figure and the range plot for one 100,000 px high
    (a MemoryError in the contract stage); both stay bounded, and the range plot says what it shows."""
    import numpy as np

    from pipeline.stages.contract import plots
    from pipeline.stages.contract.plots import profile_plot

    rows = [
        {
            "feature": "observation.state",
            "dim": d,
            "kind": "continuous",
            "at_limits": 0.1,
            "held_share_p50": 0.2,
        }
        for d in range(4000)
    ]
    width, height = _png_size(profile_plot(tmp_path / "profile.png", rows))
    assert width <= 3000 and height <= 400
    stats = {k: np.linspace(0, 1, 4000) + i for i, k in enumerate(("lo", "mean", "hi"))}
    assert plots.shown_dims(4000, {3999, 7})[:3] == [0, 1, 2] and 3999 in plots.shown_dims(4000, {3999})
    width, height = _png_size(plots.range_plot(tmp_path / "r.png", stats, stats, {3999}))
    assert width <= 800 and height <= 80 * (1.6 + 0.32 * plots.MAX_DIMS) + 1
