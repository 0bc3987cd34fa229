"""Per-episode metadata and path templates LeRobot never writes, each named, never a crash.

Planted in copies of a real LeRobot v3.0 dataset (SamueleSandrini/record-test, ../shared/data/real; its
videos are not in the snapshot) and, where a video must be decoded, in a small dataset with real video
written by `benchmarks/make_large_dataset.py`. Every case runs under a SIGALRM deadline (a hang fails
it) and must end in an `InputError` that names the file, the field, the episode and the value, or in a
row that says the same; before, they were `int(NaN)` (ValueError), `round(NaN)`, an OverflowError inside
PyAV's seek, or a KeyError / AttributeError from `str.format`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.make_large_dataset import Shape, make
from pipeline.errors import InputError, one_line
from pipeline.readers.base import Contract, DatasetContract, Feature
from pipeline.readers.episode_rows import EpisodeRows
from pipeline.readers.frames import FrameReader
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.lerobot_paths import fill
from pipeline.stages.contract.frames import frame_rows
from pipeline.stages.contract.rows import Sources
from pipeline.stages.contract.spans import spans
from tests.malformed.triple import deadline
from tests.stages.contract.helpers import STAGE_CFG

REAL = "SamueleSandrini__record-test"
CAM = "observation.images.front"
V = f"videos/{CAM}/"
TINY = Shape(episodes=4, length=6, state_dim=2, action_dim=2, cameras=1, size=16, episodes_per_video=4)
KEY = TINY.camera_keys[0]


def real_copy(real_data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(real_data / REAL, root)
    return root


def plant(root: Path, column: str, episode: int, value: Any) -> None:
    """Set one episode's value of a meta/episodes column (the column retyped to hold it: NaN a float,
    None a null), every other value kept as LeRobot wrote it."""
    for path in sorted((root / "meta/episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        values = table.column(column).to_pylist()
        rows = table.column("episode_index").to_pylist()
        if episode not in rows:
            continue
        values[rows.index(episode)] = value
        kind = pa.float64() if isinstance(value, float) else table.schema.field(column).type
        table = table.set_column(table.column_names.index(column), column, pa.array(values, kind))
        pq.write_table(table, path)


def edit_info(root: Path, **fields: Any) -> None:
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps(info | fields))


def named(exc: InputError, file: str, field: str, *words: str) -> None:
    """One line naming the file, the field (also as `exc.field`) and each of `words` (episode, value)."""
    text = one_line(exc)
    assert "\n" not in str(exc).strip() and "Traceback" not in text, text
    assert file in text and exc.field == field and field in text, (exc.field, text)
    for word in words:
        assert word in text, f"{word!r} not in: {text}"


def timestamps(root: Path, episode: int) -> Any:
    return FrameReader(LeRobotData(root)).timestamps(episode)


# (column planted, episode, value, the call, the words the error must hold besides file and field)
LOCATIONS: dict[str, tuple[str, int, Any, Callable[[Path, int], Any], tuple[str, ...]]] = {
    "data_chunk_index_nan": ("data/chunk_index", 2, float("nan"), timestamps, ("episode 2", "nan")),
    "data_chunk_index_null": ("data/chunk_index", 1, None, timestamps, ("episode 1", "None")),
    "data_file_index_nan": ("data/file_index", 3, float("nan"), timestamps, ("episode 3", "nan")),
    "data_file_index_null": ("data/file_index", 0, None, timestamps, ("episode 0", "None")),
    "video_chunk_index_nan": (
        V + "chunk_index",
        2,
        float("nan"),
        lambda r, e: LeRobotData(r).video_location(CAM, e),
        ("episode 2", "nan"),
    ),
    "video_file_index_null": (
        V + "file_index",
        1,
        None,
        lambda r, e: LeRobotData(r).video_location(CAM, e),
        ("episode 1", "None"),
    ),
    "video_from_timestamp_nan": (
        V + "from_timestamp",
        3,
        float("nan"),
        lambda r, e: LeRobotData(r).video_location(CAM, e),
        ("episode 3", "nan", "finite seconds"),
    ),
    "video_to_timestamp_nan": (
        V + "to_timestamp",
        0,
        float("nan"),
        lambda r, e: LeRobotData(r).video_location(CAM, e),
        ("episode 0", "nan"),
    ),
}


@pytest.mark.parametrize("name", list(LOCATIONS))
def test_a_location_lerobot_never_writes_is_named(name: str, real_data: Path, tmp_path: Path) -> None:
    column, episode, value, call, words = LOCATIONS[name]
    root = real_copy(real_data, tmp_path)
    plant(root, column, episode, value)
    with deadline(), pytest.raises(InputError) as info:
        call(root, episode)
    named(info.value, "meta/episodes", column, *words)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (float("nan"), "1 episode(s) with a video location LeRobot never writes"),
        (1.7e308, "1 episode(s) with a video location LeRobot never writes"),
        (1e300, "1 episode span(s) hold another frame count than their rows: [[2, 3e+301, 372]]"),
    ],
)
def test_the_span_pass_names_a_bad_to_timestamp_among_every_episode(
    value: float, said: str, real_data: Path, tmp_path: Path
) -> None:
    """Every episode's span is read (nothing decoded): NaN was `round(NaN)` and 1.7e308 an overflow
    (x fps = inf); now problems naming the episode, told apart from the videos this snapshot lacks."""
    root = real_copy(real_data, tmp_path)
    plant(root, V + "to_timestamp", 2, value)
    with deadline():
        found = spans(FrameReader(LeRobotData(root)), CAM, max_files=4)
    text = " ".join(found["problems"])
    assert said in text, text
    if "never writes" in said:
        assert "episode 2" in text and V + "to_timestamp" in text and repr(value) in text, text
    assert len(text) < 2000, text


TEMPLATES = {
    "data_path_attribute": (
        "data_path",
        "data/chunk-{chunk_index.real}/file-{file_index:03d}.parquet",
        timestamps,
    ),
    "data_path_unknown_field": ("data_path", "data/{camera_name}/file-{file_index:03d}.parquet", timestamps),
    "data_path_dunder": ("data_path", "data/{chunk_index.__class__.__name__}.parquet", timestamps),
    "data_path_positional": ("data_path", "data/chunk-{0}/file-{file_index}.parquet", timestamps),
    "data_path_spec_does_not_fit": ("data_path", "data/chunk-{chunk_index:s}.parquet", timestamps),
    "data_path_nested_spec": ("data_path", "data/chunk-{chunk_index:{file_index}}.parquet", timestamps),
    "data_path_gigabyte_width": ("data_path", "data/{chunk_index:0999999999d}.parquet", timestamps),
    "video_path_unknown_field": (
        "video_path",
        "videos/{camera_name}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        lambda r, e: LeRobotData(r).video_location(CAM, e),
    ),
    "video_path_attribute": (
        "video_path",
        "videos/{video_key}/chunk-{episode_index.nope}/file-{file_index:03d}.mp4",
        lambda r, e: LeRobotData(r).video_location(CAM, e),
    ),
    "video_path_not_a_string": ("video_path", ["videos"], lambda r, e: LeRobotData(r).video_location(CAM, e)),
}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_path_template_of_unknown_fields_is_named(name: str, real_data: Path, tmp_path: Path) -> None:
    field, template, call = TEMPLATES[name]
    root = real_copy(real_data, tmp_path)
    edit_info(root, **{field: template})
    with deadline(), pytest.raises(InputError) as info:
        call(root, 1)
    named(info.value, "meta/info.json", field, "expected a path template using only")


def test_the_documented_templates_fill_as_lerobot_fills_them(tmp_path: Path) -> None:
    """Plain names with format specs, as LeRobot 0.4.4 writes them, fill exactly as `str.format` does."""
    v3 = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    fields = {"video_key": "cam", "chunk_index": 3, "file_index": 12}
    assert fill(v3, fields, tmp_path, "video_path") == v3.format(**fields)
    v2 = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    assert fill(v2, {"episode_chunk": 0, "episode_index": 41}, tmp_path, "data_path") == v2.format(
        episode_chunk=0, episode_index=41
    )


# ------------------------------------------------------------------- decoded: a dataset with real video


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paths") / "ds"
    make(root, TINY)
    return root


def video_copy(written: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(written, root)
    return root


END = TINY.episodes * TINY.length / TINY.fps  # the shared video's end, seconds
SPANS = {  # (from_timestamp, to_timestamp) of episode 1, what the error must say
    "from_1e300": ((1e300, 1e300), "past the video's end"),
    "past_the_end": ((END + 5.0, END + 5.0 + TINY.length / TINY.fps), "past the video's end"),
    "from_negative": ((-1.0, 0.2), "finite seconds >= 0"),
    "to_before_from": ((0.6, 0.2), "before its from_timestamp"),
    "from_infinite": ((float("inf"), float("inf")), "finite seconds >= 0"),
}


@pytest.mark.parametrize("name", list(SPANS))
def test_a_span_outside_the_video_is_named_when_frames_are_read(
    name: str, written: Path, tmp_path: Path
) -> None:
    (start, end), words = SPANS[name]
    root = video_copy(written, tmp_path)
    plant(root, f"videos/{KEY}/from_timestamp", 1, start)
    plant(root, f"videos/{KEY}/to_timestamp", 1, end)
    with deadline(), pytest.raises(InputError) as info:
        FrameReader(LeRobotData(root)).frames(KEY, 1, [0, 1])
    text = one_line(info.value)
    assert words in text and "episode 1" in text and "Traceback" not in text, text
    assert info.value.field in ("timestamp", f"videos/{KEY}/from_timestamp", f"videos/{KEY}/to_timestamp")


@pytest.mark.parametrize("column", ["from_timestamp", "chunk_index"])
def test_the_contract_records_an_error_row_naming_it(column: str, written: Path, tmp_path: Path) -> None:
    """Through the stage's frame rows: one `error` row for the camera naming file, field and episode,
    returned as a row (no "stage crashed"); the camera's key rows are the layout's, outside these."""
    root = video_copy(written, tmp_path)
    plant(root, f"videos/{KEY}/{column}", 0, float("nan"))
    a = Contract(
        "A", "contract_card", "base", features={KEY: Feature(KEY, "image", (3, TINY.size, TINY.size))}
    )
    c = DatasetContract("C", "lerobot_v3.0", str(root))
    with deadline():
        rows = {r.id: r for r in frame_rows(Sources(a, Contract("B", "training", "train"), c, STAGE_CFG))}
    row = rows[f"contract.frames.health:{KEY}"]
    assert row.verdict == "error" and row.severity == "hard", row
    assert "meta/episodes" in row.message and f"videos/{KEY}/{column}" in row.message, row.message
    assert "episode 0" in row.message and "nan" in row.message, row.message


@pytest.mark.parametrize(
    ("column", "value"), [(V + "chunk_index", float("nan")), (V + "from_timestamp", float("nan"))]
)
def test_the_health_videos_row_names_the_location_not_a_missing_video(
    column: str, value: float, real_data: Path, tmp_path: Path
) -> None:
    """The health pass locates every camera's video for every episode: a NaN there was `int(NaN)` (a
    stage crash); now the videos row names the field, the episode and the value."""
    from tests.stages.contract.test_health import health

    root = real_copy(real_data, tmp_path)
    plant(root, column, 1, value)
    with deadline():
        row = health(root, tmp_path / "h", cameras=(CAM,))["contract.health.videos"]
    assert row.verdict == "mismatch" and row.severity == "hard", row
    assert "LeRobot never writes" in row.message and column in row.message and "episode 1" in row.message


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda r: plant(r, "data/chunk_index", 3, float("nan")), "data/chunk_index", ("episode 3", "nan")),
        (lambda r: plant(r, "data/file_index", 0, None), "data/file_index", ("episode 0", "None")),
        (lambda r: edit_info(r, data_path="data/{camera_name}.parquet"), "data_path", ("{camera_name}",)),
    ],
)
def test_a_data_location_lerobot_never_writes_is_a_health_row(
    edit: Callable[[Path], None], field: str, words: tuple[str, ...], real_data: Path, tmp_path: Path
) -> None:
    """The contract's scan reads every data file whatever meta/episodes says, so a state-only run never
    looked the location up and said nothing, while LeRobot's loader stops on it: now a hard row."""
    from tests.stages.contract.test_health import health

    root = real_copy(real_data, tmp_path)
    edit(root)
    with deadline():
        rows = health(root, tmp_path / "h")
    row = rows["contract.health.meta.locations"]
    assert row.verdict == "mismatch" and row.severity == "hard" and row.evidence["field"] == field, row
    assert all(w in row.message for w in words), row.message
    clean = health(real_copy(real_data, tmp_path / "clean"), tmp_path / "h2")
    assert "contract.health.meta.locations" not in clean


G1 = Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / "YifanTian07__G1-policy-train"


@pytest.mark.skipif(not G1.is_dir(), reason=f"needs the real LeRobot v2.1 dataset at {G1}")
@pytest.mark.parametrize("value", ["1000", float("nan"), 0, 2.5, True, [1000]])
def test_a_v2_chunks_size_that_is_not_a_positive_integer_is_named(value: Any, tmp_path: Path) -> None:
    """v2.x locates an episode's files by `episode // chunks_size`: a string was a ValueError, 0 a
    ZeroDivisionError; now info.json's field and the value are named."""
    root = tmp_path / "g1"
    shutil.copytree(G1 / "meta", root / "meta")
    shutil.copytree(G1 / "data", root / "data")
    info = json.loads((root / "meta" / "info.json").read_text())
    info["chunks_size"] = value
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(InputError) as err:
        EpisodeRows(LeRobotData(root)).table(0, ["timestamp"])  # the episode's own data file, located
    assert "chunks_size" in str(err.value) and "meta/info.json" in str(err.value), str(err.value)
