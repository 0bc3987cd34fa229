"""The training line's `--rename_map` reaches the teacher-forced stage as lerobot's preprocessor applies
it: a policy whose cameras are `front`/`wrist`, finetuned onto a dataset that names them `top`/`hand`,
is fed each camera from the dataset key the map renames to it. With the right map the model fits as on
the original data; with the map crossed the exchanged-camera probe names the exchange; with no map the
model is a row naming the camera the dataset lacks. Real FFV1 video (PyAV), the pixel model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from pipeline.readers.rename import rename_map, sources
from pipeline.stages import StageContext
from pipeline.stages.config import typed
from pipeline.stages.teacher_forced import TeacherForcedConfig, run
from tests.stages.teacher_forced.helpers import by_id
from tests.stages.teacher_forced.pixels import CAMERAS, FRONT, LOADER, WRIST, write_dataset, write_model

TOP, HAND = "observation.images.top", "observation.images.hand"
RIGHT = {TOP: FRONT, HAND: WRIST}
CROSSED = {TOP: WRIST, HAND: FRONT}
SWAP = f"probe.base.exchanged:{FRONT}|{WRIST}"


def renamed_dataset(root: Path, names: dict[str, str]) -> Path:
    """The pixel dataset with its cameras stored under other keys."""
    write_dataset(root)
    return rename_cameras(root, names)


def rename_cameras(root: Path, names: dict[str, str]) -> Path:
    """A LeRobot v3.0 dataset's cameras moved to other keys: video folders, info.json, meta/stats.json
    and the episodes' `videos/<key>/...` and `stats/<key>/...` columns."""
    for old, new in names.items():
        (root / "videos" / old).rename(root / "videos" / new)
    for meta in ("info.json", "stats.json"):
        path = root / "meta" / meta
        if path.is_file():
            data = json.loads(path.read_text())
            if meta == "info.json":
                data["features"] = {names.get(k, k): v for k, v in data["features"].items()}
            else:
                data = {names.get(k, k): v for k, v in data.items()}
            path.write_text(json.dumps(data))
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        parts = [c.split("/") for c in table.column_names]
        columns = ["/".join(names.get(p, p) for p in part) for part in parts]
        pq.write_table(table.rename_columns(columns), path)
    return root


@pytest.fixture(scope="module")
def top_hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return renamed_dataset(tmp_path_factory.mktemp("renamed") / "data", {FRONT: TOP, WRIST: HAND})


def command(rename: dict[str, str] | None) -> list[str]:
    flags = [f"--rename_map={json.dumps(rename)}"] if rename is not None else []
    return ["lerobot-train", "--policy.path=local/act_cam", "--dataset.repo_id=local/top_hand", *flags]


def run_with(
    dataset: Path, tmp_path: Path, rename: dict[str, str] | None, model: dict | None = None, **overrides
) -> dict:
    path = write_model(tmp_path / "base", list(CAMERAS), **(model or {}))
    models = [{"name": "base", "path": path, "loader": LOADER}]
    config = typed(TeacherForcedConfig, {"models": models, "samples": 96, "plots": False, **overrides}, "tf")
    cfg = OmegaConf.create(
        {"dataset": {"path": str(dataset)}, "stages": {}, "training": {"command": command(rename)}}
    )
    return by_id(run(cfg, StageContext(run_dir=tmp_path / "run", stage="teacher_forced", config=config)))


def test_the_right_map_feeds_each_policy_camera_from_its_renamed_dataset_camera(top_hand, tmp_path):
    rows = run_with(top_hand, tmp_path, RIGHT)
    assert "input.base" not in rows
    assert rows[SWAP].verdict == "match", rows[SWAP].message  # the exchange does not fit better
    assert not [k for k, r in rows.items() if r.blocking], {k: r.message for k, r in rows.items()}
    told = rows["rename_map.base"]
    assert told.verdict == "match" and "tells the renamed cameras apart" in told.message
    assert told.evidence["fed"] == {FRONT: TOP, WRIST: HAND}


def test_the_crossed_map_is_named_by_the_exchange_probe_under_the_map(top_hand, tmp_path):
    rows = run_with(top_hand, tmp_path, CROSSED)
    assert rows[SWAP].verdict == "mismatch" and rows[SWAP].severity == "hard", rows[SWAP].message
    assert f"{FRONT} and {WRIST} exchanged" in rows[SWAP].message
    said = rows["rename_map.base"]
    assert (said.verdict, said.severity) == ("mismatch", "soft") and "feeds cameras crossed" in said.message


def test_a_model_that_cannot_tell_the_cameras_apart_leaves_a_soft_row_saying_so(top_hand, tmp_path):
    rows = run_with(top_hand, tmp_path, RIGHT, model={"blind": [0, 1]})  # its cameras move no action dim
    said = rows["rename_map.base"]
    assert (said.verdict, said.severity) == ("mismatch", "soft") and "no stage could tell" in said.message
    assert f"{FRONT} <- {TOP}" in said.message


def test_without_the_probe_the_map_is_said_to_be_unchecked(top_hand, tmp_path):
    said = run_with(top_hand, tmp_path, CROSSED, probe_models=[])["rename_map.base"]
    assert (said.verdict, said.severity) == ("mismatch", "soft") and "did not run" in said.message


def test_without_the_map_the_model_is_a_row_naming_the_camera_the_dataset_lacks(top_hand, tmp_path):
    rows = run_with(top_hand, tmp_path, None, probe_models=[])
    assert rows["input.base"].verdict == "mismatch"
    assert f"{FRONT}: no such camera" in rows["input.base"].message


def test_a_map_naming_a_key_the_dataset_lacks_says_which_dataset_key_was_looked_for(top_hand, tmp_path):
    rows = run_with(top_hand, tmp_path, {"observation.images.side": FRONT, HAND: WRIST}, probe_models=[])
    message = rows["input.base"].message
    assert f"{FRONT} (the dataset's observation.images.side, by the rename map): no such camera" in message


def test_the_map_comes_from_the_command_else_from_the_training_config(tmp_path):
    cfg = OmegaConf.create({"training": {"command": command(RIGHT)}})
    assert rename_map(cfg) == RIGHT and sources(RIGHT) == {FRONT: TOP, WRIST: HAND}
    (tmp_path / "train_config.json").write_text(json.dumps({"policy": {}, "rename_map": CROSSED}))
    path = str(tmp_path / "train_config.json")
    assert rename_map(OmegaConf.create({"training": {"path": path}})) == CROSSED
    assert rename_map(OmegaConf.create({"training": {"command": command(None)}})) == {}
