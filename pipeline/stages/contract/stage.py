"""contract: base checkpoint (A) vs training config (B) vs dataset (C).

The heart of the gate (reference 000): structural checks see shapes and dtypes, not that the base was
built for quantile-normalized state, that two joints are swapped, or that a dim is in degrees. This
stage reads the three sources with each format's own reader (`pipeline.readers`), recomputes the stats
the configured normalization needs from the data, and writes one row per feature and category
(normalization, layout, encoding, units, reload) with expected / configured / actual / verdict /
severity / evidence. Any hard mismatch blocks the gate. Artifacts: `contract_evidence.json`, a PNG of
per-dim ranges per vector feature, the dataset profile."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from pipeline.errors import InputError
from pipeline.progress import progress
from pipeline.readers import read_dataset, read_model, read_training
from pipeline.readers.base import Contract, DatasetContract
from pipeline.readers.scan import ScanOptions
from pipeline.record.records import Check, Rows, StageResult, jsonable
from pipeline.stages import StageContext
from pipeline.stages.config import settings
from pipeline.stages.contract import (
    alignment,
    channels,
    composed,
    conventions,
    corrected,
    drift,
    encoding,
    finite,
    frames,
    inputs,
    layout,
    mirror,
    normalization,
    relation,
    reload,
    shards,
    sides,
    units,
)
from pipeline.stages.contract.config import ContractConfig
from pipeline.stages.contract.deploy import deploy_rows
from pipeline.stages.contract.drawing import Plots, health_args, range_args
from pipeline.stages.contract.health import health_rows
from pipeline.stages.contract.profile import write_profile
from pipeline.stages.contract.rows import NAME, Pair, Sources, pair_features, vec
from pipeline.storage import atomic_write_json

A, B, C = sides.NEEDS_BASE, sides.NEEDS_TRAINING, sides.DATASET_ONLY
# each check with the sources it reads: A the base, B a policy config (the base's or a fresh one), C the
# dataset alone; a launch without a base or a training config runs only those it has (`sides.py`)
PER_PAIR = (
    (layout.key_rows, B),
    (layout.shape_rows, B),
    (layout.names_rows, B),
    (relation.relation_rows, A),  # before sign/permutation/units/shift: they leave out the dims it explains
    (conventions.convention_rows, A),
    (mirror.mirror_rows, A),  # after sign/offset: a dim they explain is not judged again
    (layout.permutation_rows, A),
    (units.scale_rows, A),
    (normalization.stats_rows, B),
    (normalization.degenerate_rows, B),
    (drift.stale_rows, C),
    (drift.shift_rows, A),
    (encoding.dtype_rows, C),
)
GLOBAL = (
    (normalization.mode_rows, A),
    (normalization.renamed_rows, B),  # renamed inputs lerobot finds no stats for: trained unnormalized
    (layout.frames_rows, C),
    (layout.image_rows, B),
    (inputs.camera_rows, B),  # which dataset key provides each camera of the policy (finetune contract)
    (encoding.image_rows, A),
    (units.action_mode_rows, B),
    (reload.processor_rows, A),
    (reload.placeholder_rows, A),
    (reload.mask_rows, A),
    (finite.nonfinite_rows, C),  # NaN/inf in the data rows
    (frames.frame_rows, C),  # decoded camera frames (issue 22)
    (alignment.alignment_rows, C),  # cameras in step with the rows (issue 34)
    (health_rows, C),  # dataset health from the same pass (issue 24)
    (channels.channel_rows, C),  # dead sensors by their command, constants the normalizer floors
)
# rows that judge the data against the policy's window: without a policy they are left to the skipped row
WINDOWED = ("contract.health.episodes.short",)


def _section(cfg: DictConfig, name: str) -> dict[str, Any]:
    section = cfg.get(name) or {}
    return OmegaConf.to_container(section, resolve=True) if isinstance(section, DictConfig) else dict(section)


def _path(cfg: DictConfig, name: str) -> str:
    path = (cfg.get(name) or {}).get("path")
    if not path:
        raise InputError(
            f"{name}.path is not set (expected the {name} to audit)",
            field=f"{name}.path",
        )
    return str(path)


def _given(cfg: DictConfig, name: str) -> bool:
    return bool((cfg.get(name) or {}).get("path"))


def scan_options(config: ContractConfig, advance: Any = None) -> ScanOptions:
    """What the data pass keeps, from the stage's thresholds (one pass and array tasks alike)."""
    return ScanOptions(
        rank_error=config.rank_error,
        dynamics_rows=config.dynamics_rows,
        health_episodes=1 if config.health.enabled else 0,
        health_gap_factor=config.health.gap_factor,
        progress=advance,
    )


def load_sources(
    cfg: DictConfig, config: ContractConfig, ctx: StageContext | None = None
) -> tuple[Contract, Contract, DatasetContract, list[Check]]:
    """A, B and C; C from the array tasks' partials where the plan split the data pass (`shards`)."""
    model_opts = {
        k: v for k, v in _section(cfg, "model").items() if k in ("stats_key", "normalization_mapping")
    }
    a = read_model(_path(cfg, "model"), model_opts) if _given(cfg, "model") else None
    training, rows = composed.training_config(cfg)  # B as lerobot composes it, where the job can
    b = read_training(training) if training else None
    count = shards.tasks(config, cfg) if ctx is not None else 1
    with progress("contract: dataset stats pass (rows read)", None) as advance:
        if count > 1:
            assert ctx is not None
            path, opts = Path(_path(cfg, "dataset")), scan_options(config, advance)
            c, row = shards.read_sharded(path, opts, ctx, count, config.shard_rows, shards.audit_key(cfg))
            rows.append(row)
        else:
            c = read_dataset(_path(cfg, "dataset"), scan_options(config, advance))
    if b is None:
        a, b = sides.dataset_alone(c) if a is None else (a, Contract("B", "none", ""))
    elif a is None:
        a = sides.fresh_policy(b, c)
    return a, b, c, rows


def reconcile(
    a: Contract, b: Contract, c: DatasetContract, config: ContractConfig
) -> tuple[list[Check], Sources]:
    """Every row for one (A, B, C) triple; layout runs before units/shift so they can use its findings."""
    src = Sources(a, b, c, config)
    pairs = pair_features(src)
    have = sides.sides(a)
    checks: list[Check] = []
    for pair in pairs:
        for check, needs in PER_PAIR:
            checks += check(src, pair) if needs in have else []
    for check, needs in GLOBAL:
        checks += check(src) if needs in have else []
    if have != "ABC":
        left_out: dict[str, list[Any]] = {}
        for check, needs in (*PER_PAIR, *GLOBAL):
            if needs not in have:
                left_out.setdefault(needs, []).append(check)
        windowed = [ch.id.removeprefix(f"{NAME}.") for ch in checks if ch.id in WINDOWED]
        if B not in have:
            checks = [ch for ch in checks if ch.id not in WINDOWED]
        checks.append(sides.skipped_row(a, b, left_out, windowed if B not in have else []))
        return checks, src
    if a.inferred:
        checks = [_inferred(ch, a) for ch in checks]
    if not pairs:
        message = f"A ({a.kind}) declares no state/action features to reconcile"
        checks.append(Rows(NAME, "layout")("layout.features", "features", "unverifiable", message))
    return checks, src


def _inferred(check: Check, a: Contract) -> Check:
    """Rows resting on a contract card are inferred, never verified: say so in message and evidence."""
    return replace(
        check,
        message=f"[inferred from {a.hints.get('source')}] {check.message}",
        evidence={**check.evidence, "inferred": True, "card": a.path},
    )


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    config = settings(ContractConfig, cfg, ctx.config, NAME)
    with Plots.start() as plots:  # matplotlib imported by the drawer while the data is read
        a, b, c, sharded = load_sources(cfg, config, ctx)
        # what the data is needs no row: its plot is drawn while the rows are judged
        profiled = write_profile(ctx.artifacts_dir, Sources(a, b, c, config), plots)
        checks, src = reconcile(a, b, c, config)
        checks += sharded
        checks += _known_good(cfg, config, b, c, checks)
        checks += deploy_rows(cfg, src)  # D, where the trained policy will run, where the launch names one
        remedy = lambda *abc: reconcile(*abc, config)  # noqa: E731
        checks = corrected.remedied(cfg, checks, src, ctx.artifacts_dir, remedy)
        artifacts = _artifacts(ctx.artifacts_dir, src, checks, plots, profiled)
        plots.finish()
    return StageResult.from_checks(NAME, checks, artifacts=artifacts, physical_checks=tuple(_physical(src)))


def _known_good(
    cfg: DictConfig, config: ContractConfig, b: Contract, c: DatasetContract, checks: list[Check]
) -> list[Check]:
    """Reconcile a reference model that works on the same data: is each finding ours or shared?"""
    ref = cfg.get("known_good")
    if not ref or not ref.get("path"):
        return []
    rows = Rows(NAME, "diagnostics")
    try:
        ref_a = read_model(str(ref.path), {k: ref.get(k) for k in ("stats_key",) if ref.get(k)})
    except InputError as exc:
        evidence = {"path": exc.path, "field": exc.field}
        return [rows("known_good", "known_good", "error", f"known_good: {exc}", evidence=evidence)]
    ref_checks, _ = reconcile(ref_a, b, c, config)
    ref_blocking = {ch.id for ch in ref_checks if ch.blocking}
    verdicts = {
        ch.id: "shared (upstream in the data/hardware)"
        if ch.id in ref_blocking
        else "specific to the audited model"
        for ch in checks
        if ch.blocking
    }
    message = (
        f"reference {ref.path}: {len(ref_blocking)} blocking finding(s); of ours, "
        f"{sum('shared' in v for v in verdicts.values())} shared, "
        f"{sum('specific' in v for v in verdicts.values())} specific"
    )
    return [
        rows(
            "known_good",
            "known_good",
            "match",
            message,
            severity="soft",
            expected=str(ref.path),
            actual=verdicts,
            evidence={"reference_blocking": sorted(ref_blocking)},
        )
    ]


def _dump_contract(contract: Contract) -> dict[str, Any]:
    data: dict[str, Any] = {
        "source": contract.source,
        "kind": contract.kind,
        "path": contract.path,
        "inferred": contract.inferred,
        "features": {
            k: {"role": f.role, "shape": f.shape, "names": f.names, "dtype": f.dtype}
            for k, f in contract.features.items()
        },
        "norm_map": contract.norm_map,
        "stats": contract.stats,
        "notes": contract.notes,
        "hints": {k: v for k, v in contract.hints.items() if k not in ("pre", "post")},
    }
    if isinstance(contract, DatasetContract):
        data.update(
            {
                "recomputed": contract.recomputed,
                "rows": contract.rows,
                "episodes": contract.episodes,
                "claimed": contract.claimed,
                "images": contract.images,
                "files": contract.files[:50],
                "shipped_quantile_ranks": contract.shipped_ranks,
            }
        )
    return data


def _artifacts(
    out_dir: Path, src: Sources, checks: list[Check], plots: Plots, profiled: dict[str, str]
) -> dict[str, str]:
    evidence = {
        "A": _dump_contract(src.a),
        "B": _dump_contract(src.b),
        "C": _dump_contract(src.c),
        "permutations": src.permutations,
        "explained": src.explained,
        "action_mode_inferred": units.infer_action_mode(src),
    }
    path = atomic_write_json(out_dir / "contract_evidence.json", jsonable(evidence))
    artifacts = {"contract_evidence": str(path), **profiled}
    if any(c.category == "health" for c in checks) and (args := health_args(src.c.health, checks)):
        artifacts["health_episodes"] = str(plots.draw("health", out_dir / "health_episodes.png", **args))
    for pair in pair_features(src):
        path = _plot(out_dir, src, pair, checks, plots)
        if path is not None:
            artifacts[f"ranges_{pair.a.key}"] = str(path)
    return artifacts


def _bounds(stats: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    if not stats:
        return None
    lo = vec(stats, "q01") if vec(stats, "q01") is not None else vec(stats, "min")
    hi = vec(stats, "q99") if vec(stats, "q99") is not None else vec(stats, "max")
    mean = vec(stats, "mean")
    if lo is None or hi is None:
        if mean is None or vec(stats, "std") is None:
            return None
        lo, hi = mean - 2 * vec(stats, "std"), mean + 2 * vec(stats, "std")
    return {"lo": lo, "hi": hi, "mean": mean if mean is not None else (lo + hi) / 2}


def _plot(out_dir: Path, src: Sources, pair: Pair, checks: list[Check], plots: Plots) -> Path | None:
    if pair.c is None:
        return None
    a = _bounds(src.a.stats.get(pair.a.key))
    c = _bounds(src.c.recomputed.get(pair.c.key) or src.c.stats.get(pair.c.key))
    if a is None or c is None or a["lo"].size != c["lo"].size:
        return None
    flagged = set(src.explained.get(pair.a.key, {}))
    for check in checks:
        if check.feature == pair.a.key and check.verdict == "mismatch":
            flagged.update(int(d) for d in check.evidence.get("dims", []) if isinstance(d, int))
    safe = pair.a.key.replace("/", "_")
    title = (
        f"{pair.a.key}: base (A) vs dataset (C{' ' + pair.c.key if pair.c.key != pair.a.key else ''}) per dim"
    )
    return plots.draw("range", out_dir / f"ranges_{safe}.png", **range_args(a, c, flagged, title))


def _physical(src: Sources) -> list[str]:
    """What the data cannot prove, phrased for this triple."""
    items = []
    images = [k for k, f in src.c.features.items() if f.role == "image"]
    if images:
        items.append(f"Cameras are not swapped on the rig: {images} show the views their names say.")
    names = [n for f in src.c.features.values() if f.names for n in f.names]
    if any("left" in str(n).lower() for n in names) and any("right" in str(n).lower() for n in names):
        items.append(
            "Left and right arms are not swapped on the rig (the data has both left_* and right_* dims)."
        )
    else:
        items.append(
            "Arms and joints are wired in the order the state names say (a swap the data mirrors "
            "exactly cannot be seen in statistics)."
        )
    grippers = [n for n in names if "gripper" in str(n).lower()]
    if grippers:
        items.append(
            f"Gripper units and direction on the hardware match the data ({sorted(set(grippers))[:4]}: "
            "open/close sign and range)."
        )
    inferred = units.infer_action_mode(src)
    if inferred.get("mode") in ("absolute", "delta"):
        items.append(
            f"Actions are {inferred['mode']} targets on the robot too (the data suggests {inferred['mode']}: "
            f"corr with next state {inferred['corr_next_state']}, with the step {inferred['corr_step']})."
        )
    items.append(
        "Record-and-playback on the same hardware replays faithfully (decouples model from calibration)."
    )
    items.append(
        "A small BC sanity run (about 10 demos of a simple task) trains a sane policy, or a working "
        "baseline model on the same data does."
    )
    return items


def run_part(cfg: DictConfig, ctx: StageContext) -> None:
    """One array task of the data pass (`shards`): its files' partial facts for the main job."""
    config = settings(ContractConfig, cfg, ctx.config, NAME)
    shards.run_part(cfg, ctx, scan_options(config), shards.tasks(config, cfg))


__all__ = ["run", "run_part", "reconcile", "load_sources", "scan_options"]
