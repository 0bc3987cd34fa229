"""The demo's D: its OGBench env described as the demo reads it, and demo=faulty's planted D faults."""

from __future__ import annotations

from omegaconf import OmegaConf

from pipeline.demo import dataset, deploy_env
from pipeline.demo.cameras import FRONT, WRIST
from pipeline.readers.deploy import read_file
from pipeline.record.runfolder import CONF_DIR


def demo(variant: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "demo" / f"{variant}.yaml"), resolve=True)


def test_the_clean_env_matches_and_faulty_renders_front_at_another_size(tmp_path):
    clean = read_file(deploy_env.write(demo("default"), tmp_path))
    assert clean.problem is None and clean.fps == dataset.FPS
    assert clean.features[FRONT].shape == clean.features[WRIST].shape == (3, 64, 64)
    faulty = read_file(deploy_env.write(demo("faulty"), tmp_path))
    assert faulty.features[FRONT].shape == (3, 96, 96) and faulty.features[WRIST].shape == (3, 64, 64)
    swapped = deploy_env.describe({"cameras": {"size": 64}, "deploy": {"faults": {
        "camera_size": {FRONT: 96}, "swap_cameras": [FRONT, WRIST]}}})  # fmt: skip
    assert (
        swapped["features"][WRIST]["shape"] == [3, 96, 96] and swapped["features"][WRIST]["source"] == "front"
    )
