"""The health facts of one pass do not depend on where the blocks are cut or on which kernel ran: an
episode cut by a block boundary carries its last row, timestamp and open runs into the next block."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.readers import health_kernel, sketch_kernel
from pipeline.readers.health import HealthScan
from pipeline.readers.lerobot_data import LeRobotData
from tests.stages.contract.health_faults import DATASETS

COLUMNS = ["observation.state", "action", "episode_index", "timestamp", "frame_index", "index"]
pytestmark = pytest.mark.skipif(not DATASETS["v3.0"].is_dir(), reason=f"{DATASETS['v3.0']} not found")


def facts(cols: dict[str, np.ndarray], cuts: list[int]) -> dict:
    scan = HealthScan({"observation.state": 6, "action": 6}, fps=30.0)
    edges = [0, *cuts, len(cols["index"])]
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        scan.observe({k: v[a:b] for k, v in cols.items()})
    return scan.facts()


def same(a: dict, b: dict) -> None:
    assert a["rows"] == b["rows"] and a["order"] == b["order"] and a["index_breaks"] == b["index_breaks"]
    for key in a["diff_std"]:
        np.testing.assert_allclose(a["diff_std"][key], b["diff_std"][key], rtol=1e-5)
        for side in ("low", "high"):
            for field in ("value", "count", "episode", "frame"):
                np.testing.assert_allclose(a[side][key][field], b[side][key][field])
    assert set(a["episodes"]) == set(b["episodes"])
    for name, column in a["episodes"].items():
        if column.dtype.kind in "fi":
            np.testing.assert_allclose(column, b["episodes"][name], rtol=1e-5, err_msg=name)
        else:
            assert column.tolist() == b["episodes"][name].tolist(), name


@pytest.fixture(scope="module")
def columns() -> dict[str, np.ndarray]:
    cols = LeRobotData(DATASETS["v3.0"]).frames(COLUMNS)
    cols["action"][400:460] = cols["action"][400]  # a frozen stretch across a cut
    cols["timestamp"][500] -= 1.0  # time running back right after a cut
    cols["observation.state"][999, 2] += 500.0  # a one-sample spike on a block's last row
    return cols


def test_cut_blocks_give_the_facts_of_one_block(columns: dict[str, np.ndarray]) -> None:
    whole = facts(columns, [])
    cut = facts(columns, [1, 137, 373, 374, 430, 500, 1000, 1491])
    same(whole, cut)
    assert whole["episodes"]["backwards"].tolist() == [0, 1, 0, 0]
    # the spike is named at its own frame although its step back lies in the next block
    episode = int(np.flatnonzero(whole["episodes"]["index"] == columns["episode_index"][999])[0])
    bounce = whole["episodes"]["observation.state/bounce"][episode]
    assert int(np.argmax(bounce)) == 2 and bounce[2] > 400
    assert whole["episodes"]["observation.state/bounce_at"][episode][2] == columns["frame_index"][999]


def test_numpy_fallback_gives_the_numba_kernels_facts(
    columns: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not sketch_kernel.AVAILABLE:
        pytest.skip("numba not installed: only the numpy kernel runs")
    compiled = facts(columns, [137, 430])
    monkeypatch.setattr(sketch_kernel, "HAVE_NUMBA", False)
    fallback = facts(columns, [137, 430])
    same(compiled, fallback)
    assert health_kernel._COMPILED  # the first run really was the compiled loop


NPZ = (
    DATASETS["v3.0"].parent
    / "ch33nchan__hybrid-rl/data/raw/mj_pick_place_phase_boost/episode_desc_000/trajectory.npz"
)


@pytest.mark.skipif(not NPZ.is_file(), reason=f"{NPZ} not found")
def test_an_npz_episode_whose_features_differ_in_length_is_followed_on_the_rows_they_share() -> None:
    from pipeline.readers.dataset import read_dataset

    found = read_dataset(str(NPZ), {"rank_error": 0.01, "dynamics_rows": 100, "health_episodes": 10}).health
    shortest = min(len(v) for v in np.load(NPZ).values() if v.ndim >= 1 and len(v) > 1)
    assert found["episodes"]["index"].tolist() == [0] and 0 < found["rows"] <= shortest
