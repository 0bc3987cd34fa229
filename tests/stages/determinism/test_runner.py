"""The training command template: argv substitution element by element, never a shell string."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError, InputError
from pipeline.stages.config import typed
from pipeline.stages.determinism import runner
from pipeline.stages.determinism.config import DeterminismConfig

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
