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


def test_forward_feeds_one_decoded_camera_frame_and_matches_training(trained_cameras, camera_dataset):
    """A policy with camera encoders: the forward row feeds row 0's decoded frames (float 0-1 CHW) and
    the reloaded eval path gives what the trainer's own (pooled) path computes on that row."""
    import torch

    from pipeline.demo import policy as demo
    from pipeline.demo.pixels import forward_pooled
    from pipeline.demo.reference_trainer import training_tensors
    from pipeline.demo.reload import load_demo
    from pipeline.readers import LeRobotData

    found = rows(trained_cameras["a"] / "checkpoint", camera_dataset)
    assert all(c.verdict == "match" for c in found.values()), {k: c.message for k, c in found.items()}
    inputs = found["forward"].evidence["inputs"]
    assert inputs["observation.images.front"] == inputs["observation.images.wrist"] == [1, 3, 32, 32]
    loaded = demo.load_pretrained(trained_cameras["a"] / "checkpoint")
    assert loaded.policy.cameras == 2
    reloaded = load_demo(trained_cameras["a"] / "checkpoint", camera_dataset)
    eval_side = reloaded.forward(reload.first_sample(LeRobotData(camera_dataset), reloaded.input_features))
    loaded.stats = {k: {s: np.asarray(v) for s, v in d.items()} for k, d in loaded.stats.items()}
    data = training_tensors(camera_dataset, loaded.spec)
    with torch.no_grad():
        y = forward_pooled(loaded.policy, data.x[:1], [p.pooled[:1] for p in data.pixels]).numpy()
    train_side = demo.unnormalize(y, data.stats["action"], loaded.mode("action"))
    np.testing.assert_allclose(eval_side, train_side, rtol=0, atol=1e-5)


def test_a_missing_camera_video_is_an_error_row_naming_it(trained_cameras, camera_dataset, tmp_path):
    dataset = Path(shutil.copytree(camera_dataset, tmp_path / "dataset"))
    video = dataset / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    video.unlink()
    row = rows(trained_cameras["a"] / "checkpoint", dataset)["forward"]
    assert row.verdict == "error" and str(video) in row.message and "missing" in row.message
