"""The environment probe, run for real in this environment (torch, MuJoCo's GL context, the disk)."""

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError, InputError
from pipeline.stages import StageContext
from pipeline.stages.config import typed
from pipeline.stages.container_check import ContainerCheckConfig, run
from tests.storage.conftest import tmpfs


def context(tmp_path, **overrides) -> StageContext:
    """What a job hands the stage: its typed config, built from the dataclass defaults + overrides."""
    config = typed(ContainerCheckConfig, overrides, "stages.container_check")
    return StageContext(run_dir=tmp_path, stage="container_check", config=config)


def probe(tmp_path, **overrides):
    cfg = OmegaConf.create(
        {
            "run_dir": str(tmp_path / "run"),
            "audit_dir": str(tmp_path / "audit"),
            "checkpoint_dir": str(tmp_path / "ckpt"),
        }
    )
    result = run(cfg, context(tmp_path, **overrides))
    return result, {c.feature: c for c in result.checks}


@pytest.mark.render
def test_this_environment_passes_and_records_the_gl_renderer(tmp_path):
    result, rows = probe(tmp_path)
    assert result.status == "pass", [c.message for c in result.checks if c.verdict != "match"]
    assert rows["gl_renderer"].actual  # e.g. "llvmpipe (LLVM 15.0.6, 256 bits)" on this machine
    assert rows["package:torch"].actual.startswith("2.")


def test_unmet_version_and_missing_package_are_hard_mismatches(tmp_path):
    result, rows = probe(
        tmp_path, packages={"torch": ">=99", "no-such-dist-xyz": ""}, mujoco_gl="osmesa", require_gl=False
    )
    assert rows["package:torch"].verdict == "mismatch" and rows["package:torch"].expected == ">=99"
    assert rows["package:no-such-dist-xyz"].message == "no-such-dist-xyz is not installed in this environment"
    assert result.status == "fail"


def test_gpu_required_on_a_cpu_node_is_a_finding(tmp_path):
    _, rows = probe(tmp_path, require_gpu=True, packages={}, require_gl=False)
    assert rows["cuda"].verdict == "mismatch" and "torch sees 0 CUDA device" in rows["cuda"].message
    # llvmpipe (or no context at all) on a node that should render on its GPU is a finding too
    assert rows["gl_renderer"].verdict == "mismatch"


def test_bad_version_specifier_names_the_key(tmp_path):
    with pytest.raises(InputError, match=r"stages.container_check.packages.torch: '>>2' is not a version"):
        probe(tmp_path, packages={"torch": ">>2"})


def test_unwritable_directory_is_a_storage_mismatch(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ctx = context(tmp_path, packages={}, require_gl=False, mujoco_gl="osmesa")
    cfg = OmegaConf.create(
        {"run_dir": str(tmp_path), "audit_dir": str(blocker / "audit"), "checkpoint_dir": str(tmp_path)}
    )
    rows = {c.feature: c for c in run(cfg, ctx).checks}
    assert rows["audit_dir"].verdict == "mismatch" and rows["audit_dir"].category == "storage"


def test_full_filesystem_is_reported_from_a_real_small_tmpfs(tmp_path):
    with tmpfs(tmp_path / "small", "4m") as mount:  # the one tmpfs helper (skips where it cannot mount)
        (mount / "fill").write_bytes(b"\0" * (3 * 1024 * 1024))
        ctx = context(tmp_path, packages={}, require_gl=False, min_free_gb=0.002)
        cfg = OmegaConf.create(
            {"run_dir": str(tmp_path), "audit_dir": str(tmp_path), "checkpoint_dir": str(mount)}
        )
        rows = {c.feature: c for c in run(cfg, ctx).checks}
        assert rows["checkpoint_dir"].verdict == "mismatch"
        assert rows["checkpoint_dir"].evidence["free_gb"] < 0.002


def test_a_section_in_cfg_is_typed_when_the_stage_is_called_without_a_job_config(tmp_path):
    """Called by hand (no ctx.config), the stage types `cfg.stages.container_check` itself."""
    cfg = OmegaConf.create(
        {
            "stages": {
                "container_check": {"packages": {"torch": ">=99"}, "require_gl": False, "mujoco_gl": "osmesa"}
            },
            "run_dir": str(tmp_path),
            "audit_dir": str(tmp_path),
            "checkpoint_dir": str(tmp_path),
        }
    )
    rows = {c.feature: c for c in run(cfg, StageContext(run_dir=tmp_path, stage="container_check")).checks}
    assert rows["package:torch"].verdict == "mismatch" and rows["gl_renderer"].severity == "soft"


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"gl_timeout_s": 0}, "stages.container_check.gl_timeout_s"),
        ({"mujoco_gl": "vulkan"}, "stages.container_check.mujoco_gl"),
        ({"min_capability": "eight"}, "stages.container_check.min_capability"),
        ({"require_gpu": "maybe"}, "stages.container_check.require_gpu"),
        ({"resources": {"cpus_per_task": 0}}, "stages.container_check.resources.cpus_per_task"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        typed(ContainerCheckConfig, overrides, "stages.container_check")
    assert info.value.key == key and str(info.value).startswith(f"{key}: ")
