"""The stage on real LeRobot datasets from ../shared/data/real (v3.0 and v2.1), with a small policy
fitted to each inside the test (CPU torch), next to an untrained one of the same shape."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.demo.policy import DemoPolicy, default_spec, normalize, save_pretrained
from pipeline.stages.teacher_forced import provenance
from pipeline.stages.teacher_forced.models import load_lerobot
from pipeline.stages.teacher_forced.samples import read_frames
from tests.stages.teacher_forced.helpers import by_id, run_stage

STATE, ACTION = "observation.state", "action"
LOADER = "pipeline.demo.teacher_forced:load_policy"
MEAN_STD = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ENV": "MEAN_STD", "ACTION": "MEAN_STD"}


def fit(root: Path, out: Path, steps: int, seed: int = 0) -> Path:
    """Behaviour cloning of state -> action on the real frames (MEAN_STD normalizers from the data)."""
    frames = read_frames(root, [STATE, ACTION])
    stats = {
        k: {"mean": v.mean(axis=0), "std": v.std(axis=0), "min": v.min(axis=0), "max": v.max(axis=0)}
        for k, v in frames.columns.items()
    }
    x = torch.as_tensor(normalize(frames.columns[STATE], stats[STATE], "MEAN_STD"))
    y = torch.as_tensor(normalize(frames.columns[ACTION], stats[ACTION], "MEAN_STD"))
    torch.manual_seed(seed)
    policy = DemoPolicy(x.shape[1], y.shape[1], hidden=64)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (256,), generator=generator)
        loss = torch.nn.functional.mse_loss(policy(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    spec = default_spec(x.shape[1], y.shape[1], norm_map=MEAN_STD)
    return save_pretrained(policy.eval(), stats, out, spec)


@pytest.fixture(scope="module")
def record_test(real_data: Path) -> Path:
    root = real_data / "SamueleSandrini__record-test"
    if not root.is_dir():
        pytest.skip(f"real dataset not present: {root}")
    return root


def test_fitted_policy_beats_an_untrained_one_on_real_v30_data(record_test, tmp_path):
    fitted = fit(record_test, tmp_path / "fitted", steps=300)
    untrained = fit(record_test, tmp_path / "untrained", steps=0, seed=1)
    digest = provenance.tree_digest(provenance.hash_tree(fitted))
    models = [
        {"name": "fitted", "path": str(fitted), "loader": LOADER, "expected_sha256": digest, "seeds": [0]},
        {"name": "untrained", "path": str(untrained), "loader": LOADER, "seeds": [1]},
    ]
    result = run_stage(
        str(record_test),
        tmp_path / "run",
        models=models,
        baseline="fitted",
        subset_episodes={"first": [0, 1], "last": [2, 3]},
    )
    rows = by_id(result)
    assert rows["provenance.fitted"].verdict == "match" and rows["provenance.fitted"].actual == digest
    assert rows["provenance.untrained"].severity == "soft"  # nothing pinned: recorded, not verified
    manifest = json.loads(Path(result.artifacts["samples"]).read_text())
    assert manifest["fingerprint"]["rows"] == 1492 and manifest["fingerprint"]["episodes"] == 4
    assert {s["subset"] for s in manifest["samples"]} == {"first", "last"}
    found = json.loads(Path(result.artifacts["metrics"]).read_text())["models"]
    assert found["fitted"]["gripper_dims"] == [5] and len(found["fitted"]["l1"]) == 6
    assert found["fitted"]["l1_norm_mean"] < found["untrained"]["l1_norm_mean"]
    compare = rows["compare.untrained_vs_fitted"]
    assert compare.evidence["ci"][0] > 0 and compare.evidence["p"] < 0.01
    assert compare.verdict == "mismatch" and compare.severity == "soft"  # far above the baseline: warn


def test_v21_dataset_with_per_episode_files(real_data, tmp_path):
    root = real_data / "YifanTian07__G1-policy-train"
    if not root.is_dir():
        pytest.skip(f"real dataset not present: {root}")
    fitted = fit(root, tmp_path / "fitted", steps=100)
    models = [{"name": "fitted", "path": str(fitted), "loader": LOADER}]
    result = run_stage(
        str(root), tmp_path / "run", models=models, samples=48, episodes=[3, 4, 5], plots=False
    )
    manifest = json.loads(Path(result.artifacts["samples"]).read_text())
    assert manifest["fingerprint"]["rows"] == 35965
    assert {s["episode"] for s in manifest["samples"]} == {3, 4, 5}
    assert by_id(result)["collapse.fitted"].verdict in ("match", "mismatch")
    assert np.isfinite(
        json.loads(Path(result.artifacts["metrics"]).read_text())["models"]["fitted"]["l1_norm_mean"]
    )


@pytest.mark.skipif(
    importlib.util.find_spec("lerobot") is None, reason="optional package 'lerobot' not installed"
)
def test_lerobot_adapter_refuses_a_directory_without_a_policy(tmp_path):
    with pytest.raises(Exception):  # noqa: B017 - lerobot's own error for a directory with no config.json
        load_lerobot(str(tmp_path), "cpu")


def test_lerobot_loader_names_the_missing_package(tmp_path):
    if importlib.util.find_spec("lerobot") is not None:
        pytest.skip("lerobot is installed: the missing-package message cannot be shown")
    with pytest.raises(Exception, match="optional 'lerobot' package"):
        load_lerobot(str(tmp_path), "cpu")
