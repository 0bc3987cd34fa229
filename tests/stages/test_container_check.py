"""The environment probe, run for real in this environment (torch, MuJoCo's GL context, the disk)."""

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import InputError
from pipeline.stages import StageContext
from pipeline.stages.container_check import run

BASE = OmegaConf.load(
    Path(__file__).resolve().parents[2] / "pipeline" / "conf" / "stages" / "container_check.yaml"
)


def probe(tmp_path, **overrides):
    scfg = OmegaConf.merge(BASE, overrides)
    cfg = OmegaConf.create(
        {
            "stages": {"container_check": scfg},
            "run_dir": str(tmp_path / "run"),
            "audit_dir": str(tmp_path / "audit"),
            "checkpoint_dir": str(tmp_path / "ckpt"),
        }
    )
    result = run(cfg, StageContext(run_dir=tmp_path, stage="container_check"))
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
    scfg = OmegaConf.merge(BASE, {"packages": {}, "require_gl": False, "mujoco_gl": "osmesa"})
    cfg = OmegaConf.create(
        {
            "stages": {"container_check": scfg},
            "run_dir": str(tmp_path),
            "audit_dir": str(blocker / "audit"),
            "checkpoint_dir": str(tmp_path),
        }
    )
    rows = {c.feature: c for c in run(cfg, StageContext(run_dir=tmp_path, stage="container_check")).checks}
    assert rows["audit_dir"].verdict == "mismatch" and rows["audit_dir"].category == "storage"


def test_full_filesystem_is_reported_from_a_real_small_tmpfs(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        (mount / "fill").write_bytes(b"\0" * (3 * 1024 * 1024))
        scfg = OmegaConf.merge(BASE, {"packages": {}, "require_gl": False, "min_free_gb": 0.002})
        cfg = OmegaConf.create(
            {
                "stages": {"container_check": scfg},
                "run_dir": str(tmp_path),
                "audit_dir": str(tmp_path),
                "checkpoint_dir": str(mount),
            }
        )
        rows = {
            c.feature: c for c in run(cfg, StageContext(run_dir=tmp_path, stage="container_check")).checks
        }
        assert rows["checkpoint_dir"].verdict == "mismatch"
        assert rows["checkpoint_dir"].evidence["free_gb"] < 0.002
    finally:
        subprocess.run(["umount", str(mount)], check=False)
