"""checkpoint_storage on a training checkpoint as LeRobot writes one (issue 31, item 4): the real
`act_trained/pretrained_model` from ../shared/data/real, with the `training_state/` that lerobot's
`save_training_state` puts beside it (a real AdamW state over those weights, flattened into
optimizer_state.safetensors as lerobot does, its param groups, rng state and step). The budget is the
whole folder measured from its files, not the weights (a user's ACT: 207 MB budgeted, 413 MB more saved)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.stages.test_checkpoint_storage import check


def lerobot_checkpoint(real_data: Path, run: Path, step: int) -> Path:
    """`run/checkpoints/<step>/` with `pretrained_model/` (the real files) and `training_state/`."""
    folder = run / "checkpoints" / f"{step:06d}"
    shutil.copytree(real_data / "lerobot-0.4.4/act_trained/pretrained_model", folder / "pretrained_model")
    weights = load_file(folder / "pretrained_model/model.safetensors")
    params = [torch.nn.Parameter(t.float()) for t in weights.values()]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    state = optimizer.state_dict()
    groups = state.pop("param_groups")
    flat = {f"state.{i}.{k}": v for i, s in state["state"].items() for k, v in s.items()}
    saved = folder / "training_state"
    saved.mkdir()
    save_file({k: v.contiguous() for k, v in flat.items()}, saved / "optimizer_state.safetensors")
    (saved / "optimizer_param_groups.json").write_text(json.dumps(groups))
    save_file({"torch_rng_state": torch.get_rng_state()}, saved / "rng_state.safetensors")
    (saved / "training_step.json").write_text(json.dumps({"step": step}))
    return folder


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_lerobot_checkpoint_is_budgeted_at_its_whole_folder(real_data, tmp_path):
    step = lerobot_checkpoint(real_data, tmp_path / "outputs/train/act", 50)
    weights = (step / "pretrained_model/model.safetensors").stat().st_size
    optimizer = (step / "training_state/optimizer_state.safetensors").stat().st_size
    assert optimizer > 1.9 * weights  # Adam's two moments
    _, rows = check(tmp_path, tmp_path / "ckpt", step / "pretrained_model")
    size = rows["size"]
    assert size.actual == _bytes(step) > 3 * weights, size.message
    assert size.evidence["source"] == "files" and size.evidence["found_from"] == "model.path"
    assert set(size.evidence["parts"]) == {"pretrained_model", "training_state"}
    assert f"the training checkpoint {step} (holding model.path)" in size.message
    assert rows["free_space"].expected == int(size.actual * 3 * 1.1)


def test_the_largest_checkpoint_already_in_checkpoint_dir_and_not_the_last_link_twice(real_data, tmp_path):
    run = tmp_path / "outputs/train/act"
    small, big = (lerobot_checkpoint(real_data, run, s) for s in (25, 50))
    (big / "training_state/scheduler_state.json").write_text(json.dumps({"last_epoch": 50}))
    (run / "checkpoints/last").symlink_to(big.name)
    _, rows = check(tmp_path, run, small / "pretrained_model")
    size = rows["size"]
    assert size.actual == _bytes(big) > _bytes(small) and size.evidence["checkpoints"] == 2, size.message
    assert (
        size.evidence["found_from"] == "checkpoint_dir"
        and "the largest of 2 in checkpoint_dir" in size.message
    )


def test_a_model_folder_without_training_state_is_still_estimated_from_its_weights(real_data, tmp_path):
    step = lerobot_checkpoint(real_data, tmp_path / "run", 50)
    shutil.rmtree(step / "training_state")
    _, rows = check(tmp_path, tmp_path / "ckpt", step / "pretrained_model")
    assert rows["size"].evidence["source"] == "model" and rows["size"].evidence["parameters"] > 60000
