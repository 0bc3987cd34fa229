"""checkpoint_storage: will the planned run's checkpoints fit where it saves them?

A run that fills its quota on day three dies at a checkpoint save, or leaves a truncated file that the
resume then loads (reference 004). This stage runs as a job, so it sees `checkpoint_dir` as a compute
node sees it (mounts, free space, the user's quota there), estimates one checkpoint's size (an explicit
size, else the largest checkpoint already in that folder's manifest, else the files of a whole checkpoint
a training wrote, else parameter count x dtype from the model's safetensors headers, read through the
validated header reader), multiplies by the number kept, and compares with free space and quota
headroom. Not fitting warns or blocks (`severity`).

A training checkpoint is more than the weights: LeRobot writes `checkpoints/<step>/pretrained_model/`
and `training_state/` beside it, whose optimizer state (Adam's two moments) is ~2x the weights; a
user's ACT budgeted from its weights (207 MB) saved 413 MB more. Where such a folder exists (model.path
inside one, or earlier ones in checkpoint_dir) its files are measured, never the weights alone.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import InputError
from pipeline.readers.base import safetensors_header
from pipeline.record.records import Check, Rows, StageResult
from pipeline.stages import StageContext, error_check
from pipeline.stages.config import section, typed
from pipeline.stages.settings import ITEMSIZE, CheckpointStorageConfig
from pipeline.storage import manifest
from pipeline.storage.quota import Room, room

NAME = "checkpoint_storage"
rows = Rows(NAME, "storage")


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    conf = ctx.config or typed(CheckpointStorageConfig, section(cfg, NAME), f"stages.{NAME}")
    folder = Path(str(cfg.checkpoint_dir))
    model = (cfg.get("model") or {}).get("path")
    try:
        size, size_row = estimate(conf, folder, Path(str(model)) if model else None)
    except InputError as exc:
        return StageResult.from_checks(NAME, [error_check(NAME, exc, "storage")])
    checks = [size_row]
    if size is not None:
        checks += fit_checks(conf, folder, size)
    checks += [_fallback_check(i, Path(f)) for i, f in enumerate(conf.fallbacks)]
    return StageResult.from_checks(NAME, checks)


def estimate(conf: CheckpointStorageConfig, folder: Path, model: Path | None) -> tuple[int | None, Check]:
    """One checkpoint's size in bytes, and the row saying where the number came from."""
    if conf.size_bytes is not None:
        return conf.size_bytes, rows(
            "size",
            "checkpoint_size",
            "match",
            f"{conf.size_bytes} bytes (configured)",
            configured=conf.size_bytes,
            evidence={"source": "size_bytes"},
        )
    if manifest.manifest_path(folder).exists():
        sizes = [e.size for e in manifest.collect(folder).values() if e.state != "deleted"]
        if sizes:
            return max(sizes), rows(
                "size",
                "checkpoint_size",
                "match",
                f"{max(sizes)} bytes: the largest checkpoint already saved in {folder}",
                actual=max(sizes),
                evidence={"source": "manifest", "checkpoints": len(sizes)},
            )
    measured = _measured(folder, model)
    if measured is not None:
        return measured
    files = _safetensors(model) if model else []
    if not files:
        return None, rows.judge(
            "size",
            "checkpoint_size",
            None,
            f"no checkpoint size: no size_bytes, no earlier checkpoint in {folder}, no "
            f"*.safetensors under model.path ({model}); set stages.{NAME}.size_bytes",
            evidence={"model": str(model) if model else None},
        )
    return _from_weights(conf, files)


def _from_weights(conf: CheckpointStorageConfig, files: list[Path]) -> tuple[int, Check]:
    """The weights' size from their safetensors headers (no checkpoint folder to measure)."""
    params, stored = 0, 0
    for path in files:
        for name, info in safetensors_header(path).items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in info["shape"]:
                count *= int(dim)
            params += count
            stored += count * ITEMSIZE[info["dtype"]]
    per_param = ITEMSIZE[conf.dtype.upper()] * params if conf.dtype else stored
    size = int(per_param * conf.state_multiplier)
    return size, rows(
        "size",
        "checkpoint_size",
        "match",
        f"{size} bytes: {params} parameters x {conf.dtype or 'stored dtype'} x "
        f"{conf.state_multiplier} (from {len(files)} safetensors header(s))",
        actual=size,
        evidence={
            "source": "model",
            "files": [str(f) for f in files],
            "parameters": params,
            "stored_bytes": stored,
        },
    )


STATE = "training_state"  # LeRobot: optimizer, scheduler, rng and step, beside pretrained_model/


def _measured(folder: Path, model: Path | None) -> tuple[int, Check] | None:
    """The largest whole training checkpoint already in checkpoint_dir, else the one holding model.path
    (the model folder, a file in it, or the step folder itself), measured from its files; None where
    there is none."""
    saved, source = [_files(step) for step in _steps(folder)], "checkpoint_dir"
    if not saved and model is not None:
        around = [step for step in (model, model.parent, model.parent.parent) if _is_step(step)]
        saved, source = [_files(step) for step in around[:1]], "model.path"
    if not saved:
        return None
    step, size, parts, count = max(saved, key=lambda found: found[1])
    split = ", ".join(f"{name}: {n} bytes" for name, n in sorted(parts.items()))
    which = (
        f"the largest of {len(saved)} in checkpoint_dir"
        if source == "checkpoint_dir"
        else "holding model.path"
    )
    return size, rows(
        "size",
        "checkpoint_size",
        "match",
        f"{size} bytes: the training checkpoint {step} ({which}) measured from its {count} files ({split})",
        actual=size,
        evidence={
            "source": "files",
            "found_from": source,
            "folder": str(step),
            "parts": parts,
            "files": count,
            "checkpoints": len(saved),
        },
    )


def _is_step(step: Path) -> bool:
    """A folder a training wrote one checkpoint into: `training_state/` beside a model folder
    (LeRobot's `checkpoints/<step>/`); links (LeRobot's `checkpoints/last`) are left out."""
    state = step / STATE
    if step.is_symlink() or not state.is_dir() or state.is_symlink():
        return False
    return any(p.is_dir() and p.name != STATE for p in step.iterdir())


def _steps(parent: Path) -> list[Path]:
    """The training checkpoints under `parent` or its `checkpoints/`."""
    return [
        step
        for base in (parent, parent / "checkpoints")
        if base.is_dir()
        for step in sorted(base.iterdir())
        if step.is_dir() and _is_step(step)
    ]


def _files(step: Path) -> tuple[Path, int, dict[str, int], int]:
    """Bytes of every regular file under `step` (links not followed), by top-level entry."""
    parts: dict[str, int] = {}
    count = 0
    for root, _, names in os.walk(step):
        for name in names:
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            top = path.relative_to(step).parts[0]
            parts[top] = parts.get(top, 0) + path.stat().st_size
            count += 1
    return step, sum(parts.values()), parts, count


def _safetensors(model: Path) -> list[Path]:
    if model.is_file():
        return [model] if model.suffix == ".safetensors" else []
    if not model.is_dir():
        raise InputError(
            f"{model}: model path does not exist (expected a checkpoint folder)",
            path=model,
            field="model.path",
        )
    return sorted(model.glob("*.safetensors")) or sorted(model.rglob("*.safetensors"))


def fit_checks(conf: CheckpointStorageConfig, folder: Path, size: int) -> list[Check]:
    """Free space and quota headroom of checkpoint_dir (its nearest existing folder) against the need."""
    need = int(size * conf.keep * (1 + conf.margin))
    probe = _existing(folder)
    space = room(probe)
    severity = "hard" if conf.severity == "block" else "soft"
    where = {
        "checkpoint_dir": str(folder),
        "probed": str(probe),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "room": space.as_dict(),
    }
    plan = f"{conf.keep} x {size} bytes + {conf.margin:.0%}"
    out = [
        rows.judge(
            "free_space",
            "checkpoint_dir",
            space.free >= need,
            f"{folder}: {space.free} bytes free for {need} ({plan})",
            severity=severity,
            expected=need,
            actual=space.free,
            evidence=where,
        )
    ]
    out += _quota_check(conf, space, need, plan, severity, where)
    return out


def _quota_check(
    conf: CheckpointStorageConfig, space: Room, need: int, plan: str, severity: str, where: dict[str, Any]
) -> list[Check]:
    if space.quota is not None:
        headroom = space.quota.available
        ok = headroom is None or headroom >= need
        told = "no block limit set" if headroom is None else f"{headroom} bytes of quota left"
        return [
            rows.judge(
                "quota",
                "checkpoint_dir",
                ok,
                f"{space.quota_tool}: {told} for {need} ({plan})",
                severity=severity,
                expected=need,
                actual=headroom,
                evidence=where,
            )
        ]
    if conf.require_quota or space.quota_failed:  # a tool that failed is said in the row, not hidden
        return [
            rows.judge(
                "quota",
                "checkpoint_dir",
                None,
                f"quota not checked: {'; '.join(space.notes) or 'no quota row'}",
                evidence=where,
            )
        ]
    return []


def _existing(folder: Path) -> Path:
    """checkpoint_dir may not exist before the run: its nearest existing ancestor holds it."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def _fallback_check(index: int, folder: Path) -> Check:
    ok = folder.is_dir() and os.access(folder, os.W_OK)
    what = "exists and is writable" if ok else "does not exist or is not writable"
    return rows.judge(
        f"fallback.{index}",
        "fallbacks",
        ok,
        f"fallback folder {folder} {what}",
        severity="soft",
        expected="writable folder",
        actual=str(folder),
    )
