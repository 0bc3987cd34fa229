"""The one LeRobot data API on the real v2.0 / v2.1 / v3.0 datasets, plus containment and v1 stats.

Reference values come from pyarrow's own row-by-row conversion (`to_pylist`) and the metadata files,
so the vectorised path is checked against the slow obvious one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import save_file

from pipeline.errors import InputError
from pipeline.readers import LeRobotData, ScanOptions
from pipeline.readers.scan import IMAGE_FRAMES

RECORD = "SamueleSandrini__record-test"
APPLE = "rerun-io__rerun/tests/assets/lerobot"
G1 = "YifanTian07__G1-policy-train"


def test_v30_frames_equal_the_row_by_row_reference(real_data: Path) -> None:
    data = LeRobotData(real_data / RECORD)
    assert data.version == "v3.0" and data.feature_dim("action") == 6
    frames = data.frames(["action", "observation.state", "episode_index"])
    table = pq.read_table(data.root / "data/chunk-000/file-000.parquet", columns=["action", "episode_index"])
    np.testing.assert_array_equal(frames["action"], np.asarray(table.column("action").to_pylist()))
    assert frames["observation.state"].shape == (1492, 6) and frames["episode_index"].shape == (1492,)
    np.testing.assert_array_equal(frames["episode_index"], table.column("episode_index").to_numpy())
    first = data.frames(["action"], limit=3, dtype=np.float64)["action"]
    assert first.shape == (3, 6) and first.dtype == np.float64
    np.testing.assert_array_equal(first, frames["action"][:3])
    episodes = data.episodes()
    assert episodes is not None and episodes.index.tolist() == [0, 1, 2, 3] and episodes.total == 1492
    shipped = json.loads((data.root / "meta/stats.json").read_text())["action"]
    np.testing.assert_allclose(data.stats()["action"]["mean"], shipped["mean"])
    assert data.tasks() == ["Pick the orange cube and place it in the box"]


def test_v21_stats_are_aggregated_from_episode_stats(real_data: Path) -> None:
    data = LeRobotData(real_data / G1)
    assert data.version == "v2.1" and not (data.root / "meta/stats.json").exists()
    stats = data.stats()
    assert int(stats["action"]["count"][0]) == 35965
    actions = data.frames(["action"])["action"].astype(np.float64)
    assert actions.shape == (35965, data.feature_dim("action"))
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(0), atol=1e-5)
    np.testing.assert_allclose(stats["action"]["min"], actions.min(0), atol=1e-6)
    episodes = data.episodes()
    assert episodes is not None and len(episodes.index) == 100 and episodes.total == 35965


def test_v20_metadata_only(real_data: Path) -> None:
    data = LeRobotData(real_data / APPLE / "apple_storage")
    assert data.version == "v2.0" and sorted(data.stats()["action"]) == ["max", "mean", "min", "std"]
    episodes = data.episodes()
    assert episodes is not None and episodes.total == 899
    with pytest.raises(InputError, match="no parquet files"):
        data.frames(["action"])


def _tiny(root: Path) -> Path:
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    info = {"codebase_version": "v3.0", "features": {"action": {"dtype": "float32", "shape": [2]}}}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "stats.json").write_text(json.dumps({"action": {"mean": [0.0, 1.0]}}))
    table = pa.table({"action": [[1.0, 2.0], [3.0, 4.0]], "episode_index": [0, 0]})
    pq.write_table(table, root / "data" / "chunk-000" / "file-000.parquet")
    return root


def test_every_file_is_contained_symlinks_resolved(tmp_path: Path) -> None:
    root = _tiny(tmp_path / "ds")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "stats.json").write_text(json.dumps({"action": {"mean": [9.0, 9.0]}}))
    (root / "meta" / "stats.json").unlink()
    (root / "meta" / "stats.json").symlink_to(outside / "stats.json")
    with pytest.raises(InputError, match="outside the dataset root"):
        LeRobotData(root).stats()
    shutil.copy(root / "data/chunk-000/file-000.parquet", outside / "file-001.parquet")
    (root / "data" / "chunk-000" / "file-001.parquet").symlink_to(outside / "file-001.parquet")
    with pytest.raises(InputError, match="outside the dataset root"):
        LeRobotData(root).frames(["action"])
    with pytest.raises(InputError, match="outside the dataset root"):
        LeRobotData(root).file("../outside/stats.json")


def test_schema_errors_name_file_and_column(tmp_path: Path) -> None:
    root = _tiny(tmp_path / "ds")
    with pytest.raises(InputError, match=r"file-000\.parquet: parquet schema lacks column\(s\) \['state'\]"):
        LeRobotData(root).frames(["state"])
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["action"]["shape"] = [3]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(InputError, match="column 'action' has 2 values per row, info.json says 3"):
        LeRobotData(root).frames(["action"])


def test_v1_stats_safetensors(tmp_path: Path) -> None:
    root = _tiny(tmp_path / "ds")
    (root / "meta" / "stats.json").unlink()
    (root / "meta_data").mkdir()
    save_file({"action/mean": np.array([0.5, 1.5], np.float32)}, str(root / "meta_data/stats.safetensors"))
    assert LeRobotData(root).stats()["action"]["mean"].tolist() == [0.5, 1.5]
    (root / "meta_data/stats.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(InputError, match="header length 16 is larger than the file allows"):
        LeRobotData(root).stats()


def test_scan_options_come_from_the_caller() -> None:
    with pytest.raises(TypeError, match=r"lack \['dynamics_rows'\]"):
        ScanOptions.of({"rank_error": 1e-3})
    opts = ScanOptions.of({"rank_error": 0.01, "dynamics_rows": 10})
    assert opts == ScanOptions(0.01, 10, IMAGE_FRAMES)

    class Config:  # a typed stage config is read by attribute
        rank_error = 0.002
        dynamics_rows = 5

    assert ScanOptions.of(Config()) == ScanOptions(0.002, 5)


def _meta_copy(real_data: Path, name: str, out: Path) -> Path:
    """The dataset's metadata alone (what these readers look at), copied to edit."""
    shutil.copytree(real_data / name / "meta", out / "meta")
    return out


def test_a_negative_episode_length_is_named_not_judged(real_data: Path, tmp_path: Path) -> None:
    """-5 frames is no episode length: the v3.0 episodes parquet and the v2.x episodes.jsonl are refused
    naming the file and the field, before any check compares it with the data."""
    v30 = _meta_copy(real_data, RECORD, tmp_path / "v30")
    path = v30 / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    lengths = table.column("length").to_pylist()
    lengths[2] = -5
    index = table.column_names.index("length")
    pq.write_table(
        table.set_column(index, "length", pa.array(lengths, table.schema.field("length").type)), path
    )
    with pytest.raises(InputError, match=r"file-000\.parquet: column 'length' .* got -5 in row 2") as err:
        LeRobotData(v30).episodes()
    assert err.value.field == "length[2]"
    v21 = _meta_copy(real_data, APPLE + "/v21_apple_storage", tmp_path / "v21")
    lines = (v21 / "meta/episodes.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    (v21 / "meta/episodes.jsonl").write_text("\n".join([json.dumps({**first, "length": -5}), *lines[1:]]))
    with pytest.raises(InputError, match=r"episodes\.jsonl: field 'line 1\.length' .* got -5"):
        LeRobotData(v21).episodes()


@pytest.mark.parametrize("fps", [-30, float("nan"), "fast", 0])
def test_an_info_fps_that_is_no_rate_is_named(real_data: Path, tmp_path: Path, fps: object) -> None:
    from pipeline.readers.lerobot_dataset import prepare

    root = _meta_copy(real_data, RECORD, tmp_path / "d")
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "fps": fps}))
    with pytest.raises(
        InputError, match=r"info\.json: field 'fps' must be a number of frames per second > 0"
    ):
        prepare(root)
