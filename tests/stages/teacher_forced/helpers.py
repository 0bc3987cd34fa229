"""Run the teacher_forced stage in-process exactly as a job does, and index its rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline.record.records import StageResult
from pipeline.stages import StageContext
from pipeline.stages.config import typed
from pipeline.stages.teacher_forced import TeacherForcedConfig, run

# the small demo of these tests (conftest.py), and the same settings as a launch's overrides: a faulty
# launch with them reuses its episodes, renders and both trainings (pipeline/demo/memo.py), so only the
# faults are planted anew
SMALL = {"variant": "default", "seed": 3, "episodes": 4, "steps": 60, "train_steps": 150, "hidden": 32}
SMALL_OVERRIDES = tuple(f"demo.{k}={v}" for k, v in SMALL.items() if k != "variant")
# for a test whose assertions read neither the counterfactual probe rows nor the plots (each has tests of
# its own: test_*_probes.py, test_images.py, the demo report test): the probe search is ~3/4 of a run on
# the demo (a forward of every sample per alternative), the plots most of the rest
NO_PROBES_NO_PLOTS: dict[str, Any] = {"probe_models": [], "plots": False}


def run_stage(dataset: str, run_dir: Path, **overrides: Any) -> StageResult:
    """The stage exactly as a job runs it: typed config in the context, the dataset path in cfg. Without
    `models`, the demo's (beside a demo dataset), named as the demo provider names them at launch."""
    if "models" not in overrides and (Path(dataset).parent / "teacher_forced" / "models.json").is_file():
        from pipeline.demo.provider import teacher_forced_models

        overrides["models"], baseline = teacher_forced_models(Path(dataset).parent)
        overrides.setdefault("baseline", baseline)
    config = typed(TeacherForcedConfig, overrides, "stages.teacher_forced")
    cfg = OmegaConf.create({"dataset": {"path": dataset}, "stages": {}})
    return run(cfg, StageContext(run_dir=run_dir, stage="teacher_forced", config=config))


def by_id(result: StageResult) -> dict[str, Any]:
    return {c.id.removeprefix("teacher_forced."): c for c in result.checks}
