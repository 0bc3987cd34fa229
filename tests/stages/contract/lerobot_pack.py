"""The real LeRobot 0.4.4 outputs under ../shared/data/real/lerobot-0.4.4 (one folder per policy type,
SOURCES.md says how each was made), and checkpoint folders derived from them for tests: the same files
LeRobot wrote, with the inputs a test needs declared the way LeRobot declares them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PACK = "lerobot-0.4.4"
RECORD = "SamueleSandrini__record-test"  # the dataset every per-type folder was built for
TYPES = (
    "act",
    "diffusion",
    "groot",
    "reward_classifier",
    "sac",
    "tdmpc",
    "vqbet",
    "wall_x",
    "tokenizer_stubbed/pi0",
    "tokenizer_stubbed/pi05",
    "tokenizer_stubbed/pi0_fast",
    "tokenizer_stubbed/smolvla",
    "tokenizer_stubbed/xvla",
)


def policy_folder(real_data: Path, name: str) -> Path:
    return real_data / PACK / name / "pretrained_model"


def with_cameras(source: Path, out: Path, cameras: dict[str, list[int]]) -> Path:
    """A copy of a LeRobot `pretrained_model/` that also reads these cameras, declared as lerobot-train
    declares them: VISUAL input_features in config.json and train_config.json's policy, and the
    normalizer step's features. The state files stay LeRobot's own (their image stats are ImageNet's
    when the dataset config said `use_imagenet_stats`)."""
    shutil.copytree(source, out)
    visual = {key: {"type": "VISUAL", "shape": shape} for key, shape in cameras.items()}
    config = json.loads((out / "config.json").read_text())
    config["input_features"] = {**config["input_features"], **visual}
    (out / "config.json").write_text(json.dumps(config, indent=4))
    train = json.loads((out / "train_config.json").read_text())
    train["policy"]["input_features"] = {**train["policy"]["input_features"], **visual}
    (out / "train_config.json").write_text(json.dumps(train, indent=4))
    for path in out.glob("*processor.json"):
        pipeline = json.loads(path.read_text())
        for step in pipeline["steps"]:
            if "normalizer" in step.get("registry_name", "") and "features" in step.get("config", {}):
                step["config"]["features"] = {**visual, **step["config"]["features"]}
        path.write_text(json.dumps(pipeline, indent=2))
    return out


def exchange_cameras(dataset: Path, out: Path, x: str, y: str) -> Path:
    """A copy of a LeRobot dataset whose two camera video folders are exchanged; meta/ (stats.json
    included) stays the original's, as when videos are mixed up after the stats were written."""
    shutil.copytree(dataset, out)
    videos = out / "videos"
    (videos / x).rename(videos / "_exchange")
    (videos / y).rename(videos / x)
    (videos / "_exchange").rename(videos / y)
    return out
