"""checkpoint_storage against a real small filesystem (a tmpfs the test mounts) and real safetensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import save_file

from pipeline.errors import ConfigError
from pipeline.stages import StageContext
from pipeline.stages.checkpoint_storage import NAME, CheckpointStorageConfig, run
from pipeline.stages.config import typed
from pipeline.storage import save_checkpoint
from tests.conftest import gate_of, run_dir_of
from tests.in_process_launch import launch_here
from tests.storage.conftest import tmpfs

MIB = 2**20


def model_dir(tmp_path: Path) -> Path:
    """A model with 1000 F32 and 500 BF16 parameters: 5000 bytes of weights."""
    folder = tmp_path / "model"
    folder.mkdir()
    save_file(
        {"a": torch.zeros(10, 100), "b": torch.zeros(500, dtype=torch.bfloat16)}, folder / "model.safetensors"
    )
    return folder


def check(tmp_path: Path, checkpoint_dir: Path, model: Path | None, **overrides):
    conf = typed(CheckpointStorageConfig, overrides, f"stages.{NAME}")
    cfg = OmegaConf.create(
        {"checkpoint_dir": str(checkpoint_dir), "model": {"path": str(model) if model else None}}
    )
    result = run(cfg, StageContext(run_dir=tmp_path, stage=NAME, config=conf))
    return result, {c.id.removeprefix(f"{NAME}."): c for c in result.checks}


def test_size_from_the_model_header_fits(tmp_path):
    result, rows = check(tmp_path, tmp_path / "ckpt" / "not_yet", model_dir(tmp_path))
    assert rows["size"].actual == 5000 and rows["size"].evidence["parameters"] == 1500
    assert rows["free_space"].verdict == "match" and rows["free_space"].expected == int(5000 * 3 * 1.1)
    assert rows["free_space"].category == "storage" and result.status == "pass"
    assert "quota" not in rows  # no lfs/quota on this machine: a note in the evidence, not a row
    assert rows["free_space"].evidence["room"]["notes"]


def test_dtype_and_optimizer_state_scale_the_estimate(tmp_path):
    _, rows = check(tmp_path, tmp_path, model_dir(tmp_path), dtype="F32", state_multiplier=3.0)
    assert rows["size"].actual == 1500 * 4 * 3


def test_run_that_will_not_fit_blocks_or_warns(tmp_path):
    with tmpfs(tmp_path / "small", "4m") as mount:
        not_fitting(tmp_path, mount / "ckpt")


def not_fitting(tmp_path: Path, folder: Path) -> None:
    result, rows = check(tmp_path, folder, None, size_bytes=2 * MIB, keep=3)
    assert rows["free_space"].verdict == "mismatch" and rows["free_space"].severity == "hard"
    assert rows["free_space"].expected == int(2 * MIB * 3 * 1.1) and rows["free_space"].actual <= 4 * MIB
    assert result.status == "fail"
    result, rows = check(tmp_path, folder, None, size_bytes=2 * MIB, keep=3, severity="warn")
    assert rows["free_space"].severity == "soft" and result.status == "warn"
    result, _ = check(tmp_path, folder, None, size_bytes=1 * MIB, keep=2)
    assert result.status == "pass"


def test_size_of_a_checkpoint_already_saved_there(tmp_path):
    folder = tmp_path / "ckpt"
    saved = save_checkpoint({"w": np.zeros(1000, np.float32)}, {"step": 1}, primary=folder)
    _, rows = check(tmp_path, folder, model_dir(tmp_path))
    assert rows["size"].evidence["source"] == "manifest" and rows["size"].actual == saved.size


def test_no_size_source_is_unverifiable_and_names_the_key(tmp_path):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    result, rows = check(tmp_path, tmp_path / "ckpt", empty)
    assert (
        rows["size"].verdict == "unverifiable"
        and "stages.checkpoint_storage.size_bytes" in rows["size"].message
    )
    assert result.status == "unverifiable"


def test_truncated_model_header_is_an_error_row_naming_the_file(tmp_path):
    folder = model_dir(tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:100])
    result, rows = check(tmp_path, tmp_path / "ckpt", folder)
    assert result.status == "error" and "model.safetensors" in rows["error"].message


def test_missing_fallback_folder_is_a_soft_finding(tmp_path):
    _, rows = check(
        tmp_path, tmp_path, None, size_bytes=10, fallbacks=[str(tmp_path), str(tmp_path / "gone")]
    )
    assert rows["fallback.0"].verdict == "match"
    assert rows["fallback.1"].verdict == "mismatch" and rows["fallback.1"].severity == "soft"


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"severity": "maybe"}, "severity"),
        ({"keep": 0}, "keep"),
        ({"dtype": "F8"}, "dtype"),
        ({"size_bytes": -1}, "size_bytes"),
        ({"margin": -0.5}, "margin"),
    ],
)
def test_bad_settings_name_their_key(overrides, key):
    with pytest.raises(ConfigError, match=rf"stages\.checkpoint_storage\.{key}: expected"):
        typed(CheckpointStorageConfig, overrides, f"stages.{NAME}")


def test_launch_blocks_a_run_whose_checkpoints_do_not_fit_on_a_small_filesystem(tmp_path):
    """The stage as a job (local executor): checkpoint_dir on a 4 MiB tmpfs, 3 x 2 MiB planned."""
    with tmpfs(tmp_path / "small", "4m") as mount:
        proc = launch_here(
            tmp_path,
            "launcher=local",
            "~demo",
            "stage=checkpoint_storage",
            "min_free_mb=1",  # the launch's own floor (64 MiB) would refuse the 4 MiB tmpfs first
            f"checkpoint_dir={mount / 'ckpt'}",
            f"stages.checkpoint_storage.size_bytes={2 * MIB}",
        )
        assert proc.returncode == 3, proc.stdout + proc.stderr
        gate = gate_of(run_dir_of(tmp_path, proc))
        assert gate["gate"] == "blocked"
        assert any("checkpoint_storage.free_space" in reason for reason in gate["reasons"])


def test_without_a_model_or_a_size_it_needs_one_of_those_keys() -> None:
    """Declared like the other stages' inputs: skipped under stage=full naming them, refused alone."""
    from pipeline import stages

    stage = stages.load()[NAME]
    cfg = OmegaConf.create({"model": {"path": None}, "stages": {NAME: {"size_bytes": None}}})
    assert stages.missing_keys(stage, cfg) == (f"model.path|stages.{NAME}.size_bytes",)
    reason = stages.skip_reason(stage, stages.missing_keys(stage, cfg))
    assert reason.endswith(f"set model.path or stages.{NAME}.size_bytes to run it"), reason
    for key, value in (("model.path", "/m"), (f"stages.{NAME}.size_bytes", MIB)):
        given = OmegaConf.merge(cfg, {})
        OmegaConf.update(given, key, value)
        assert stages.missing_keys(stage, given) == (), key


def test_alone_without_a_model_or_a_size_is_exit_2_naming_the_keys(tmp_path) -> None:
    proc = launch_here(tmp_path, "stage=checkpoint_storage", "launcher=local", "~demo")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"model.path or stages.{NAME}.size_bytes" in out and len(out.strip().splitlines()) == 1, out
