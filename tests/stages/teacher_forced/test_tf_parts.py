"""The stage's parts on real files: provenance hashing and manifests, seed rules, repeatability maths,
sample selection, and the typed config's refusals."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pipeline.errors import ConfigError, InputError
from pipeline.stages.config import typed
from pipeline.stages.teacher_forced import TeacherForcedConfig, metrics, provenance, repeatability
from pipeline.stages.teacher_forced.samples import read_frames, select

KEY = "stages.teacher_forced"


def _checkpoint(root):
    (root / "sub").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(b"weights" * 1000)
    (root / "sub" / "config.json").write_text('{"a": 1}')
    return root


def test_manifest_and_expected_digest_match_then_a_changed_file_is_named(tmp_path):
    root = _checkpoint(tmp_path / "ckpt")
    want = hashlib.sha256(b"weights" * 1000).hexdigest()
    log = tmp_path / "merge.log"
    config = provenance.sha256_file(root / "sub/config.json")
    log.write_text(f"# merge log\n{want}  model.safetensors\nsub/config.json {config}\n")
    tree = provenance.tree_digest(provenance.hash_tree(root))
    proof = provenance.verify(root, tree, log)
    assert proof.ok and proof.hashes["model.safetensors"] == want and not proof.unlisted
    (root / "model.safetensors").write_bytes(b"other")
    proof = provenance.verify(root, None, log)
    assert proof.ok is False and set(proof.mismatched) == {"model.safetensors"}
    assert provenance.verify(root, tree, None).ok is False
    assert provenance.verify(root, None, None).ok is None


def test_single_file_checkpoint_and_manifest_paths_that_leave_the_root(tmp_path):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"abc")
    assert provenance.verify(weights, hashlib.sha256(b"abc").hexdigest(), None).ok
    bad = tmp_path / "bad.sha256"
    bad.write_text(f"{'0' * 64}  ../../etc/passwd\n")
    with pytest.raises(InputError, match="leaves the checkpoint root"):
        provenance.read_manifest(bad)
    bad.write_text("model.safetensors not-a-digest\n")
    with pytest.raises(InputError, match=r"line 1: expected 'path sha256'"):
        provenance.read_manifest(bad)


def test_overlapping_repeated_or_odd_estimator_seeds_are_refused():
    model = {
        "name": "flow",
        "path": "/ckpt",
        "loader": "pipeline.demo.teacher_forced:load_policy",
        "seeds": [9301, 7],
    }
    with pytest.raises(ConfigError, match=r"seeds \[9301\] are also seeds of compared artifact 'flow'"):
        typed(TeacherForcedConfig, {"models": [model]}, KEY)
    with pytest.raises(ConfigError, match="unique; repeated"):
        typed(TeacherForcedConfig, {"estimator_seeds": [1, 1, 2, 3]}, KEY)
    with pytest.raises(ConfigError, match="even count >= 4"):
        typed(TeacherForcedConfig, {"estimator_seeds": [1, 2, 3]}, KEY)
    ok = typed(TeacherForcedConfig, {"models": [{**model, "seeds": [0]}]}, KEY)
    assert ok.estimator_seeds == [9300, 9301, 9302, 9303] and ok.samples == 96


def test_config_refusals_name_the_key():
    with pytest.raises(ConfigError, match=r"stages.teacher_forced.resources.gpus_per_node"):
        typed(TeacherForcedConfig, {"device": "cuda"}, KEY)
    assert typed(TeacherForcedConfig, {"device": "cuda", "resources": {"gpus_per_node": 1}}, KEY)
    with pytest.raises(ConfigError, match=r"stages.teacher_forced.baseline"):
        typed(
            TeacherForcedConfig,
            {
                "models": [{"name": "a", "path": "x", "loader": "pipeline.demo.teacher_forced:load_policy"}],
                "baseline": "b",
            },
            KEY,
        )
    with pytest.raises(ConfigError, match=r"models\[0\].loader"):
        typed(TeacherForcedConfig, {"models": [{"name": "a", "path": "x"}]}, KEY)
    with pytest.raises(ConfigError, match=r"stages.teacher_forced.samples"):
        typed(TeacherForcedConfig, {"samples": 2}, KEY)


def test_split_half_separates_stable_from_noisy_rankings():
    rng = np.random.default_rng(0)
    signal = rng.gamma(2.0, size=64)
    stable = signal + 0.01 * rng.normal(size=(4, 64))
    noisy = rng.gamma(2.0, size=(4, 64))
    assert repeatability.split_half(stable)["spearman"] > 0.99
    assert repeatability.split_half(stable)["top25_overlap"] > 0.8
    assert repeatability.split_half(noisy)["spearman"] < 0.5
    with pytest.raises(ValueError, match="even number >= 4"):
        repeatability.split_half(stable[:3])


def test_permutation_control_and_leave_one_out():
    rng = np.random.default_rng(1)
    reference = rng.normal(size=40)
    related = reference + 0.3 * rng.normal(size=40)
    control = repeatability.permutation_control(related, reference, 500, 9100)
    assert control["one_sided_p"] < 0.01 and control["spearman"] > 0.8
    assert repeatability.permutation_control(related, reference, 500, 9100) == control
    assert repeatability.permutation_control(rng.normal(size=40), reference, 500, 9100)["one_sided_p"] > 0.01
    assert repeatability.leave_one_out(related, reference)["all_positive"]


def test_selection_is_stratified_and_seeded(demo):
    frames = read_frames(demo["dataset"], ["observation.state", "action"])
    rows = select(frames, 24, seed=4)
    assert len(set(rows.tolist())) == 24 and np.array_equal(rows, select(frames, 24, seed=4))
    assert np.bincount(frames.episode[rows]).tolist() == [6, 6, 6, 6]
    only = select(frames, 10, seed=4, episodes=[1])
    assert set(frames.episode[only].tolist()) == {1}


def test_subset_gap_collapse_and_paired_difference():
    rng = np.random.default_rng(2)
    errors = np.concatenate([rng.gamma(2.0, 0.1, 40), rng.gamma(2.0, 0.4, 20)])
    labels = ["nominal"] * 40 + ["recovery"] * 20
    gap = metrics.subset_gap(errors, labels)
    assert gap["worst"] == "recovery" and gap["ratio"] > 2.0
    assert metrics.subset_gap(errors, ["all"] * 60) is None
    truth = rng.normal(size=(60, 1, 3))
    flat = np.repeat(truth[:1] * 0 + 0.5, 60, axis=0)
    flat[:, 0, 2] = truth[:, 0, 2]  # one dim still follows the data
    found = metrics.collapse(flat, truth, 0.05)
    assert found["inactive_dims"] == [0, 1] and not found["collapsed"]
    assert metrics.collapse(np.zeros_like(truth), truth, 0.05)["collapsed"]
    result = metrics.paired(errors + 0.05, errors, 500, 0.95, 0)
    assert result["ci"] is None and result["mean_diff"] == pytest.approx(0.05)  # a constant shift
    result = metrics.paired(errors + rng.normal(0.05, 0.02, 60), errors, 500, 0.95, 0)
    assert result["ci"][0] > 0 and result["p"] < 0.001


@pytest.mark.gpu
def test_stage_scores_on_the_gpu(demo, tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    from tests.stages.teacher_forced.helpers import by_id, run_stage

    result = run_stage(demo["dataset"], tmp_path, device="cuda", resources={"gpus_per_node": 1}, samples=24)
    assert by_id(result)["error.base"].verdict == "match" and result.status == "pass"


def test_no_models_and_no_demo_is_skipped(tmp_path):
    from tests.stages.teacher_forced.helpers import run_stage

    result = run_stage(str(tmp_path / "dataset"), tmp_path / "run")
    assert result.status == "skipped" and not result.checks


def test_a_cpu_job_scores_with_the_cpus_it_asked_for(tmp_path):
    """The job's context carries its resources' cpus_per_task, and on the CPU the stage takes that many
    torch threads (not one per core of the node); on a GPU, or outside a job, the count is left alone."""
    import json

    import torch
    from omegaconf import OmegaConf

    from pipeline.cli.compose import compose_command_line
    from pipeline.record.runfolder import RunFolder
    from pipeline.run.jobs import _prepare
    from pipeline.stages.teacher_forced import models

    OmegaConf.save(compose_command_line(["stage=teacher_forced"]).cfg, tmp_path / "config.yaml")
    job = {"fingerprints": {}, "resources": {"cpus_per_task": 3}}
    (tmp_path / "plan.json").write_text(json.dumps({"jobs": {"teacher_forced": job}}))
    ctx = _prepare(RunFolder(tmp_path), "teacher_forced", None)[3]
    assert ctx.cpus == 3
    before = torch.get_num_threads()
    try:
        models.fit_threads("cpu", 1)
        assert torch.get_num_threads() == 1
        models.fit_threads("cuda", 3)
        models.fit_threads("cpu", None)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
