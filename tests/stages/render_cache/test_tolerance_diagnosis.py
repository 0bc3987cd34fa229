"""Issue 27: the calibrated tolerance, one diagnosis per fault, high-resolution order from content, and a
GPU asked for when the cache was rendered on one.

Faults are planted by editing cached frames with numpy; the re-render side is real MuJoCo rendering of
the clean demo (64 px). One Renderers serves the session (conftest `rs`): its memo renders each state
once across tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.stages.render_cache import budget, release, rows
from pipeline.stages.render_cache.diagnose import lighting
from pipeline.stages.render_cache.partial import Renderers, episode_range
from pipeline.stages.render_cache.tolerance import compare, resize, within
from tests.stages.render_cache.helpers import config

FRAMES, META = "pix_b0002_frames.npy", "pix_b0002_meta.npz"


def _copy(demo: Path, tmp_path: Path) -> Path:
    shutil.copytree(demo, tmp_path / "d")
    return tmp_path / "d"


def _run(root: Path, rs: Renderers, **overrides: object) -> dict:
    """budget 2 (8 rows, every one sampled) checked as the stage does; its rows by id."""
    cfg = config(budgets=[2], **overrides)
    got = rows.merge([episode_range(cfg, root / "release", root / "cache", 2, (0, 1), rs)])
    facts = budget.facts(cfg, root / "release", root / "cache", 2)
    return {c.id.removeprefix("render_cache."): c for c in rows.budget_rows(cfg, 2, facts, got)}


def _noise(frame: np.ndarray, rng: np.random.Generator, levels: int, fraction: float) -> np.ndarray:
    """The synthetic driver-noise model: +/-levels on `fraction` of the pixels (every channel)."""
    out = frame.astype(np.int16)
    hit = rng.random(frame.shape[:2]) < fraction
    out[hit] += rng.choice([-levels, levels], size=(int(hit.sum()), 1))
    return np.clip(out, 0, 255).astype(np.uint8)


def _noise_per_channel(
    frame: np.ndarray, rng: np.random.Generator, levels: int, fraction: float
) -> np.ndarray:
    """Driver noise rounded per channel: +/-levels on `fraction` of the values, each channel alone."""
    out = frame.astype(np.int16)
    hit = rng.random(frame.shape) < fraction
    out[hit] += rng.choice([-levels, levels], size=int(hit.sum()))
    return np.clip(out, 0, 255).astype(np.uint8)


def test_noise_spread_over_channels_is_inside_the_band_and_small_faults_are_not() -> None:
    tol = config().tolerance
    rng = np.random.default_rng(2)
    frame = rng.integers(20, 230, (64, 64, 3), dtype=np.uint8)
    noisy = _noise_per_channel(frame, rng, 2, 0.03)
    assert np.mean(np.abs(noisy.astype(int) - frame).max(-1) > 0) > 0.08  # ~8.7 % of pixels touched
    assert within(compare(frame, noisy), tol), compare(frame, noisy)
    assert not within(compare(frame, _noise_per_channel(frame, rng, 2, 0.12)), tol)
    for fault in (frame[..., ::-1], np.roll(frame, 1, axis=1), np.clip(frame.astype(int) + 20, 0, 255)):
        assert not within(compare(frame, np.ascontiguousarray(fault, dtype=np.uint8)), tol)


def test_the_tolerance_bounds_each_cut_on_their_own() -> None:
    tol = config().tolerance
    rng = np.random.default_rng(0)
    frame = rng.integers(20, 230, (64, 64, 3), dtype=np.uint8)
    assert within(compare(frame, _noise(frame, rng, 2, 0.03)), tol)
    assert not within(compare(frame, _noise(frame, rng, 3, 0.03)), tol)  # per-pixel bound
    assert not within(compare(frame, _noise(frame, rng, 2, 0.12)), tol)  # differing-fraction bound
    assert not within(compare(frame, frame + 20), tol)  # lighting offset
    shifted, offsets = lighting(np.clip(frame.astype(int) + [9, -4, 0], 0, 255).astype(np.uint8), frame)
    assert (
        offsets == [9, -4, 0]
        and compare(shifted, np.clip(frame.astype(int) + [9, -4, 0], 0, 255))["max_abs"] == 0
    )
    assert resize(np.repeat(np.repeat(frame, 2, 0), 2, 1), 64, "area").tolist() == frame.tolist()


@pytest.mark.render
def test_renderer_noise_clears_with_its_tolerance_row_naming_both_renderers(
    clean_demo: Path, tmp_path: Path, rs: Renderers
) -> None:
    root = _copy(clean_demo, tmp_path)
    frames = np.load(root / "cache" / FRAMES)
    rng = np.random.default_rng(1)
    np.save(root / "cache" / FRAMES, np.stack([_noise(f, rng, 2, 0.03) for f in frames]))
    with np.load(root / "cache" / META) as z:
        np.savez(root / "cache" / META, **{**dict(z), "gl_renderer": np.array("NVIDIA H100/PCIe/SSE2")})
    row = _run(root, rs)["frames.b2.rerender"]
    assert row.verdict == "match", row.message
    assert row.evidence["within_tolerance"] == 8 and row.evidence["tolerance"]["pixel"] == 2
    assert "8 within tolerance" in row.message and "PSNR >= 40 dB" in row.message
    assert row.evidence["renderer"]["cache"] == "NVIDIA H100/PCIe/SSE2"
    assert row.evidence["renderer"]["check"] and "NVIDIA H100" in row.message
    loud = _run(root, rs, tolerance={"pixel": 1}, diagnosis={"frames": 0})[
        "frames.b2.rerender"
    ]  # the same noise, a tighter band
    assert loud.verdict == "mismatch" and loud.blocking


@pytest.mark.render
def test_each_fault_gets_its_own_diagnosis(clean_demo: Path, tmp_path: Path, rs: Renderers) -> None:
    root = _copy(clean_demo, tmp_path)
    frames = np.load(root / "cache" / FRAMES)
    with np.load(root / "release" / "data" / "episode-0001.npz") as z:
        ep = {k: z[k] for k in ("qpos", "qvel")}
    entry = release.read_manifest(root / "release", config().manifest, 2, "data")[1]
    orig = frames.copy()
    frames[0] = orig[2]  # episode 0's row 2 (a shift the +-1 order check does not cover)
    frames[3] = orig[7]  # the same row of episode 1 (episodes swapped)
    frames[1] = frames[1][..., ::-1]  # BGR
    frames[2] = np.clip(frames[2].astype(np.int16) + 20, 0, 255)  # lighting
    frames[5] = rs.at(64).state(ep["qpos"][1], ep["qvel"][1], camera="front")  # another camera
    frames[6] = resize(rs.frame(ep, entry, 2, "state", 32), 64, "area")  # rendered at 32 px, resized
    np.save(root / "cache" / FRAMES, frames)
    row = _run(root, rs, diagnosis={"frames": 6})["frames.b2.rerender"]
    assert row.verdict == "mismatch" and row.blocking
    found = {d["row"]: d["explanation"] for d in row.evidence["diagnosis"]}
    assert found == {
        0: "shift:+2",
        1: "bgr",
        2: "lighting[20, 20, 20]",
        3: "episode:episode-0001.npz",
        5: "camera:front",
        6: "resized:32",
    }, found
    for words in ("channels reversed (BGR)", "lighting", "another camera of the scene: front", "from 32"):
        assert words in row.message, row.message
    assert all(d["fits"] and d["fit"]["max_abs"] <= 2 for d in row.evidence["diagnosis"])


@pytest.mark.render
def test_high_resolution_frames_reordered_under_copied_metadata_block(
    clean_demo: Path, tmp_path: Path, rs: Renderers
) -> None:
    root = _copy(clean_demo, tmp_path)
    base = np.load(root / "cache" / FRAMES)
    hires = np.repeat(np.repeat(base, 2, 1), 2, 2)  # a 128 px cache whose area reduction is the base
    shutil.copy(root / "cache" / META, root / "cache" / "vla_b0002_meta.npz")  # metadata copied as is
    spec = {"size": 128, "frames": "vla_b{budget:04d}_frames128.npy", "sample": 0}
    np.save(root / "cache" / "vla_b0002_frames128.npy", hires)
    assert _run(root, rs, hires=[spec])["hires128.order.b2"].verdict == "match"
    np.save(root / "cache" / "vla_b0002_frames128.npy", hires[[0, 2, 1, 3, 4, 5, 6, 7]])
    row = _run(root, rs, hires=[spec])["hires128.order.b2"]
    assert row.verdict == "mismatch" and row.blocking, row.message
    assert row.evidence["actions_identical"] and row.evidence["traj_ids_identical"]  # metadata agrees
    assert [[m["row"], m["closest"]] for m in row.evidence["content_out_of_order"]] == [[1, 2], [2, 1]]
    assert "row 1 is closest to row 2" in row.message


def test_a_cache_rendered_on_a_gpu_asks_a_gpu_for_the_stage_and_its_tasks() -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pipeline import launch, stages
    from pipeline.run import plan

    stages.load()
    GlobalHydra.instance().clear()
    conf = Path(launch.__file__).parent / "conf"
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            gpu = compose("config", overrides=["stages.render_cache.rendered_on=gpu"])
            cpu = compose("config", overrides=[])
            pinned = compose(
                "config",
                overrides=[
                    "stages.render_cache.rendered_on=gpu",
                    "stages.render_cache.resources.gpus_per_node=4",
                ],
            )
    finally:
        GlobalHydra.instance().clear()
    assert plan.resources(gpu, "render_cache")["gpus_per_node"] == 1
    assert plan.resources(gpu, "render_cache", "task")["gpus_per_node"] == 1
    assert not plan.resources(cpu, "render_cache")["gpus_per_node"]
    assert plan.resources(pinned, "render_cache")["gpus_per_node"] == 4
    assert stages.stage_config(gpu, "render_cache").resources.gpus_per_node == 1


@pytest.mark.parametrize(
    "section, key",
    [
        ({"rendered_on": "tpu"}, "stages.render_cache.rendered_on"),
        ({"tolerance": {"max_fraction": 2.0}}, "stages.render_cache.tolerance"),
        ({"diagnosis": {"resize": "lanczos9"}}, "stages.render_cache.diagnosis.resize"),
        ({"diagnosis": {"resize_factors": [0]}}, "stages.render_cache.diagnosis"),
    ],
)
def test_a_bad_tolerance_or_diagnosis_setting_names_its_key(section: dict, key: str) -> None:
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config(**section)
    assert info.value.key == key, str(info.value)
