"""What the stage leaves beside its record: the per-model numbers as JSON and the pictures."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.record.records import jsonable
from pipeline.stages.teacher_forced import plots, samples
from pipeline.storage import atomic_write_json


def write(tf: Any, out: Path, runs: Mapping[str, Any], shared: Any) -> dict[str, str]:
    """metrics.json (summaries, labels, per-sample errors) and, unless plots=false, the three plots."""
    summaries = {n: r.summary for n, r in runs.items()}
    per_sample = {n: r.scored.per_sample for n, r in runs.items()}
    payload = {
        "models": summaries,
        "labels": list(shared.labels),
        "per_sample_l1_norm": {n: v.tolist() for n, v in per_sample.items()},
    }
    atomic_write_json(out / "metrics.json", jsonable(payload))  # NaN (a model's NaN outputs) -> "NaN"
    artifacts = {"metrics": str(out / "metrics.json")}
    if not tf.plots:
        return artifacts
    artifacts["plot_per_dim"] = str(plots.per_dim(summaries, shared.names, out / "per_dim_l1.png"))
    position = samples.position_of(shared.frames)[shared.rows]
    artifacts["plot_position"] = str(plots.by_position(per_sample, position, out / "error_by_position.png"))
    for name, run in runs.items():
        path = out / f"worst_{name}.png"
        artifacts[f"plot_worst_{name}"] = str(
            plots.worst_traces(
                name,
                run.scored.pred,
                shared.truth,
                run.scored.per_sample,
                shared.labels,
                shared.names,
                shared.scale,
                path,
                tf.worst_samples,
            )
        )
    return artifacts
