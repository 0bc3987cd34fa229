"""Hydra composition errors are one line and exit 2, like every other refused launch (issue 33)."""

from __future__ import annotations

import pytest

from pipeline.cli.compose import compose_command_line
from tests.conftest import launch


def composition_error(argv: list[str]) -> str | None:
    """The one-line problem the launch would print (None: it composes, or Hydra's own run decides)."""
    return compose_command_line(argv).problem


@pytest.mark.parametrize(
    ("override", "wanted"),
    [
        ("stages.teacher_forced.smples=5", ["stages.teacher_forced.smples", "did you mean samples"]),
        ("stages.teacher_forced.no_such_key=1", ["no such key in 'stages.teacher_forced'", "valid keys:"]),
        ("resources_default.tme=5", ["resources_default.tme", "did you mean time_min"]),
        ("stages.teacher_forced.samples=abc", ["stages.teacher_forced.samples", "converted to Integer"]),
        ("stage=nosuch", ["Could not find 'stage/nosuch'", "options: checkpoint_storage"]),
        ("resources_default.time_min=[1", ["no viable alternative at input '[1'"]),
    ],
)
def test_a_composition_error_is_one_line_naming_the_key(override: str, wanted: list[str]) -> None:
    problem = composition_error(["stage=teacher_forced", override])
    assert problem is not None and "\n" not in problem and "HYDRA_FULL_ERROR" not in problem
    for text in wanted:
        assert text in problem, problem


def test_what_composes_and_what_is_not_a_run_pass_through() -> None:
    assert composition_error(["stage=contract", "stages.teacher_forced.samples=12", "+extra.key=1"]) is None
    assert composition_error(["--help"]) is None
    assert composition_error(["stage=contract", "--cfg", "job"]) is None


def test_a_user_config_dir_is_composed_with_its_groups(tmp_path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("path: /ckpt/mine\n")
    assert composition_error(["--config-dir", str(tmp_path), "model=mine"]) is None
    assert "Could not find 'model/theirs'" in str(composition_error(["-cd", str(tmp_path), "model=theirs"]))


def test_the_launch_exits_2_with_one_line_and_submits_nothing(tmp_path) -> None:
    proc = launch(tmp_path, "stage=teacher_forced", "stages.teacher_forced.no_such_key=1", seed_demo=False)
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, out
    assert out.count("\n") == 0 and "HYDRA_FULL_ERROR" not in out, out
    assert out.startswith("config error: stages.teacher_forced.no_such_key: no such key"), out
    assert not (tmp_path / "preflight").exists()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["stage=contract", "launcher=local", "demo=faulty", "+extra.key=1"],
        ["launcher=slurm", "resources_default.partition=gpu", "stages.teacher_forced.samples=12"],
        ["--config-dir", "USER_DIR", "model=mine", "skip=[determinism]"],
    ],
)
def test_a_plain_run_starts_from_the_config_hydras_own_run_would_pass(
    argv: list[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch skips `@hydra.main`'s two composes for a plain run: same config, flags and all."""
    from omegaconf import OmegaConf

    from pipeline import launch as launch_module

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("path: /ckpt/mine\n")
    argv = [str(tmp_path) if a == "USER_DIR" else a for a in argv]
    passed = []
    monkeypatch.setattr(launch_module, "main_code", lambda cfg: passed.append(cfg) or 0)
    monkeypatch.setattr("sys.argv", ["preflight-launch", *argv])
    with pytest.raises(SystemExit):
        launch_module.main()  # Hydra's own run
    ours = compose_command_line(argv).cfg
    assert ours is not None
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(passed[0])
    assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(passed[0])


def test_what_hydra_must_run_itself_is_left_to_it() -> None:
    for argv in (["--help"], ["stage=contract", "--cfg", "job"], ["-m", "stage=contract"]):
        composed = compose_command_line(argv)
        assert composed.cfg is None and composed.problem is None, argv


def test_everything_after_a_lone_double_dash_is_the_training_command_kept_as_typed():
    from pipeline.cli.compose import split_training_command

    command = [
        "lerobot-train", "--policy.path=lerobot/smolvla_base",
        '--rename_map={"observation.images.front": "observation.images.camera1"}',
        "--dataset.episodes=[0,1,2]", "a,b", "x=y", "${oc.env:HOME}", "back\\slash", "it's", "--", "",
    ]  # fmt: skip
    overrides, got = split_training_command(["stage=contract", "launcher=local", "--", *command])
    assert overrides == ["stage=contract", "launcher=local"] and got == command
    composed = compose_command_line(overrides, got)
    assert composed.problem is None and list(composed.cfg.training.command) == command
    assert compose_command_line(["stage=contract"]).cfg.training.command is None


def test_a_second_double_dash_before_lerobot_record_or_eval_starts_the_deploy_line():
    from pipeline.cli.compose import split_training_command

    training = ["lerobot-train", "--policy.path=base", "--dataset.repo_id=u/d", "--env.type=libero"]
    deploy = [
        "lerobot-record", "--robot.type=so101_follower",
        "--robot.cameras={front: {type: opencv, width: 640, height: 480, fps: 30}}", "--policy.path=${ckpt}",
    ]  # fmt: skip
    overrides, got = split_training_command(["stage=contract", "--", *training, "--", *deploy])
    cfg = compose_command_line(overrides, got).cfg
    assert list(cfg.training.command) == training and list(cfg.deploy.command) == deploy
    line = ["lerobot-eval", "--env.type=pusht"]
    alone = compose_command_line(["stage=contract"], line).cfg
    assert alone.training.command is None and list(alone.deploy.command) == line
    wrapped = ["torchrun", "train.py", "--", "lerobot-trainer-arg"]  # a `--` not before a deploy program
    kept = compose_command_line(["stage=contract"], wrapped).cfg
    assert list(kept.training.command) == wrapped and kept.deploy.command is None
