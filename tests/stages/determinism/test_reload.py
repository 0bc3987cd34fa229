"""The train->eval reload round trip on checkpoints saved by real reference-trainer runs, and broken
copies of them: inf placeholders, a renamed key, stats re-injected from another dataset."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from safetensors.numpy import load_file as load_np
from safetensors.numpy import save_file as save_np
from safetensors.torch import load_file, save_file

from pipeline.errors import InputError
from pipeline.stages.determinism import reload

PRE = "policy_preprocessor_step_2_normalizer_processor.safetensors"
# the stage's reload section, spelled out with the demo's loader (no dependence on the shipped config)
RELOAD = {
    "enabled": True,
    "loader": "pipeline.demo.reload:load_demo",
    "dataset": None,
    "save_normalization_stats": False,
    "norm_key_pattern": r"(^|\.)(un)?normalize_[^.]*\.buffer_",
    "norm_file_pattern": r"normalizer_processor\.safetensors$",
    "stats_atol": 0.0,
}


def rcfg(**changes):
    cfg = OmegaConf.create(RELOAD)
    for key, value in changes.items():
        cfg[key] = value
    return cfg


def rows(checkpoint: Path, dataset: Path, **changes) -> dict[str, object]:
    found = reload.round_trip(checkpoint, dataset, rcfg(**changes))
    return {c.id.removeprefix("determinism.reload."): c for c in found}


def copy_run(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


def test_stats_less_save_reloads_with_injected_stats(trained, tiny_dataset):
    found = rows(trained["a"] / "checkpoint", tiny_dataset)
    assert {k: c.verdict for k, c in found.items()} == {
        "stats_not_saved": "match",
        "load": "match",
        "stats_populated": "match",
        "stats_match_training": "match",
        "forward": "match",
    }
    assert found["stats_populated"].evidence["injected"]  # they came from the dataset, not the file
    assert found["forward"].actual == {"shape": [1, 2], "finite": True}


def test_stats_written_despite_save_normalization_stats_false(trained, tiny_dataset):
    found = rows(trained["with_stats"] / "checkpoint", tiny_dataset)
    assert found["stats_not_saved"].verdict == "mismatch" and found["stats_not_saved"].severity == "hard"
    assert any(k.startswith(PRE + ":observation.state.") for k in found["stats_not_saved"].evidence["keys"])
    assert (
        rows(trained["with_stats"] / "checkpoint", tiny_dataset, save_normalization_stats=True)[
            "saved_stats_finite"
        ].verdict
        == "match"
    )


def test_inf_placeholders_left_in_the_checkpoint(trained, tiny_dataset, tmp_path):
    run = copy_run(trained["with_stats"], tmp_path)
    stats = load_np(str(run / "checkpoint" / PRE))
    stats["observation.state.q01"] = np.full_like(stats["observation.state.q01"], np.inf)
    save_np(stats, str(run / "checkpoint" / PRE))
    found = rows(run / "checkpoint", tiny_dataset, save_normalization_stats=True)
    saved, after = found["saved_stats_finite"], found["stats_populated"]
    assert saved.verdict == after.verdict == "mismatch" and saved.severity == after.severity == "hard"
    assert saved.evidence["nonfinite"] == {f"{PRE}:observation.state.q01": {"inf": 4, "nan": 0, "size": 4}}
    assert "observation.state.q01" in after.evidence["nonfinite"]


def test_weight_key_renamed_between_save_and_load(trained, tiny_dataset, tmp_path):
    run = copy_run(trained["a"], tmp_path)
    weights = load_file(str(run / "checkpoint" / "model.safetensors"))
    weights["net.first.weight"] = weights.pop("net.0.weight")
    save_file(weights, str(run / "checkpoint" / "model.safetensors"))
    found = rows(run / "checkpoint", tiny_dataset)
    assert found["load"].verdict == "mismatch" and found["load"].severity == "hard"
    assert "net.0.weight" in found["load"].evidence["exception"]
    assert "net.first.weight" in found["load"].evidence["exception"]


def test_stat_key_renamed_between_save_and_load(trained, tiny_dataset, tmp_path):
    run = copy_run(trained["with_stats"], tmp_path)
    stats = load_np(str(run / "checkpoint" / PRE))
    stats["observation_state.q01"] = stats.pop("observation.state.q01")
    save_np(stats, str(run / "checkpoint" / PRE))
    row = rows(run / "checkpoint", tiny_dataset, save_normalization_stats=True)["stats_match_training"]
    assert row.verdict == "mismatch" and row.evidence["unexpected"] == ["observation_state.q01"]


def test_stats_reinjected_from_the_wrong_dataset(trained, other_dataset):
    row = rows(trained["a"] / "checkpoint", other_dataset)["stats_match_training"]
    assert row.verdict == "mismatch" and row.severity == "hard"
    differing = row.evidence["differing"]
    assert "observation.state.mean" in differing and differing["observation.state.mean"]["max_abs"] > 0


def test_loader_must_be_module_colon_function(trained, tiny_dataset):
    with pytest.raises(InputError, match=r"reload.loader: expected 'module:function'"):
        rows(trained["a"] / "checkpoint", tiny_dataset, loader="pipeline.stages.determinism.reload.load_demo")
    with pytest.raises(InputError, match="cannot import"):
        rows(trained["a"] / "checkpoint", tiny_dataset, loader="no_such_module:load")


def test_no_checkpoint_is_an_error_row(tmp_path, tiny_dataset):
    found = rows(tmp_path, tiny_dataset)
    assert found["checkpoint"].verdict == "error"


def test_a_truncated_checkpoint_file_is_an_input_error_naming_it(trained, tiny_dataset, tmp_path):
    """Every safetensors open goes through the validated reader: the header is checked against the size."""
    run = copy_run(trained["with_stats"], tmp_path)
    path = run / "checkpoint" / PRE
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(InputError, match=rf"{PRE}: tensor '.*' data_offsets .* exceed"):
        rows(run / "checkpoint", tiny_dataset, save_normalization_stats=True)


def test_an_all_zero_saved_scale_is_a_placeholder_too(trained, tiny_dataset, tmp_path):
    """The shared placeholder rule (the contract's too): a std that is zero in every dim was never filled."""
    run = copy_run(trained["with_stats"], tmp_path)
    stats = load_np(str(run / "checkpoint" / PRE))
    stats["observation.state.std"] = np.zeros_like(stats["observation.state.std"])
    save_np(stats, str(run / "checkpoint" / PRE))
    saved = rows(run / "checkpoint", tiny_dataset, save_normalization_stats=True)["saved_stats_finite"]
    assert saved.verdict == "mismatch" and saved.severity == "hard"
    assert saved.evidence["nonfinite"] == {
        f"{PRE}:observation.state.std": {"problem": "all zeros", "size": 4}
    }
