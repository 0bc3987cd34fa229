"""The training command template: argv substitution element by element, never a shell string; with no
template, the lerobot-train command typed after `--` run through `pipeline.trainers.lerobot_train` with
the stage's seed, steps and output folder put in (refused at launch where lerobot is not importable)."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError, InputError
from pipeline.stages.config import typed
from pipeline.stages.determinism import runner
from pipeline.stages.determinism.config import DeterminismConfig
from tests.in_process_launch import launch_here

VALUES = {"seed": "0", "out": "/tmp/o", "dataset": "/data/a b; rm -rf ~"}


def settings(**overrides: object) -> DeterminismConfig:
    return typed(DeterminismConfig, overrides, "stages.determinism")


def test_placeholders_fill_one_element_each_and_shell_syntax_stays_data():
    argv = runner.substitute(
        ["python", "train.py", "--data={dataset}", "--seed", "{seed}", "{out}"], VALUES, "k"
    )
    assert argv == ["python", "train.py", "--data=/data/a b; rm -rf ~", "--seed", "0", "/tmp/o"]


@pytest.mark.parametrize(
    "template, message",
    [
        ("python train.py --seed {seed}", "a shell string is not accepted"),
        ([], "non-empty argv list"),
        (["python", "{sede}"], r"k\[1\]: unknown placeholder \{sede\}"),
        (["python", {"a": 1}], r"k\[1\]: expected a string"),
    ],
)
def test_bad_templates_are_input_errors_naming_the_key(template, message):
    with pytest.raises(InputError, match=message):
        runner.substitute(template, VALUES, "k")


def test_torchrun_command_is_derived_from_a_module_or_script_command():
    scfg = settings(ddp_procs=2, ddp_cmd=None)
    module = runner.ddp_argv(scfg, ["/usr/bin/python3", "-m", "pkg.train", "--seed", "0"], VALUES)
    assert module[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert module[5:] == ["-m", "pkg.train", "--seed", "0"]
    assert runner.ddp_argv(scfg, ["python", "train.py"], VALUES)[-1] == "train.py"
    with pytest.raises(InputError, match="ddp_cmd"):
        runner.ddp_argv(scfg, ["accelerate", "launch", "train.py"], VALUES)
    custom = settings(ddp_procs=4, ddp_cmd=["torchrun", "--nproc_per_node={nproc}", "t.py"])
    assert runner.ddp_argv(custom, [], VALUES) == ["torchrun", "--nproc_per_node=4", "t.py"]


def test_child_env_sets_determinism_switches_and_records_them():
    scfg = settings(
        env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": None},
        deterministic_algorithms=True,
        warn_only=True,
    )
    env, chosen = runner.child_env(scfg)
    assert chosen == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTHONHASHSEED": "0",
        "PREFLIGHT_DETERMINISTIC": "warn",
    }
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and "PATH" in env


def test_fault_is_explicit_and_none_by_default():
    cfg = OmegaConf.create({"demo": {"variant": "faulty"}, "stages": {"determinism": {}}})
    assert runner.fault_for(cfg) == "none"  # the stage never reads the demo's variant
    cfg.stages.determinism.fault = "unseeded_shuffle"
    assert runner.fault_for(cfg) == "unseeded_shuffle"
    for bad in ("sometimes", "auto"):
        cfg.stages.determinism.fault = bad
        with pytest.raises(InputError, match="stages.determinism.fault"):
            runner.fault_for(cfg)


def test_defaults_name_no_trainer_and_no_loader():
    config = settings()
    assert config.train_cmd == [] and config.reload.loader is None and config.fault == "none"


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"steps": 0}, "stages.determinism.steps"),
        ({"timeout_s": 0}, "stages.determinism.timeout_s"),
        ({"ddp_procs": 0}, "stages.determinism.ddp_procs"),
        ({"steps": "many"}, "stages.determinism.steps"),
        ({"metrics_file": "../escape.jsonl"}, "stages.determinism.metrics_file"),
        ({"reload": {"loader": "no_function_here"}}, "stages.determinism.reload.loader"),
        ({"reload": {"norm_key_pattern": "(unclosed"}}, "stages.determinism.reload.norm_key_pattern"),
        (
            {"part_resources": {"ddp": {"gpus_per_node": -1}}},
            "stages.determinism.part_resources.ddp.gpus_per_node",
        ),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        settings(**overrides)
    assert info.value.key == key and str(info.value).startswith(f"{key}: ")


def missing(cfg: object) -> tuple[str, ...]:
    from pipeline import stages

    return stages.missing_keys(stages.load()["determinism"], cfg)


# the line a LeRobot user types after `--`: a Hub base, a repo id, JSON, and values the smoke run replaces
LEROBOT_LINE = [
    "--policy.path=lerobot/smolvla_base",
    "--dataset.repo_id=me/so101_pick",
    '--rename_map={"observation.images.front": "observation.images.camera1"}',
    "--batch_size=64",
    "--steps=200000",
    "--seed",
    "7",
    "--output_dir=outputs/train/pick",
    "--save-freq=20000",
    "--wandb.enable=true",
    "--policy.push_to_hub=true",
]


@pytest.mark.parametrize("program", [["lerobot-train"], ["python3", "-m", "lerobot.scripts.lerobot_train"]])
def test_a_lerobot_train_command_is_the_smoke_run_with_the_stages_seed_steps_and_output(program):
    from pipeline.trainers.lerobot_train import lerobot_argv, parse_args

    cfg = OmegaConf.create({"training": {"command": [*program, *LEROBOT_LINE]}, "dataset": {"path": "/d"}})
    config = settings(seed=3, steps=5)
    values = runner.placeholder_values(cfg, config, 3, Path("/runs/twin_a/run"))
    argv = runner.train_argv(cfg, config, values)
    wrapper = [sys.executable, "-m", "pipeline.trainers.lerobot_train"]
    assert argv[:3] == wrapper and argv[argv.index("--") + 1 :] == LEROBOT_LINE  # flags as typed
    assert runner.derived(cfg) == ("stages.determinism.train_cmd",)  # train_cmd counts as set
    train = lerobot_argv(*parse_args(argv[3:]))  # what the wrapper hands lerobot's own main
    assert train == [
        "lerobot-train",
        *LEROBOT_LINE[:4],  # the user's base, dataset, rename map and batch size, untouched
        "--seed=3",
        "--steps=5",
        "--output_dir=/runs/twin_a/run/lerobot",
        "--save_freq=5",
        "--log_freq=1",
        "--eval_freq=0",
        "--wandb.enable=false",
        "--policy.push_to_hub=false",
        "--dataset.root=/d",
    ]


def test_an_own_train_cmd_wins_and_another_program_is_not_derived():
    line = OmegaConf.create({"training": {"command": ["lerobot-train", *LEROBOT_LINE]}})
    own = settings(train_cmd=["python", "t.py", "--seed", "{seed}"])
    assert runner.train_argv(line, own, {"seed": "0"}) == ["python", "t.py", "--seed", "0"]
    other = OmegaConf.create({"training": {"command": ["python", "train.py", "--steps=9"]}})
    assert missing(other) == ("stages.determinism.train_cmd",)
    with pytest.raises(InputError, match="non-empty argv list"):
        runner.train_argv(other, settings(), {})


@pytest.mark.skipif(importlib.util.find_spec("lerobot") is not None, reason="lerobot is installed here")
def test_without_lerobot_the_launch_refuses_determinism_on_the_command_unless_skipped(tmp_path, real_data):
    dataset = real_data / "SamueleSandrini__record-test"
    line = ["lerobot-train", "--policy.type=act", "--dataset.repo_id=me/rec", f"--dataset.root={dataset}"]
    args = ("stage=full", "launcher=slurm", "dry_run=true")
    proc = launch_here(tmp_path, *args, "--", *line, seed_demo=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("config error: stages.determinism.train_cmd: ") and "['lerobot']" in last, last
    skipped = launch_here(tmp_path, *args, "skip=[determinism]", "--", *line, seed_demo=False)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    chained = next(x for x in skipped.stdout.splitlines() if x.startswith("sbatch argv: "))
    argv = shlex.split(chained.removeprefix("sbatch argv: "))
    assert argv[-len(line) :] == line and argv[-len(line) - 1].endswith("/train.sbatch")  # chained as typed
