"""Stage settings come from each stage's config dataclass through Hydra's ConfigStore: the composed
config shows every key, overrides need no `+`, a bad type or range fails naming the key, and a stage
name can be registered once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from pipeline import stages
from pipeline.errors import ConfigError, InputError
from pipeline.stages.checkpoint_storage import CheckpointStorageConfig
from pipeline.stages.config import GateConfig, StageConfig, typed
from pipeline.stages.container_check import ContainerCheckConfig
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.determinism.config import DeterminismConfig
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.teacher_forced import TeacherForcedConfig
from tests.in_process_launch import launch_here

CLASSES = {
    "container_check": ContainerCheckConfig,
    "contract": ContractConfig,
    "determinism": DeterminismConfig,
    "checkpoint_storage": CheckpointStorageConfig,
    "render_cache": RenderCacheConfig,
    "teacher_forced": TeacherForcedConfig,
    "gate": GateConfig,
}


def composed(*overrides: str):
    stages.load()
    conf = Path(stages.__file__).parents[1] / "conf"  # the shipped configs (launch's config_path)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_the_composed_config_holds_every_field_of_every_stage_dataclass_with_its_default():
    cfg = composed()
    assert set(cfg.stages) == set(CLASSES)
    for name, cls in CLASSES.items():
        default = OmegaConf.to_container(OmegaConf.structured(cls))
        assert OmegaConf.to_container(cfg.stages[name]) == default, name
    assert cfg.stages.contract.rank_error == 0.001 and cfg.stages.gate.resources.time_min == 10
    assert cfg.stages.determinism.reload.loader is None and cfg.stages.determinism.train_cmd == []


def test_overrides_need_no_plus_and_are_typed_where_hydra_composes():
    cfg = composed("stages.contract.rank_error=0.01", "stages.determinism.part_resources.ddp.gpus_per_node=8")
    assert cfg.stages.contract.rank_error == 0.01
    assert cfg.stages.determinism.part_resources.ddp.gpus_per_node == 8
    resolved = OmegaConf.to_container(composed("demo=faulty"), resolve=True)
    assert resolved["stages"]["determinism"]["fault"] == "none"  # planted by the demo provider, not here
    with pytest.raises(ConfigCompositionException) as info:
        composed("stages.contract.rank_error=abc")
    assert isinstance(info.value.__cause__, ValidationError)
    assert "stages.contract.rank_error" in str(info.value.__cause__)


def test_a_bad_type_or_range_is_a_config_error_naming_the_key():
    cases = {
        "stages.contract.rank_error": {"rank_error": "abc"},
        "stages.contract.dynamics_rows": {"dynamics_rows": 0},
        "stages.contract.stale.quantile_severity": {"stale": {"quantile_severity": "loud"}},
        "stages.contract.units.factors.mm_vs_m": {"units": {"factors": {"mm_vs_m": -1}}},
        "stages.contract.shift.hard_z": {"shift": {"hard_z": 0.5}},
        "stages.contract.resources.mem_gb": {"resources": {"mem_gb": 0}},
    }
    for key, section in cases.items():
        with pytest.raises(ConfigError) as info:
            typed(ContractConfig, section, "stages.contract")
        assert info.value.key == key, (key, str(info.value))
    assert typed(ContractConfig, {"rank_error": 0.5}, "stages.contract").rank_error == 0.5
    with pytest.raises(ConfigError, match=r"^stages.gate.resources.time_min: expected"):
        typed(GateConfig, {"resources": {"time_min": 0}}, "stages.gate")


def test_launch_refuses_an_out_of_range_value_before_submitting(tmp_path):
    overrides = ("launcher=local", "stage=container_check", "stages.contract.rank_error=0.9")
    proc = launch_here(tmp_path, *overrides, seed_demo=False)  # refused before a demo is read
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "stages.contract.rank_error: expected a rank error in (0, 0.5], got 0.9" in proc.stdout + proc.stderr
    )
    assert not (tmp_path / "preflight" / "runs").exists() or not any(
        (tmp_path / "preflight" / "runs").iterdir()
    )


def test_register_refuses_a_second_stage_with_a_taken_name():
    registry = stages.load()
    first = registry["contract"]
    twin = dataclasses.replace(first, run=lambda cfg, ctx: None)
    with pytest.raises(InputError, match="stage 'contract' is registered twice"):
        stages.register(twin)
    assert stages.get("contract") is first
    assert stages.register(first) is first  # the same stage again (a module imported twice) is fine


def test_every_stage_config_derives_from_stage_config():
    assert all(issubclass(cls, StageConfig) for cls in CLASSES.values())
    assert {n: s.config for n, s in stages.load().items() if n in CLASSES} == {
        n: c for n, c in CLASSES.items() if n != "gate"
    }


def test_typed_memory_reaches_sbatch_in_whole_units():
    """A typed `mem_gb` is a float (4 -> 4.0); sbatch refuses `--mem=4.0GB`."""
    from pipeline.run.executors import slurm_mem

    assert slurm_mem(composed().stages.contract.resources.mem_gb) == "4GB"
    assert slurm_mem(0.5) == "512M" and slurm_mem(2) == "2GB"
