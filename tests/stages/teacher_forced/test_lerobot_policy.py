"""The `lerobot` adapter against the real package: a small ACT policy made with LeRobot's own classes on
a LeRobot v3.0 dataset written by LeRobot itself, saved as its training saves a checkpoint (policy +
pre/post processors), loaded through `load_lerobot` and scored through the stage's model path.

Optional: runs only where `lerobot` is importable (scripts/test_lerobot.sh builds that venv); the
project's own venv has no lerobot, so here it is skipped at once.
"""

from __future__ import annotations

import importlib.util
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

pytestmark = [
    pytest.mark.lerobot,
    pytest.mark.skipif(
        importlib.util.find_spec("lerobot") is None,
        reason="optional package 'lerobot' not installed (scripts/test_lerobot.sh builds a venv with it)",
    ),
]

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


def _act(meta: Any, out: Path, action_width: int | None = None) -> Path:
    """A small ACT policy, random weights, saved as LeRobot's training saves a checkpoint: the policy's
    save_pretrained next to the pre/post processors made from the dataset's stats."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    small = {"dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1}
    config = ACTConfig(
        chunk_size=CHUNK, n_action_steps=CHUNK, n_decoder_layers=1, latent_dim=8, device="cpu", **small
    )
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
    return {"data": data, "root": base / "data", "policy": _act(data.meta, base / "act"), "base": base}


def _lerobot_own(policy_dir: Path, data: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What LeRobot itself answers, one dataset item at a time as its eval loop feeds a policy:
    preprocessor -> select_action / predict_action_chunk -> postprocessor."""
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    policy = ACTPolicy.from_pretrained(str(policy_dir)).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(policy_dir))
    first, chunks = [], []
    with torch.inference_mode():
        for row in rows:
            item = data[int(row)]
            obs = {k: item[k] for k in INPUTS}
            policy.reset()
            first.append(post(policy.select_action(pre(obs))).numpy()[0])
            chunks.append(post(policy.predict_action_chunk(pre(obs))).numpy()[0])
    return np.stack(first), np.stack(chunks)


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


@pytest.mark.parametrize("saved_on", ["cpu", "cuda"])
def test_an_act_policy_saved_by_lerobot_scores_as_lerobot_itself_predicts(tiny, saved_on, tmp_path):
    path = tiny["policy"] if saved_on == "cpu" else _saved_on_gpu(tiny["policy"], tmp_path / "gpu")
    loaded = models.load("act", str(path), LEROBOT, "cpu", [], "stages.teacher_forced.models[act]")
    assert sorted(loaded.inputs) == INPUTS
    frames = samples.read_frames(tiny["root"], [*loaded.inputs, "action"])
    rows = np.arange(0, len(frames), 7)
    batch = {k: frames.columns[k][rows] for k in loaded.inputs}
    ours = models.infer(loaded.predict, batch, 5, 0, "act")  # batches of 5: several calls, no carry-over
    first, chunks = _lerobot_own(tiny["policy"], tiny["data"], rows)
    assert ours.shape == (len(rows), CHUNK, ACTION)
    np.testing.assert_allclose(ours[:, 0], first, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours, chunks, rtol=1e-5, atol=1e-5)
    assert np.ptp(ours[:, 0], axis=0).min() > 1e-4  # the inputs reach the output: not a constant


def test_the_stage_scores_it_and_names_a_wrong_width_and_a_missing_processor(tiny, tmp_path):
    wide = _act(tiny["data"].meta, tiny["base"] / "wide", action_width=ACTION + 1)
    bare = shutil.copytree(tiny["policy"], tmp_path / "bare")
    (bare / "policy_postprocessor.json").unlink()
    paths = {"act": tiny["policy"], "wide": wide, "bare": bare}
    specs = [{"name": n, "path": str(p), "loader": LEROBOT} for n, p in paths.items()]
    result = run_stage(str(tiny["root"]), tmp_path / "run", models=specs, samples=32, horizon=CHUNK)
    rows = by_id(result)
    assert not any(k.startswith("error.act") for k in rows), [r.message for r in rows.values()]
    assert any(k.startswith("repeat") and k.endswith("act") for k in rows) or "collapse.act" in rows
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
