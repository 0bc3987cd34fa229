"""Which reload loader the determinism stage uses when none is configured: the one the smoke checkpoint's
own config.json calls for (a LeRobot policy type: LeRobot's, through `load_lerobot`), never the demo's;
where that loader's package is missing, or the files name none, a soft `unverifiable` row says why.
The round trip itself on a real lerobot-train checkpoint is in tests/trainers (marker `lerobot`)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from pipeline.record.records import Check
from pipeline.stages.determinism import reload_loader
from pipeline.stages.determinism.config import DeterminismConfig
from pipeline.stages.determinism.lerobot_reload import LOADER
from pipeline.stages.determinism.runner import uses_placeholder

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None


@pytest.fixture
def act(real_data: Path, tmp_path: Path) -> Path:
    source = real_data / "lerobot-0.4.4" / "act_trained" / "pretrained_model"
    if not source.is_dir():
        pytest.skip(f"fixture ACT not present: {source}")
    return Path(shutil.copytree(source, tmp_path / "checkpoint"))


def test_a_lerobot_checkpoint_gets_lerobots_reload_or_a_row_naming_the_package(act: Path) -> None:
    chosen = reload_loader(DeterminismConfig(), act)
    if HAVE_LEROBOT:
        assert chosen == LOADER
        return
    assert isinstance(chosen, Check)
    assert (chosen.id, chosen.verdict, chosen.severity) == (
        "determinism.reload.loader",
        "unverifiable",
        "soft",
    )
    assert "['lerobot']" in chosen.message and LOADER in chosen.message
    assert chosen.evidence["missing"] == ["lerobot"]


def test_a_configured_loader_wins_over_the_checkpoints_type(act: Path) -> None:
    config = DeterminismConfig()
    config.reload.loader = "pipeline.trainlog:write_intent"  # any importable function with no `requires`
    assert reload_loader(config, act) == "pipeline.trainlog:write_intent"


def test_a_checkpoint_of_no_known_type_is_a_row_naming_the_key(act: Path) -> None:
    config = json.loads((act / "config.json").read_text())
    (act / "config.json").write_text(json.dumps({**config, "type": "my_policy"}))
    row = reload_loader(DeterminismConfig(), act)
    assert isinstance(row, Check) and row.verdict == "unverifiable" and row.severity == "soft"
    assert "stages.determinism.reload.loader" in row.message and "names no policy type" in row.message


def test_only_a_command_handed_the_flag_promises_a_save_without_stats() -> None:
    assert uses_placeholder(
        ["x", "--save-normalization-stats", "{save_normalization_stats}"], "save_normalization_stats"
    )
    assert not uses_placeholder(["x", "--seed", "{seed}", "--out", "{out}"], "save_normalization_stats")
