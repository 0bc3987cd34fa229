"""The embedded demo: deterministic generation, LeRobot-style files, reuse, and a reload round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file

from pipeline.demo import ensure
from pipeline.demo.build import build, plant_faults
from pipeline.demo.dataset import (
    ACTION_NAMES,
    STATE_NAMES,
    camera_frames,
    generate_episodes,
    read_frames,
)
from pipeline.demo.policy import DemoPolicy, load_pretrained, normalize, save_pretrained, unnormalize
from pipeline.readers import ScanOptions, read_dataset, read_model

SMALL = {"variant": "default", "seed": 3, "episodes": 2, "steps": 40, "train_steps": 20, "hidden": 16}

OPTIONS = ScanOptions(rank_error=1e-3, dynamics_rows=50_000)  # the contract stage's defaults


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build(SMALL, tmp_path_factory.mktemp("demo") / "default")


def test_generation_is_deterministic() -> None:
    a, b = generate_episodes(1, 25, seed=7), generate_episodes(1, 25, seed=7)
    for key in ("state", "env_state", "action"):
        np.testing.assert_array_equal(a[0][key], b[0][key])
    assert not np.array_equal(a[0]["state"], generate_episodes(1, 25, seed=8)[0]["state"])


def test_dataset_is_lerobot_v30(small: dict[str, str]) -> None:
    root = Path(small["dataset"])
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == 80 and info["total_episodes"] == 2
    assert info["features"]["observation.state"]["names"] == STATE_NAMES
    assert info["features"]["action"]["names"] == ACTION_NAMES
    stats = json.loads((root / "meta/stats.json").read_text())
    assert sorted(stats["action"]) == sorted(
        ["mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99", "count"]
    )
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["length"] for e in episodes] == [40, 40] and episodes[1]["dataset_from_index"] == 40
    assert pq.read_table(root / "meta/tasks.parquet").column("task_index").to_pylist() == [0]
    frames = read_frames(root)
    assert frames["observation.state"].shape == (80, 11) and frames["action"].shape == (80, 5)
    c = read_dataset(root, OPTIONS)
    np.testing.assert_allclose(c.recomputed["action"]["mean"], stats["action"]["mean"])


def test_checkpoint_is_lerobot_style_and_reloads(small: dict[str, str], tmp_path: Path) -> None:
    model = Path(small["model"])
    config = json.loads((model / "config.json").read_text())
    assert config["normalization_mapping"]["STATE"] == "QUANTILES"
    pre = json.loads((model / "policy_preprocessor.json").read_text())
    step = next(s for s in pre["steps"] if s["registry_name"] == "normalizer_processor")
    keys = load_file(str(model / step["state_file"]))
    assert "observation.state.q01" in keys and "action.q99" in keys
    loaded = load_pretrained(model)
    assert loaded.cameras() == ["observation.images.front", "observation.images.wrist"]
    obs = read_frames(small["dataset"])
    for key, frames in camera_frames(small["dataset"], loaded.cameras()).items():  # the loader's view
        obs[key] = np.moveaxis(frames, -1, 1).astype(np.float32) / 255.0
    actions = loaded.act({k: obs[k][:5] for k in loaded.spec.input_features})
    assert actions.shape == (5, 5) and np.all(np.isfinite(actions))
    save_pretrained(loaded.policy, loaded.stats, tmp_path / "again", loaded.spec)
    again = load_pretrained(tmp_path / "again")
    np.testing.assert_array_equal(again.act({k: obs[k][:5] for k in again.spec.input_features}), actions)
    a = read_model(model)
    assert a.kind == "lerobot" and set(a.stats) == {
        "observation.state",
        "observation.environment_state",
        "observation.images.front",
        "observation.images.wrist",
        "action",
    }


def test_normalize_round_trip() -> None:
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)
    stats = {
        "mean": x.mean(0),
        "std": x.std(0),
        "min": x.min(0),
        "max": x.max(0),
        "q01": x.min(0),
        "q99": x.max(0),
    }
    for mode in ("MEAN_STD", "MIN_MAX", "QUANTILES", "IDENTITY"):
        np.testing.assert_allclose(
            unnormalize(normalize(x, stats, mode), stats, mode), x, rtol=1e-5, atol=1e-5
        )
    assert DemoPolicy(4, 2, 8)(__import__("torch").zeros(3, 4)).shape == (3, 2)


def test_plant_faults_changes_only_the_named_dims() -> None:
    episodes = [
        {
            "state": np.arange(12, dtype=np.float32).reshape(2, 6),
            "env_state": np.zeros((2, 4), np.float32),
            "action": np.ones((2, 5), np.float32),
        }
    ]
    out = plant_faults(episodes, {"swap_state_dims": [3, 4], "degrees_action_dims": [3]})
    assert out[0]["state"][0].tolist() == [0, 1, 2, 4, 3, 5]
    assert out[0]["action"][0].tolist() == pytest.approx([1, 1, 1, 57.29578, 1], rel=1e-6)
    assert episodes[0]["state"][0].tolist() == [0, 1, 2, 3, 4, 5]


def test_plant_faults_runs_one_clock_back_and_records_one_episode_twice() -> None:
    episodes = [
        {"state": np.zeros((8, 2), np.float32), "action": np.full((8, 1), k, np.float32)} for k in (0, 1)
    ]
    out = plant_faults(episodes, {"backwards_time_episode": 0, "duplicate_episode": 1})
    assert len(out) == 3 and out[2]["action"].tolist() == out[1]["action"].tolist()
    assert (np.diff(out[0]["timestamp"]) < 0).sum() == 1 and "timestamp" not in out[1]
    small = plant_faults(episodes, {"backwards_time_episode": 7, "duplicate_episode": 5})  # 2 episodes
    assert (
        len(small) == 3
        and "timestamp" in small[1]
        and small[2]["action"].tolist() == small[0]["action"].tolist()
    )


def test_plant_faults_shifts_one_camera_by_whole_episodes() -> None:
    """Episode e's frames under the key become episode e+1's (round the end), each keeping its length."""
    episodes = [
        {"cam": 10 * k + np.arange(n)[:, None], "state": np.full((n, 1), k)} for k, n in enumerate((3, 4, 2))
    ]
    out = plant_faults(episodes, {"episode_shift_camera": {"cam": 1}})
    assert [e["cam"][:, 0].tolist() for e in out] == [[10, 11, 12], [20, 21, 21, 21], [0, 1]]
    assert [e["state"][:, 0].tolist() for e in out] == [e["state"][:, 0].tolist() for e in episodes]
    assert episodes[0]["cam"][:, 0].tolist() == [0, 1, 2]  # the input is left as it was


def test_ensure_builds_once_and_rebuilds_on_change(tmp_path: Path) -> None:
    # settings of its own (SMALL is the module's, built once): one short episode and no cameras
    tiny = {**SMALL, "episodes": 1, "steps": 20, "cameras": {"size": 0}}
    first = ensure(tiny, tmp_path)
    marker = Path(first["model"]).parent / "demo.json"
    stamp = marker.stat().st_mtime_ns
    assert ensure(tiny, tmp_path) == first and marker.stat().st_mtime_ns == stamp
    changed = ensure({**tiny, "train_steps": 5}, tmp_path)
    assert changed == first and json.loads(marker.read_text())["settings"]["train_steps"] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["default"]  # no scratch directories left behind


def test_the_teacher_forced_view_of_a_checkpoint_is_the_checkpoint(small) -> None:
    """DemoModel folds the normalizers into the net and applies the cameras' affine after their pooling:
    the same function as the saved policy behind its own normalizers (float rounding aside)."""
    from pipeline.demo.teacher_forced import load_policy

    loaded, model = load_pretrained(small["model"]), load_policy(small["model"], "cpu")
    assert model.cameras, "the small demo has cameras"
    rng = np.random.default_rng(0)
    batch = {
        k: rng.uniform(size=(6, *f["shape"])).astype(np.float32) if k in model.cameras
        else rng.normal(size=(6, *f["shape"])).astype(np.float32)
        for k, f in loaded.spec.input_features.items()
    }  # fmt: skip
    for array in batch.values():
        array.flags.writeable = False  # as the stage hands them over
    got = np.asarray(model.predict(batch))
    assert np.allclose(got, loaded.act(batch), rtol=1e-4, atol=1e-4), np.abs(got - loaded.act(batch)).max()
