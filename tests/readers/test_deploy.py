"""D read from the lines that name it: a lerobot-record robot line, a lerobot-eval env line, the training
line's `--env.*`, a D file; nothing where none is named, and one problem (never a crash) where D cannot be
read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.readers import deploy
from pipeline.readers.deploy import ARM, ENV_TABLE, read_deployments, read_line
from pipeline.readers.deploy_tables import ENV_TYPES

LEROBOT = importlib.util.find_spec("lerobot") is not None
CAMERAS = (
    "{front: {type: opencv, width: 640, height: 480, fps: 30}, "
    "wrist: {type: opencv, width: 320, height: 240}}"
)


def cfg(training=None, command=None, path=None):
    return OmegaConf.create({"training": {"command": training}, "deploy": {"command": command, "path": path}})


def test_a_record_line_gives_its_cameras_motors_rate_and_rename_map():
    d = read_line(
        [
            "lerobot-record",
            "--robot.type=so101_follower",
            f"--robot.cameras={CAMERAS}",
            "--dataset.fps=15",
            '--dataset.rename_map={"observation.images.front": "observation.images.top"}',
            "--policy.path=outputs/train/checkpoints/last/pretrained_model",
        ]
    )
    assert d.problem is None and d.place == "robot" and d.kind == "so101_follower"
    assert d.features["observation.images.front"].shape == (3, 480, 640)
    assert d.features["observation.images.front"].fps == 30
    assert d.features["observation.images.wrist"].shape == (3, 240, 320)
    assert d.features["observation.images.wrist"].fps is None  # not typed: not guessed
    assert d.features["observation.state"].names == d.features["action"].names == [f"{m}.pos" for m in ARM]
    assert d.fps == 15 and d.rename_map == {"observation.images.front": "observation.images.top"}
    assert set(d.renamed()) == {
        "observation.images.top",
        "observation.images.wrist",
        "observation.state",
        "action",
    }


def test_a_record_line_without_camera_size_or_known_robot_says_what_is_unknown():
    d = read_line(["lerobot-record", "--robot.type=my_own_arm", "--robot.cameras={top: {type: opencv}}"])
    assert d.fps == deploy.RECORD_FPS  # lerobot-record's default loop rate
    assert d.features["observation.images.top"].shape is None
    assert d.features["observation.state"].shape is None and d.features["action"].shape is None
    assert "no width/height" in d.unknown["observation.images.top"]
    assert "my_own_arm" in d.unknown["observation.state"]


def test_an_eval_line_reads_its_env_with_the_size_flags():
    d = read_line(
        [
            "lerobot-eval",
            "--policy.path=ckpt",
            "--env.type=libero",
            "--env.observation_height=256",
            "--env.observation_width=256",
            '--rename_map={"observation.images.image": "observation.images.camera1"}',
        ]
    )
    assert d.problem is None and d.place == "eval" and d.kind == "libero"
    assert d.features["observation.images.image"].shape == (3, 256, 256)
    assert d.features["observation.state"].shape == (8,)  # LIBERO's env processor folds its state keys
    assert d.read_by == (deploy.LEROBOT if LEROBOT else deploy.TABLE)
    assert "observation.images.camera1" in d.renamed()


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["lerobot-eval", "--policy.path=x"], "without --env.type"),
        (["lerobot-eval", "--env.type=no_such_env"], "no_such_env"),
        (["python", "serve.py", "--port=1"], "not lerobot-eval or lerobot-record"),
        (["lerobot-record", "--robot.cameras=[1, 2]"], "not a mapping"),
    ],
)
def test_a_line_that_cannot_be_read_is_one_problem_not_a_crash(argv, problem):
    d = read_line(argv)
    assert d.problem is not None and problem in d.problem
    assert "training.command" not in d.problem  # named as the deploy line


def test_no_line_names_no_d_and_the_training_env_only_where_lerobot_train_builds_it():
    train = ["lerobot-train", "--policy.path=base", "--dataset.repo_id=u/d"]
    assert read_deployments(cfg(training=train)) == []
    found = read_deployments(cfg(training=[*train, "--env.type=pusht"]))
    assert [(d.place, d.kind) for d in found] == [("eval_env", "pusht")]
    assert found[0].features["observation.image"].shape == (3, 384, 384) and found[0].fps == 10
    assert read_deployments(cfg(training=[*train, "--env.type=pusht", "--eval_freq=0"])) == []


def test_a_d_file_is_read_and_a_bad_one_is_a_problem(tmp_path: Path):
    good = tmp_path / "d.json"
    good.write_text(
        json.dumps(
            {"kind": "sim", "fps": 10, "features": {"observation.state": {"role": "state", "shape": [4]}}}
        )
    )
    (d,) = read_deployments(cfg(path=str(good)))
    assert d.place == "env" and d.fps == 10 and d.features["observation.state"].shape == (4,)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    (d,) = read_deployments(cfg(path=str(bad)))
    assert d.problem and str(bad) in d.problem


def test_the_env_table_holds_each_type_at_its_default_size():
    fps, spec, sizes = ENV_TABLE["aloha"]
    features, rate = deploy._env_from_table("aloha", {})
    assert rate == fps == 50 and features["observation.images.top"].shape == (3, 480, 640)
    assert features["observation.state"].shape == (14,)


@pytest.mark.lerobot
@pytest.mark.parametrize("env_type", sorted(ENV_TABLE))
def test_the_table_agrees_with_lerobots_own_env_configs(env_type):
    """The table stands in for lerobot where it is not importable: it must say what lerobot says."""
    pytest.importorskip(
        "lerobot", reason="lerobot is not installed (scripts/test_lerobot.sh builds its venv)"
    )
    flags = {"observation_height": "200", "observation_width": "300"} if ENV_TABLE[env_type][2] else {}
    ours, our_fps = deploy._env_from_table(env_type, flags)
    theirs, their_fps = deploy._env_with_lerobot(env_type, flags, deploy.FIELD)
    assert our_fps == their_fps
    assert {k: (f.role, f.shape) for k, f in ours.items()} == {
        k: (f.role, f.shape) for k, f in theirs.items()
    }


@pytest.mark.lerobot
def test_the_env_types_known_without_lerobot_are_the_ones_it_registers():
    pytest.importorskip(
        "lerobot", reason="lerobot is not installed (scripts/test_lerobot.sh builds its venv)"
    )
    from lerobot.envs.configs import EnvConfig

    assert sorted(EnvConfig.get_known_choices()) == sorted(ENV_TYPES)


@pytest.mark.lerobot
def test_lerobots_robot_class_names_the_motors_or_the_table_does_where_it_needs_its_sdk():
    pytest.importorskip(
        "lerobot", reason="lerobot is not installed (scripts/test_lerobot.sh builds its venv)"
    )
    motors, actions, by = deploy.robot_motors("so101_follower", {})
    assert motors == actions == [f"{m}.pos" for m in ARM] and "lerobot" in by
    motors, _, by = deploy.robot_motors("reachy2", {})  # needs no SDK to be built: its class says
    assert by == "from lerobot's robot class" and "r_gripper.pos" in motors


@pytest.mark.lerobot
def test_only_the_named_robots_module_is_imported_where_it_registers_the_type():
    """In a fresh interpreter (no robot registered yet): reachy2's own module registers it, so the probe
    imports it and nothing else, where lerobot-record imports every robot module (~14 s)."""
    import subprocess
    import sys

    pytest.importorskip(
        "lerobot", reason="lerobot is not installed (scripts/test_lerobot.sh builds its venv)"
    )
    code = (
        "import lerobot.robots as r; from pipeline.readers.deploy_robot import register; "
        "print(register(r, 'reachy2'), 'reachy2' in r.RobotConfig.get_known_choices())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == "True", done.stderr[-2000:]
    assert done.stdout.startswith("['reachy2']") or done.stdout.startswith("[]"), done.stdout


# --- values lerobot's parser refuses: named (flag or field), never a crash, never a soft "unreadable"

RECORD = ["lerobot-record", "--robot.type=so101_follower"]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--dataset.fps=0"], "--dataset.fps='0'"),
        (["--dataset.fps=-30"], "--dataset.fps='-30'"),
        (["--dataset.fps=nan"], "--dataset.fps='nan'"),
        (["--dataset.fps=fast"], "--dataset.fps='fast' is not a number"),
        (["--robot.cameras={front: {type: opencv, width: wide, height: 480}}"], "front.width='wide'"),
        (["--robot.cameras={front: {type: opencv, width: 0, height: 480}}"], "front.width=0"),
        (["--robot.cameras={front: {type: opencv, fps: fast}}"], "front.fps='fast'"),
        (["--robot.cameras={front: opencv}"], "not a camera config"),
        (["--robot.cameras={front: {type: opencv"], "neither JSON nor YAML"),
        (['--dataset.rename_map=["a", "b"]'], "not a mapping"),
    ],
)
def test_a_record_value_lerobot_refuses_is_named(flags, named):
    d = read_line([*RECORD, *flags])
    assert d.invalid and named in d.problem and d.problem.startswith("deploy.command: "), d.problem
    with pytest.raises(deploy.InputError, match="deploy.command") as info:
        deploy.check_values(cfg(command=[*RECORD, *flags]))  # the launch: exit 2, lerobot not imported
    assert named in str(info.value)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--env.type=pusht", "--env.fps=0"], "--env.fps='0'"),
        (["--env.type=libero", "--env.observation_height=abc"], "--env.observation_height='abc'"),
        (["--env.type="], "--env.type='' names no env type"),
    ],
)
def test_an_env_value_lerobot_refuses_is_named_on_either_line(flags, named):
    d = read_line(["lerobot-eval", "--policy.path=x", *flags])
    assert d.invalid and named in d.problem
    train = ["lerobot-train", "--policy.path=base", "--dataset.repo_id=u/d", *flags]
    (on_train,) = read_deployments(cfg(training=train))
    assert on_train.invalid and named in on_train.problem and "training.command" in on_train.problem
    with pytest.raises(deploy.InputError, match="training.command"):
        deploy.check_values(cfg(training=train))


@pytest.mark.skipif(LEROBOT, reason="lerobot is installed: its own registry judges the env type, in the job")
@pytest.mark.parametrize("flags", [["--env.type=nonexistent"], ["--env.type=pusht2", "--env.fps=30"]])
def test_an_env_type_lerobot_does_not_register_is_refused_at_launch_without_lerobot(flags):
    name = flags[0].split("=", 1)[1]
    named = f"--env.type={name!r} is no env type lerobot 0.4.4 knows (aloha, pusht"
    assert named in read_line(["lerobot-eval", "--policy.path=x", *flags]).problem
    train = ["lerobot-train", "--policy.path=base", "--dataset.repo_id=u/d", *flags]
    (on_train,) = read_deployments(cfg(training=train))
    assert on_train.invalid and named in on_train.problem
    for line in (cfg(training=train), cfg(command=["lerobot-eval", *flags])):
        with pytest.raises(deploy.InputError, match="is no env type lerobot 0.4.4 knows"):
            deploy.check_values(line)


def test_an_env_type_lerobot_registers_without_a_table_entry_is_one_soft_problem():
    d = read_line(["lerobot-eval", "--policy.path=x", "--env.type=gym_manipulator"])
    assert not d.invalid and d.features == {}
    assert d.problem is not None and "gym_manipulator" in d.problem


@pytest.mark.parametrize(
    "body, named",
    [
        ({"rename_map": ["a"], "features": {}}, "rename_map=['a'] is not a mapping"),
        (
            {"features": {"observation.state": {"shape": [float("inf")]}}},
            "features.observation.state.shape[0]",
        ),
        ({"fps": 0, "features": {}}, "field fps=0"),
        ({"features": {"observation.state": [4]}}, "features.observation.state is [4], not an object"),
    ],
)
def test_a_d_file_value_no_place_runs_at_is_named(tmp_path: Path, body, named):
    path = tmp_path / "d.json"
    path.write_text(json.dumps(body))  # Infinity is written as JSON's Infinity, as a careless tool would
    (d,) = read_deployments(cfg(path=str(path)))
    assert d.invalid and named in d.problem and str(path) in d.problem
    with pytest.raises(deploy.InputError, match="deploy.path") as info:
        deploy.check_values(cfg(path=str(path)))
    assert named in str(info.value)


def test_a_d_file_that_cannot_be_read_is_refused_at_launch(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"features": {')
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(200 * 2**20)  # sparse: 200 MB to a reader, nothing on disk
    for path in (bad, big, tmp_path / "missing.json"):
        with pytest.raises(deploy.InputError, match="deploy.path") as info:
            deploy.check_values(cfg(path=str(path)))
        assert str(path) in str(info.value)
    good = tmp_path / "d.json"
    good.write_text(json.dumps({"fps": 10, "features": {"observation.state": {"shape": [4]}}}))
    deploy.check_values(cfg(path=str(good), training=["lerobot-train", "--env.type=pusht"]))
