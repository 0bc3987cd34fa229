"""(C) readers on the real datasets; counts and findings were checked by hand against the files
(parquet row counts with pyarrow, stats.json / episodes_stats.jsonl values, numpy over the columns)."""

from __future__ import annotations

import glob
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import InputError
from pipeline.readers.dataset import read_dataset
from pipeline.readers.scan import ScanOptions

APPLE = "rerun-io__rerun/tests/assets/lerobot"

# the scan thresholds the contract stage passes by default
OPTIONS = ScanOptions(rank_error=1e-3, dynamics_rows=50_000)


def test_lerobot_v30_record_test(real_data: Path) -> None:
    c = read_dataset(real_data / "SamueleSandrini__record-test", OPTIONS)
    assert c.kind == "lerobot_v3.0" and c.rows == 1492 and c.episodes == 4
    assert c.features["observation.state"].names[0] == "shoulder_pan.pos"
    assert c.features["action"].names == c.features["observation.state"].names
    assert sorted(c.images) == ["observation.images.front", "observation.images.top"]
    column = (
        pq.read_table(
            real_data / "SamueleSandrini__record-test/data/chunk-000/file-000.parquet", columns=["action"]
        )
        .column("action")
        .combine_chunks()
    )
    raw = column.flatten().to_numpy().reshape(-1, 6).astype(np.float64)
    np.testing.assert_allclose(c.recomputed["action"]["mean"], raw.mean(0), rtol=1e-9)
    np.testing.assert_allclose(c.recomputed["action"]["std"], raw.std(0), rtol=1e-7)
    shipped = json.loads((real_data / "SamueleSandrini__record-test/meta/stats.json").read_text())["action"]
    np.testing.assert_allclose(c.stats["action"]["mean"], shipped["mean"])
    assert c.dynamics["state"].shape == (1492, 6)
    assert (
        c.claimed["tasks"] == ["Pick the orange cube and place it in the box"]
        and c.claimed["total_tasks"] == 1
    )


def test_lerobot_v30_claims_more_frames_than_it_holds(real_data: Path) -> None:
    c = read_dataset(real_data / APPLE / "v30_apple_storage", OPTIONS)
    assert c.claimed["total_frames"] == 14983 and c.rows == 899 and c.episodes == 3
    assert c.claimed["episode_lengths_total"] == 899
    assert c.features["observation.state"].shape == (19,) and "q01" not in c.stats["action"]
    assert c.claimed["tasks"] == ["place the apple in the plate"]


def test_lerobot_v21_aggregates_episode_stats(real_data: Path) -> None:
    c = read_dataset(real_data / "YifanTian07__G1-policy-train", OPTIONS)
    assert c.kind == "lerobot_v2.1" and c.rows == 35965 and c.episodes == 100 and len(c.files) == 100
    assert (
        c.features["observation.state"].names[0] == "kLeftShoulderPitch"
    )  # names nested [[...]] in info.json
    # the pooled mean/std of 100 per-episode stats equals the stats of all the rows
    np.testing.assert_allclose(c.stats["action"]["mean"], c.recomputed["action"]["mean"], atol=1e-5)
    np.testing.assert_allclose(c.stats["action"]["std"], c.recomputed["action"]["std"], rtol=1e-3, atol=1e-6)
    assert int(c.stats["action"]["count"][0]) == 35965
    assert c.claimed["tasks"] == ["Pick up the yellow bottle on the table."]


def test_metadata_only_copies(real_data: Path) -> None:
    v21 = read_dataset(real_data / APPLE / "v21_apple_storage", OPTIONS)
    assert v21.kind == "lerobot_v2.1" and v21.rows == 0 and v21.recomputed == {}
    assert v21.claimed["episode_lengths_total"] == 899 and v21.claimed["total_frames"] == 14983
    assert int(v21.stats["action"]["count"][0]) == 899
    assert v21.claimed["tasks"] == ["place the apple in the plate"]
    v20 = read_dataset(real_data / APPLE / "apple_storage", OPTIONS)
    assert v20.kind == "lerobot_v2.0" and sorted(v20.stats["action"]) == ["max", "mean", "min", "std"]
    assert v20.stats["action"]["std"][7] == 0.0
    assert v20.claimed["episode_lengths_total"] == 899 and v20.claimed["tasks"] == [
        "place the apple in the plate"
    ]


def test_nonstandard_keys_and_degenerate_dims(real_data: Path) -> None:
    c = read_dataset(real_data / "yipiandanxinxiangyangkai__open_50", OPTIONS)
    assert c.rows == 20814 and c.episodes == 50 and len(c.files) == 50
    assert c.claimed["tasks"] == ["lingzu teleoperation"] and c.claimed["episode_lengths_total"] == 20814
    assert c.features["actions"].role == "action" and c.features["state"].role == "state"
    shipped = c.stats["actions"]
    assert np.where(shipped["std"] == 0)[0].tolist() == [*range(14, 24), 28, 31]
    assert np.where(shipped["q01"] == shipped["q99"])[0].tolist() == [28, 31]
    assert np.where(c.recomputed["actions"]["std"] == 0)[0].tolist() == [*range(14, 24), 28, 31]


def test_robosuite_hdf5(real_data: Path) -> None:
    base = real_data / "StanfordVL__robosuite/robosuite/models/assets/demonstrations"
    lift = read_dataset(base / "lift/panda/demo.hdf5", OPTIONS)
    assert lift.kind == "robosuite_hdf5" and lift.rows == 412 and lift.claimed["env"] == "Lift"
    assert lift.features["actions"].shape == (7,) and lift.features["states"].shape == (32,)
    sawyer = read_dataset(base / "SawyerLift/demo.hdf5", OPTIONS)
    assert sawyer.rows == 1058 + 837 and sawyer.episodes == 2 and "actions" not in sawyer.features
    assert "left_dpos" not in sawyer.features  # zero-width datasets are skipped
    for name, rows, width, env in (("door", 261, 23, "Door"), ("stack", 532, 45, "Stack")):
        c = read_dataset(base / name / "panda" / "demo.hdf5", OPTIONS)
        assert (c.rows, c.features["states"].shape, c.claimed["env"]) == (rows, (width,), env)


def test_npz_episode(real_data: Path) -> None:
    c = read_dataset(
        real_data / "ch33nchan__hybrid-rl/data/raw/mj_pick_place_phase_boost/episode_desc_000", OPTIONS
    )
    assert c.kind == "npz_episodes"
    assert c.features["obs_state"].shape == (9,) and c.features["actions"].shape == (4,)
    image = c.images["obs_rgb"]
    assert image["dtype"] == "uint8" and image["shape"] == [128, 128, 3] and image["frames"] == 61
    assert int(c.recomputed["obs_state"]["count"][0]) == 61 and int(c.recomputed["actions"]["count"][0]) == 60
    assert c.dynamics["state"].shape == (60, 9)
    assert c.claimed["episode_meta"]["steps"] == 60 and c.claimed["episode_meta"]["success"] is False


def test_parquet_with_a_different_schema(real_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(real_data / "SamueleSandrini__record-test", root)
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data).drop(["observation.state"])
    pq.write_table(table, data)
    with pytest.raises(
        InputError, match=r"file-000.parquet: parquet schema lacks column\(s\) \['observation.state'\]"
    ):
        read_dataset(root, OPTIONS)
    short = pa.array([[1.0, 2.0]] * table.num_rows, pa.list_(pa.float32()))
    pq.write_table(table.append_column("observation.state", short), data)
    with pytest.raises(InputError, match="column 'observation.state' has 2 values per row, info.json says 6"):
        read_dataset(root, OPTIONS)


def test_nan_and_bad_stats_json(real_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(real_data / "SamueleSandrini__record-test", root)
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["std"][2] = float("nan")
    (root / "meta/stats.json").write_text(json.dumps(stats))
    c = read_dataset(root, OPTIONS)
    assert np.isnan(c.stats["action"]["std"][2])
    (root / "meta/stats.json").write_text('{"action": {"mean": [1, 2,]}}')
    with pytest.raises(InputError, match="stats.json: invalid JSON at line 1"):
        read_dataset(root, OPTIONS)


def test_missing_and_unknown_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="dataset path does not exist"):
        read_dataset(tmp_path / "nope", OPTIONS)
    with pytest.raises(InputError, match="not a dataset this stage reads"):
        read_dataset(tmp_path, OPTIONS)
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text(json.dumps({"features": {}}))
    with pytest.raises(InputError, match="missing field 'codebase_version'"):
        read_dataset(tmp_path, OPTIONS)


def test_npz_refuses_pickle(tmp_path: Path) -> None:
    np.savez(tmp_path / "ep.npz", actions=np.zeros((5, 2)), meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError, match="would need pickle"):
        read_dataset(tmp_path, OPTIONS)


def test_manifest_glob_is_sorted(real_data: Path) -> None:
    c = read_dataset(real_data / "YifanTian07__G1-policy-train", OPTIONS)
    expected = sorted(glob.glob(str(real_data / "YifanTian07__G1-policy-train/data/chunk-000/*.parquet")))
    assert [str(real_data / "YifanTian07__G1-policy-train" / f) for f in c.files] == expected
