"""What a training command and the determinism stage agree on, without torch: file names, the
environment variables the stage sets, the events a trainer may mark, the metrics file per rank, and
what a reload loader hands back.

`pipeline.trainlog` (the torch side, imported by trainers) re-exports all of it; the stage imports it
from here so that loading the stage (at every launch, for its config) does not import torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

METRICS_FILE = "metrics.jsonl"
REPORT_FILE = "determinism.json"
INTENT_FILE = "normalization_intent.safetensors"
ENV_MODE = "PREFLIGHT_DETERMINISTIC"
NONDET_RE = re.compile(r"(\S+) does not have a deterministic implementation")
NORM_KEY_RE = r"(^|\.)(un)?normalize_[^.]*\.buffer_"
ENV_KEYS = ("CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED", "OMP_NUM_THREADS", ENV_MODE, "CUDA_VISIBLE_DEVICES")
EVENTS_FILE = "events.jsonl"
KNOWN_EVENTS = ("epoch_end", "eval", "checkpoint_save", "lr_change")
# set by the determinism stage: events the run must reach, steps to log after the last, the least steps
ENV_HORIZON, ENV_AFTER, ENV_MIN_STEPS = (
    "PREFLIGHT_HORIZON_EVENTS",
    "PREFLIGHT_HORIZON_AFTER",
    "PREFLIGHT_MIN_STEPS",
)


@dataclass
class Reloaded:
    """What a reload loader (`stages.determinism.reload.loader`, `module:function(checkpoint_dir,
    dataset_dir)`) hands back: the stats eval will normalize with, and a way to run the policy.

    It lives here, with the other things a user's training code gives the pipeline, so a team's own
    loader (and the demo's, `pipeline.demo.reload:load_demo`) need not import a stage.
    """

    stats: dict[str, Any]  # flat "<feature>.<stat>" -> float32 array, after re-injection
    forward: Callable[[Mapping[str, Any]], Any]  # raw observations (batch) -> raw actions
    input_features: list[str]
    output_feature: str = "action"
    injected: list[str] = field(default_factory=list)  # keys filled from the dataset's metadata
    required: list[str] = field(default_factory=list)  # keys eval's normalizers read (by their modes)
    # the rename map `forward` applies itself (dataset key -> policy key, as lerobot's saved preprocessor
    # does); None: it applies none, and is fed the policy's names
    renames: dict[str, str] | None = None
    # what the loader's normalizers do with an input whose stats are all absent (lerobot: pass it through
    # unnormalized), for the row that names such an input; empty: not known
    without_stats: str = ""


def rank_and_world() -> tuple[int, int]:
    """torchrun's RANK/WORLD_SIZE; (0, 1) for a plain run."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def metrics_name(rank: int, world: int, base: str = METRICS_FILE) -> str:
    """`metrics.jsonl` for a single process, `metrics.rank<N>.jsonl` per rank under DDP."""
    if world <= 1:
        return base
    stem, _, ext = base.rpartition(".")
    return f"{stem}.rank{rank}.{ext}"
