"""The episodes that are trained on: with `dataset.episodes` in the training config (or
`--dataset.episodes` on the lerobot-train line, which the launch composes into it) the episode and time
rows judge those episodes; the stats rows still judge the shipped stats against the whole dataset. On a
copy of real LeRobot v3.0 data (record-test, 4 episodes) with a planted fault."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.errors import InputError
from pipeline.readers import read_training
from pipeline.readers.lerobot_command import compose_training, parse
from pipeline.record.records import Check
from tests.stages.contract.health_faults import planted
from tests.stages.contract.test_clean_corpus import rows_of

DUPLICATES = "contract.health.episodes.duplicates"
MODES = {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"}


def training(out: Path, episodes: object) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "training.yaml"
    config = {"policy": {"type": "act", "chunk_size": 10, "normalization_mapping": MODES}}
    path.write_text(yaml.safe_dump({**config, "dataset": {"episodes": episodes}}))
    return path


def checked(dataset: Path, config: Path) -> dict[str, Check]:
    """The contract stage's rows for this dataset and training config, as the job computes them."""
    return {c.id: c for c in rows_of({"dataset": {"path": str(dataset)}, "training": {"path": str(config)}})}


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Episode 2 replaced by a copy of episode 1."""
    dataset, expected = planted("v3.0", "duplicate", tmp_path_factory.mktemp("dup") / "data")
    assert expected == {"groups": [[1, 2]]}
    return dataset


def test_a_duplicate_outside_the_trained_episodes_raises_no_duplicate_row(
    duplicated: Path, tmp_path: Path
) -> None:
    rows = checked(duplicated, training(tmp_path, [0, 1, 3]))
    row = rows[DUPLICATES]
    assert row.verdict == "match", row.message
    assert row.evidence["untrained_groups"] == [[1, 2]]
    assert "judged on the 3 episode(s) training reads (dataset.episodes)" in row.message
    assert not rows["contract.health.episodes.near_duplicates"].evidence["groups"]
    # the stats rows still judge the shipped stats against every row of every episode
    every = sum(pq.ParquetFile(f).metadata.num_rows for f in (duplicated / "data").rglob("*.parquet"))
    assert rows["contract.normalization.stale:action"].evidence["count"]["rows"] == every


def test_a_duplicate_inside_the_trained_episodes_still_blocks(duplicated: Path, tmp_path: Path) -> None:
    for episodes in ([0, 1, 2], None):  # named, or every episode
        row = checked(duplicated, training(tmp_path / str(episodes), episodes))[DUPLICATES]
        assert row.verdict == "mismatch" and row.blocking and row.evidence["groups"] == [[1, 2]], episodes


def test_the_episodes_on_the_lerobot_train_line_are_the_ones_judged(duplicated: Path, tmp_path: Path) -> None:
    """`--dataset.episodes` reaches the rows through the training config the launch composes."""
    line = ["lerobot-train", "--policy.type=act", "--dataset.repo_id=me/data", "--dataset.episodes=[0,1,3]"]
    composed = compose_training(
        parse(line), None, duplicated
    )  # what the launch writes where lerobot is absent
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(composed))
    assert read_training(path).hints["dataset"]["episodes"] == [0, 1, 3]
    assert checked(duplicated, path)[DUPLICATES].verdict == "match"


def test_time_rows_judge_the_trained_episodes(tmp_path: Path) -> None:
    dataset, _ = planted("v3.0", "backwards_time", tmp_path / "data")  # time runs back in episode 1
    assert (
        checked(dataset, training(tmp_path / "a", [0, 2, 3]))["contract.health.time.order"].verdict == "match"
    )
    order = checked(dataset, training(tmp_path / "b", [1, 2]))["contract.health.time.order"]
    assert order.verdict == "mismatch" and order.blocking and order.evidence["episodes"] == [1]


def test_a_trained_episode_the_data_lacks_is_hard(tmp_path: Path) -> None:
    dataset, _ = planted("v3.0", "clean", tmp_path / "data")
    row = checked(dataset, training(tmp_path, [0, 7]))["contract.health.episodes.missing"]
    assert row.verdict == "mismatch" and row.blocking and row.evidence["trained_absent"] == [7]
    assert "dataset.episodes asks for 1 episode(s) the data lacks: 7" in row.message


@pytest.mark.parametrize("episodes", ["0-9", [0, -1], [0, "1"], [True]])
def test_a_dataset_episodes_that_is_not_a_list_of_indices_names_the_field(
    tmp_path: Path, episodes: object
) -> None:
    with pytest.raises(
        InputError, match=r"field 'dataset.episodes' must be a list of episode indices"
    ) as err:
        read_training(training(tmp_path, episodes))
    assert err.value.field == "dataset.episodes"


def test_a_video_missing_only_outside_the_trained_episodes_is_never_loaded(tmp_path: Path) -> None:
    dataset, _ = planted("v2.1", "videos_partial", tmp_path / "data")  # only episode 0 has its video
    assert checked(dataset, training(tmp_path / "a", None))["contract.health.videos"].blocking
    row = checked(dataset, training(tmp_path / "b", [0]))["contract.health.videos"]
    assert row.verdict == "match" and "every camera video is present" in row.message
