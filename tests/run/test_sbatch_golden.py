"""The sbatch script a stage job gets, compared with a golden file (as submitit tests its own).

Machine-specific parts (the run folder, the interpreter) are replaced by placeholders, so the file shows
exactly what changes when the resources, the dependencies or submitit's template change. After an
intended change: `PREFLIGHT_UPDATE_GOLDEN=1 pytest tests/run/test_sbatch_golden.py`, then review the diff.
"""

import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.record.runfolder import RunFolder
from pipeline.run.executors import sbatch_preview
from pipeline.run.plan import JobSpec

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RESOURCES = {
    "partition": "gpu",
    "account": "robots",
    "qos": None,
    "time_min": 45,
    "gpus_per_node": 2,
    "cpus_per_task": 4,
    "mem_gb": 16,
}


def config(run_dir: Path, **container):
    return OmegaConf.create(
        {
            "run_dir": str(run_dir),
            "audit_dir": "/audit",
            "checkpoint_dir": "/ckpt",
            "container": {"kind": "none", **container},
            "launcher": {"signal_delay_s": 90, "additional_parameters": {"constraint": "a100"}},
        }
    )


def normalized(script: str, run_dir: Path) -> str:
    return script.replace(str(run_dir), "<RUN_DIR>").replace(sys.executable, "<PYTHON>")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.sbatch"
    if os.environ.get("PREFLIGHT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with PREFLIGHT_UPDATE_GOLDEN=1 once and review it"
    assert text == path.read_text(), f"sbatch script differs from {path}"


@pytest.mark.parametrize("container", ["none", "apptainer"])
def test_stage_sbatch_script_matches_golden(tmp_path, container):
    folder = RunFolder.of(tmp_path, "20261202-120000-abcdef")
    spec = JobSpec(
        "determinism",
        "stage",
        "determinism",
        deps=(("container_check", "afterok"), ("determinism.twin_a", "afterany")),
        resources=RESOURCES,
    )
    extra = (
        {}
        if container == "none"
        else {
            "binary": "apptainer",
            "nv": True,
            "binds": ["/data"],
            "extra_args": ["--cleanenv"],
            "image": "/images/vla.sif",
            "python": "python",
        }
    )
    cfg = config(folder.root, kind=container, **extra)
    ids = {"container_check": "101", "determinism.twin_a": "102"}
    script = normalized(sbatch_preview(spec, cfg, folder, ids), folder.root)
    assert "<RUN_DIR>/submitit/%j" in script and "afterok:101,afterany:102" in script
    check_golden(f"determinism_{container}", script)
