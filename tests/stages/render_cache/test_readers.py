"""Release and cache readers, bounds and the merge: no rendering."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import ConfigError, InputError
from pipeline.stages.config import typed
from pipeline.stages.render_cache import budget, cache, release, rows, stats
from pipeline.stages.render_cache.config import RenderCacheConfig


def _manifest(root: Path, budget_: int, lines: list[object]) -> None:
    path = root / "subsets" / f"subset-{budget_:04d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_manifest_path_escaping_release_is_refused(tmp_path: Path) -> None:
    _manifest(tmp_path, 1, [{"archive_file": "../../secret.npz", "transition_count": 3}])
    with pytest.raises(InputError) as err:
        release.read_manifest(tmp_path, "subsets/subset-{budget:04d}.jsonl", 1, "data")
    assert err.value.field == "archive_file" and "outside the release" in str(err.value)
    assert err.value.path.endswith("subset-0001.jsonl")


def test_manifest_missing_and_bad_fields_name_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist") as err:
        release.read_manifest(tmp_path, "subsets/subset-{budget:04d}.jsonl", 7, "data")
    assert err.value.field == "manifest"
    _manifest(tmp_path, 1, [{"archive_file": "a.npz", "transition_count": "3"}])
    with pytest.raises(InputError, match="transition_count") as err:
        release.read_manifest(tmp_path, "subsets/subset-{budget:04d}.jsonl", 1, "data")
    assert err.value.field == "transition_count" and ":1" in str(err.value)


def test_npz_episode_refuses_pickles_and_checks_lengths(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    np.savez(
        tmp_path / "data" / "a.npz",
        qpos=np.zeros((4, 2)),
        qvel=np.zeros((3, 2)),
        obj=np.array([{}], dtype=object),
    )
    entry = release.Entry("a.npz", 3, tmp_path / "data" / "a.npz")
    with pytest.raises(InputError) as err, release.open_episode(entry, ("qpos", "qvel")):
        pass
    assert err.value.field == "qvel" and "has 3 rows" in str(err.value)
    with pytest.raises(InputError, match="'obj' unreadable"), release.open_episode(entry, ()) as ep:
        ep["obj"]


def test_hdf5_episode_reads_like_npz(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / "e.h5", "w") as f:
        f["qpos"] = np.arange(6.0).reshape(3, 2)
        f["qvel"] = np.zeros((3, 2))
    with release.open_episode(release.Entry("e.h5", 2, tmp_path / "e.h5"), ("qpos", "qvel")) as ep:
        assert ep["qpos"][2].tolist() == [4.0, 5.0]
    with (
        pytest.raises(InputError) as err,
        release.open_episode(release.Entry("e.h5", 2, tmp_path / "e.h5"), ("action",)),
    ):
        pass
    assert err.value.field == "action"


def test_truncated_npy_names_file(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.zeros((10, 8, 8, 3), np.uint8))
    data = (tmp_path / "f.npy").read_bytes()
    (tmp_path / "f.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        cache.load_npy(tmp_path / "f.npy", "frames")
    assert err.value.field == "frames" and str(tmp_path / "f.npy") in str(err.value)


def test_clopper_pearson_bounds() -> None:
    assert stats.upper_bound(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert 2.9 / 100 < stats.upper_bound(0, 100) < 3.1 / 100  # the rule of three
    assert stats.upper_bound(0, 0) is None and stats.upper_bound(5, 5) == 1.0
    assert stats.upper_bound(1, 100) > stats.upper_bound(0, 100)
    n = stats.sample_size(10_000, None, 0.01)  # no count: sized from the rate
    assert n == 299 and stats.upper_bound(0, n) <= 0.01 < stats.upper_bound(0, n - 1)
    assert stats.sample_size(40, 64, None) == 40


def test_config_validation_names_the_key() -> None:
    with pytest.raises(ConfigError, match="stages.render_cache.pairing"):
        typed(RenderCacheConfig, {"pairing": "sideways"}, "stages.render_cache")
    with pytest.raises(ConfigError, match="max_mismatch_rate"):
        typed(RenderCacheConfig, {"max_mismatch_rate": 1.5}, "stages.render_cache")
    assert typed(RenderCacheConfig, {"shards": 3, "budgets": [1, 2]}, "k").tasks() == 6


def test_nested_detects_non_prefix(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    _manifest(tmp_path, 1, [{"archive_file": "b.npz", "transition_count": 1}])
    _manifest(
        tmp_path,
        2,
        [{"archive_file": "a.npz", "transition_count": 1}, {"archive_file": "b.npz", "transition_count": 1}],
    )
    cfg = typed(RenderCacheConfig, {"budgets": [1, 2]}, "k")
    found = budget.nested(cfg, tmp_path)
    assert found == [{"small": 1, "large": 2, "is_prefix": False, "first_difference": 0}]
    assert rows.nested_row(found).verdict == "mismatch"


def test_merge_of_any_split_gives_the_same_rows() -> None:
    cfg = typed(RenderCacheConfig, {"budgets": [1]}, "k")
    eps = [{"episode": i, "file": f"{i}.npz", "checked": 3, "actions": None} for i in range(4)]
    frames = [{"row": i, "class": "exact", "max_abs": 0, "mean_abs": 0.0} for i in range(6)]
    whole = rows.merge([{"budget": 1, "part": [0, 1], "episodes": eps, "frames": frames, "hires": {}}])
    split = rows.merge(
        [
            {"budget": 1, "part": [1, 2], "episodes": eps[2:], "frames": frames[3:], "hires": {}},
            {"budget": 1, "part": [0, 2], "episodes": eps[:2], "frames": frames[:3], "hires": {}},
        ]
    )
    assert whole == split
    assert rows.frame_rows(cfg, "f", "b", whole["frames"], 64) == rows.frame_rows(
        cfg, "f", "b", split["frames"], 64
    )


def test_software_renderer_on_a_gpu_node_is_a_finding_fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the node's GPU is faked (gpu_present), the GL strings are what llvmpipe reports."""
    from pipeline.stages.render_cache import gap

    cfg = typed(RenderCacheConfig, {}, "k")
    soft = [{"GL_RENDERER": "llvmpipe (LLVM 15.0.6, 256 bits)", "MUJOCO_GL": "egl", "software": True}]
    monkeypatch.setattr(gap, "gpu_present", lambda: True)
    row = gap.gl_row(cfg, soft)
    assert row.verdict == "mismatch" and row.severity == "soft" and "software GL renderer" in row.message
    monkeypatch.setattr(gap, "gpu_present", lambda: False)
    assert gap.gl_row(cfg, soft).verdict == "match"
    wrong = [{**soft[0], "MUJOCO_GL": "osmesa"}]
    assert "not the configured 'egl'" in gap.gl_row(cfg, wrong).message


def test_no_release_and_no_cache_is_skipped_not_blocking(tmp_path: Path) -> None:
    """A run that trains on no frame cache: `stage=full` must not block on render_cache."""
    from omegaconf import OmegaConf

    import pipeline.stages.render_cache as stage
    from pipeline.stages import StageContext

    cfg = OmegaConf.create({"release": {"path": None}, "cache": {"path": None}, "stages": {}})
    ctx = StageContext(run_dir=tmp_path, stage="render_cache", config=typed(RenderCacheConfig, {}, "k"))
    result = stage.run(cfg, ctx)
    assert result.status == "skipped" and "release.path" in result.provenance["reason"]
    cfg.release.path = str(tmp_path)  # one without the other is an error naming the missing key
    with pytest.raises(InputError, match="cache.path"):
        stage.run(cfg, ctx)
