"""The lines naming D reach the contract's fingerprint: another D is never a reused result."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from pipeline.cli import deploy_command
from pipeline.record.fingerprint import input_fingerprints
from pipeline.stages.contract.deploy import DEPLOY_INPUTS

TRAIN = ["lerobot-train", "--policy.path=base", "--dataset.repo_id=u/d"]
RECORD = [
    "lerobot-record",
    "--robot.type=so101_follower",
    "--robot.cameras={front: {width: 640, height: 480}}",
]


def filled(tmp_path: Path, training: list[str], deploy: list[str] | None) -> dict:
    cfg = OmegaConf.create(
        {"output_root": str(tmp_path), "training": {"command": training}, "deploy": {"command": deploy}}
    )
    deploy_command.fill(cfg)
    return OmegaConf.to_container(cfg, resolve=True)


def prints(cfg: dict) -> dict[str, str]:
    return input_fingerprints(cfg, DEPLOY_INPUTS, {})[0]


def test_no_d_names_no_file(tmp_path: Path):
    assert filled(tmp_path, TRAIN, None)["deploy"].get("lines") is None


def test_another_deploy_line_or_training_env_is_another_fingerprint(tmp_path: Path):
    base = filled(tmp_path, TRAIN, RECORD)
    assert Path(base["deploy"]["lines"]).is_file()
    assert prints(filled(tmp_path, TRAIN, RECORD)) == prints(base)  # the same lines, the same file
    other = [*RECORD[:2], "--robot.cameras={front: {width: 1280, height: 720}}"]
    assert prints(filled(tmp_path, TRAIN, other))["deploy.lines"] != prints(base)["deploy.lines"]
    env = filled(tmp_path, [*TRAIN, "--env.type=libero"], None)
    env_other = filled(tmp_path, [*TRAIN, "--env.type=libero", "--env.observation_height=256"], None)
    assert prints(env)["deploy.lines"] != prints(env_other)["deploy.lines"] != "none"


def test_a_value_of_d_lerobot_refuses_stops_the_launch_naming_the_flag(tmp_path: Path):
    import pytest

    from pipeline.errors import InputError

    with pytest.raises(InputError, match=r"deploy.command: --dataset.fps='0'"):
        filled(tmp_path, TRAIN, [*RECORD, "--dataset.fps=0"])
    with pytest.raises(InputError, match=r"training.command: --env.type='' names no env type"):
        filled(tmp_path, [*TRAIN, "--env.type="], None)
    assert not list(tmp_path.rglob("deploy_lines.json"))  # refused before anything is written
