"""The `lerobot` adapter against the real package: a small ACT policy made with LeRobot's own classes on
a LeRobot v3.0 dataset written by LeRobot itself, saved as its training saves a checkpoint (policy +
pre/post processors), loaded through `load_lerobot` and scored through the stage's model path.

Optional: runs only where `lerobot` is importable (scripts/test_lerobot.sh builds that venv); the
project's own venv has no lerobot, so here it is skipped at once.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from pipeline.stages.teacher_forced import models, samples
from tests.stages.teacher_forced.helpers import by_id, run_stage
from tests.trainers.helpers import LEROBOT_ONLY

pytestmark = LEROBOT_ONLY

LEROBOT = "pipeline.stages.teacher_forced.models:load_lerobot"
STATE, ENV, ACTION = 4, 3, 2
EPISODES, STEPS, CHUNK = 2, 40, 4
INPUTS = ["observation.environment_state", "observation.state"]


def _features() -> dict[str, dict[str, Any]]:
    """State + environment state (ACT needs an image or the environment state; no video decoding here)."""
    return {
        "observation.state": {"dtype": "float32", "shape": (STATE,), "names": ["q0", "q1", "q2", "q3"]},
        "observation.environment_state": {"dtype": "float32", "shape": (ENV,), "names": ["x", "y", "z"]},
        "action": {"dtype": "float32", "shape": (ACTION,), "names": ["vx", "gripper"]},
    }


def _dataset(root: Path) -> Any:
    """A tiny v3.0 dataset written by LeRobotDataset.create / add_frame / save_episode / finalize."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    rng = np.random.default_rng(0)
    data = LeRobotDataset.create("preflight/tiny", fps=10, root=root, features=_features(), use_videos=False)
    for _ in range(EPISODES):
        state = rng.normal(size=STATE).astype(np.float32)
        for _ in range(STEPS):
            state = (state + 0.1 * rng.normal(size=STATE)).astype(np.float32)
            data.add_frame(
                {
                    "observation.state": state,
                    "observation.environment_state": (state[:ENV] * 2 + 1).astype(np.float32),
                    "action": np.array([state[0] - state[1], state[2] > 0], np.float32) * 3,
                    "task": "reach",
                }
            )
        data.save_episode()
    data.finalize()
    return LeRobotDataset("preflight/tiny", root=root)


def _config(kind: str) -> Any:
    """Small dims: ACT (deterministic, chunk of 4) or diffusion (2 observation steps, 2 denoising steps)."""
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    if kind == "act":
        small = {"dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1}
        return ACTConfig(chunk_size=CHUNK, n_action_steps=CHUNK, n_decoder_layers=1, latent_dim=8, **small)
    small = {"down_dims": (16, 32), "kernel_size": 3, "n_groups": 4, "diffusion_step_embed_dim": 16}
    return DiffusionConfig(n_obs_steps=2, horizon=8, n_action_steps=CHUNK, num_inference_steps=2, **small)


def _policy(kind: str, meta: Any, out: Path, action_width: int | None = None) -> Path:
    """A small policy with random weights, saved as LeRobot's training saves a checkpoint: the policy's
    save_pretrained next to the pre/post processors made from the dataset's stats."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    config = _config(kind)
    config.device = "cpu"
    stats = meta.stats
    torch.manual_seed(1)
    policy = make_policy(config, ds_meta=meta)
    if action_width is not None:  # a checkpoint for another robot: its head and stats are wider
        config.output_features = {"action": PolicyFeature(FeatureType.ACTION, (action_width,))}
        policy = type(policy)(config)
        wide = np.zeros(action_width, np.float32)
        stats = {**stats, "action": {"mean": wide, "std": wide + 1, "min": wide - 1, "max": wide + 1}}
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, pre, post):
        part.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub
    base = tmp_path_factory.mktemp("lerobot")
    data = _dataset(base / "data")
    kinds = {kind: _policy(kind, data.meta, base / kind) for kind in ("act", "diffusion")}
    return {"data": data, "root": base / "data", "policy": kinds["act"], "base": base, **kinds}


def _lerobot_own(kind: str, policy_dir: Path, data: Any, rows: np.ndarray, seed: int) -> np.ndarray:
    """What LeRobot itself answers on its own dataset's items, as its rollout drives a policy: loaded
    by its own classes, preprocessor -> select_action every step of the chunk -> postprocessor."""
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    policy = get_policy_class(kind).from_pretrained(str(policy_dir)).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(policy_dir))
    obs = {k: torch.stack([data[int(row)][k] for row in rows]) for k in INPUTS}
    torch.manual_seed(seed)
    policy.reset()
    with torch.inference_mode():
        steps = [post(policy.select_action(pre(dict(obs)))) for _ in range(policy.config.n_action_steps)]
        if kind == "act":  # and the chunk ACT predicts in one call, item by item
            chunks = [
                policy.predict_action_chunk(pre({k: v[i] for k, v in obs.items()})) for i in range(len(rows))
            ]
            np.testing.assert_allclose(torch.stack(steps, 1), post(torch.cat(chunks))[:, :CHUNK], atol=1e-5)
    return torch.stack(steps, 1).numpy()


def _saved_on_gpu(policy: Path, out: Path) -> Path:
    """The checkpoint as GPU training saves it: config and preprocessor say `cuda` (edited in the real
    files, since no GPU trains here); scoring it on a CPU must not try to move inputs to CUDA."""
    shutil.copytree(policy, out)
    for name, step in (("config.json", None), ("policy_preprocessor.json", "device_processor")):
        saved = json.loads((out / name).read_text())
        for place in (
            [saved] if step is None else [s["config"] for s in saved["steps"] if s["registry_name"] == step]
        ):
            place["device"] = "cuda"
        (out / name).write_text(json.dumps(saved))
    return out


@pytest.mark.parametrize("kind, saved_on", [("act", "cpu"), ("act", "cuda"), ("diffusion", "cpu")])
def test_a_policy_saved_by_lerobot_scores_as_lerobot_itself_predicts(tiny, kind, saved_on, tmp_path):
    path = tiny[kind] if saved_on == "cpu" else _saved_on_gpu(tiny[kind], tmp_path / "gpu")
    loaded = models.load(kind, str(path), LEROBOT, "cpu", [], f"stages.teacher_forced.models[{kind}]")
    assert sorted(loaded.inputs) == INPUTS
    frames = samples.read_frames(tiny["root"], [*loaded.inputs, "action"])
    rows = np.arange(0, len(frames), 7)
    batch = {k: frames.columns[k][rows] for k in loaded.inputs}
    # ACT in batches of 5 (several calls, nothing carried over); diffusion draws its noise from the
    # seeded generator, so it is compared on one batch of the same size LeRobot's call gets
    ours = models.infer(loaded.predict, batch, 5 if kind == "act" else len(rows), 9300, kind)
    theirs = _lerobot_own(kind, tiny[kind], tiny["data"], rows, 9300)
    assert ours.shape == (len(rows), CHUNK, ACTION)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert np.ptp(ours[:, 0], axis=0).min() > 1e-4  # the inputs reach the output: not a constant


def test_the_stage_scores_it_and_names_a_wrong_width_and_a_missing_processor(tiny, tmp_path):
    wide = _policy("act", tiny["data"].meta, tiny["base"] / "wide", action_width=ACTION + 1)
    bare = shutil.copytree(tiny["policy"], tmp_path / "bare")
    (bare / "policy_postprocessor.json").unlink()
    paths = {"act": tiny["policy"], "wide": wide, "bare": bare}
    specs = [{"name": n, "path": str(p), "loader": LEROBOT} for n, p in paths.items()]
    result = run_stage(str(tiny["root"]), tmp_path / "run", models=specs, samples=32, horizon=CHUNK)
    rows = by_id(result)
    assert "error.act" not in rows, rows["error.act"].message
    # scored, finite and deterministic (ACT without sampling); random weights: no claim on the error
    assert [rows[f"{r}.act"].verdict for r in ("l1", "finite", "repeatability")] == ["match"] * 3
    wide_row, bare_row = rows["error.wide"], rows["error.bare"]
    assert wide_row.verdict == "error" and "predicts 3 action dims, the dataset has 2" in wide_row.message
    assert bare_row.verdict == "error" and "policy_postprocessor.json" in bare_row.message
    assert "loading failed: InputError" in bare_row.message


def test_an_empty_directory_or_a_missing_normalizer_state_is_named(tiny, tmp_path):
    from pipeline.errors import InputError

    with pytest.raises(InputError, match=r"lacks \['config.json', 'model.safetensors'"):
        models.load_lerobot(str(tmp_path), "cpu")
    copy = shutil.copytree(tiny["policy"], tmp_path / "copy")
    state = next(copy.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))
    state.unlink()
    with pytest.raises(InputError, match=state.name):
        models.load_lerobot(str(copy), "cpu")
