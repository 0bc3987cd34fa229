"""Bit-level comparison of metrics streams written by real training runs."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.stages.determinism import compare


@pytest.fixture(scope="module")
def runs(trained):
    return {name: compare.read_stream(folder / "metrics.jsonl") for name, folder in trained.items()}


def test_same_seed_runs_are_bit_identical(runs):
    found = compare.divergences(runs["a"], runs["b"])
    assert set(found) == {"loss", "grad_norm", "param_digest"} and compare.earliest(found) is None


def test_unseeded_shuffle_diverges_at_step_one_with_its_size(runs):
    hit = compare.earliest(compare.divergences(runs["a"], runs["faulty"]))
    assert hit["step"] == 1 and hit["metric"] == "loss" and hit["dtype"] == "float32"
    assert hit["abs"] > 0 and 0 < hit["rel"] < 1 and hit["ulp"] > 0
    assert "first divergent step 1: loss" in compare.describe(hit)


def test_clock_seed_diverges_and_a_different_seed_differs(runs):
    assert compare.earliest(compare.divergences(runs["a"], runs["clock"]))["step"] == 1
    assert compare.earliest(compare.divergences(runs["a"], runs["control"]))["kind"] in ("value", "digest")


def test_a_missing_step_is_a_divergence(runs):
    shorter = compare.Stream(runs["b"].path, {s: r for s, r in runs["b"].rows.items() if s < 3})
    hit = compare.first_divergence(runs["a"], shorter, "loss")
    assert hit["step"] == 3 and hit["kind"] == "missing in b"


@pytest.mark.parametrize(
    "dtype, np_type", [("float32", np.float32), ("float64", np.float64), ("float16", np.float16)]
)
def test_ulp_distance_counts_representable_values(dtype, np_type):
    x = np_type(0.3)
    up = np.nextafter(x, np_type(1))
    assert compare.ulp_distance(float(x), float(up), dtype) == 1
    assert compare.ulp_distance(float(np.nextafter(np_type(0), np_type(-1))), float(np_type(0)), dtype) == 1
    assert compare.ulp_distance(float("nan"), 1.0, dtype) is None


def test_malformed_stream_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\nnot json\n')
    with pytest.raises(compare.InputError, match=r"metrics.jsonl:2: expected a JSON object"):
        compare.read_stream(path)


def test_camera_policy_twins_are_bit_identical(trained_cameras):
    """The reference trainer on a dataset with the demo's two cameras (AV1, decoded by the frame reader):
    the pixels do not cost determinism, parameters included."""
    runs = {name: compare.read_stream(folder / "metrics.jsonl") for name, folder in trained_cameras.items()}
    found = compare.divergences(runs["a"], runs["b"])
    assert set(found) == {"loss", "grad_norm", "param_digest"} and compare.earliest(found) is None
