"""render_cache: the frame caches pixel policies train on agree with the release and the simulator.

Reference 003, generalised to any release + cache pair described by `stages.render_cache`: per budget,
files/shapes/sha256, transition counts against the subset manifests, nested subsets, actions / states /
trajectory ids row for row, proprio recomputed, the release's observation reproduced after a replay,
re-render agreement on a seeded sample under a calibrated tolerance (tolerance.py; the renderer string of
the check and of the cache named), with the pairing convention the cache claims tested and a mismatch
explained as a shifted row, the other pairing, or diagnosed (diagnose.py: BGR, lighting, camera, size,
row/episode, noise), goal frames == renders of the terminal states (every row, the same tolerance),
higher-resolution caches (their order also from content, content.py), and the raw-release vs eval-renderer
gap. `rendered_on: gpu` asks a GPU.

Sharding: with `shards: N > 1` the plan submits budgets x N tasks as one job array; each task checks one
episode range of one budget and writes `parts/render_cache/task-XXXX/partial.json`; this stage's main
job merges them. The rows are a pure function of the merged lists, so sharded == unsharded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import InputError
from pipeline.record.records import Check, StageResult
from pipeline.stages import StageContext, error_check, stage_config
from pipeline.stages.render_cache import budget as budget_mod
from pipeline.stages.render_cache.checksums import checksum_rows
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.gap import determinism_row, gap_row, gl_row
from pipeline.stages.render_cache.partial import Renderers, episode_range
from pipeline.stages.render_cache.rows import ROWS, budget_rows, merge, nested_row
from pipeline.storage import atomic_write_json

NAME = "render_cache"
PART = "task"

__all__ = ["NAME", "RenderCacheConfig", "check", "run", "run_part"]


def _config(cfg: DictConfig, ctx: StageContext) -> RenderCacheConfig:
    scfg = ctx.config if ctx.config is not None else stage_config(cfg, NAME)
    assert isinstance(scfg, RenderCacheConfig)
    return scfg


def configured(cfg: Any) -> bool:
    """Neither `release.path` nor `cache.path` set: this run trains on no frame cache, so the stage has
    nothing to audit and is skipped rather than blocking the gate (launch plans no job for it then)."""
    return any((cfg.get(key) or {}).get("path") for key in ("release", "cache"))


def input_paths(cfg: Any) -> tuple[Path, Path]:
    """`release.path` and `cache.path`; one without the other is an error naming the missing key."""
    out = []
    for key in ("release", "cache"):
        path = (cfg.get(key) or {}).get("path")
        if not path:
            raise InputError(
                f"{key}.path is not set (expected the {key} folder to audit)", field=f"{key}.path"
            )
        if not Path(path).is_dir():
            raise InputError(f"{path}: {key} folder does not exist", path=str(path), field=f"{key}.path")
        out.append(Path(path))
    return out[0], out[1]


def task_of(scfg: RenderCacheConfig, index: int) -> tuple[int, tuple[int, int]]:
    """Array task `index` -> (budget, (episode range, ranges)): budgets x shards, budget-major."""
    return scfg.budgets[index // scfg.shards], (index % scfg.shards, scfg.shards)


def run_part(cfg: DictConfig, ctx: StageContext) -> None:
    """One array task: one episode range of one budget, written for the main job to merge."""
    scfg = _config(cfg, ctx)
    if not configured(cfg):
        return
    index = int(str(ctx.part).rsplit("-", 1)[-1])
    budget, part = task_of(scfg, index)
    release_root, cache_root = input_paths(cfg)
    rs = Renderers(scfg)
    try:
        result = episode_range(scfg, release_root, cache_root, budget, part, rs)
        result["gl"] = rs.gl()
    finally:
        rs.close()
    atomic_write_json(ctx.part_dir(str(ctx.part)) / "partial.json", result)


def _task_results(scfg: RenderCacheConfig, ctx: StageContext) -> tuple[list[dict[str, Any]], list[Check]]:
    found, missing = [], []
    for index in range(scfg.tasks()):
        path = ctx.part_dir(f"{PART}-{index:04d}") / "partial.json"
        try:
            import json

            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            missing.append(str(path))
    errors = []
    if missing:
        errors.append(
            ROWS(
                "tasks",
                "array",
                "error",
                f"{len(missing)} array task(s) left no result (crashed or "
                f"cancelled; see the run's submitit logs); first {missing[0]}",
                evidence={"path": missing[0], "field": "partial.json", "missing": missing},
            )
        )
    return found, errors


def check(
    scfg: RenderCacheConfig,
    release_root: Path,
    cache_root: Path,
    parts: list[dict[str, Any]] | None,
    out: Path,
) -> tuple[list[Check], dict[str, str]]:
    """All rows from the per-task results (None: compute them here, unsharded)."""
    rs = Renderers(scfg)
    try:
        if parts is None:
            parts = [episode_range(scfg, release_root, cache_root, b, (0, 1), rs) for b in scfg.budgets]
        checks = [nested_row(budget_mod.nested(scfg, release_root))]
        for b in scfg.budgets:
            facts = budget_mod.facts(scfg, release_root, cache_root, b)
            checks += budget_rows(scfg, b, facts, merge([p for p in parts if p["budget"] == b]))
        checks.append(determinism_row(scfg, release_root, rs))
        gap, artifacts = gap_row(scfg, release_root, rs, out)
        checks.append(gap)
        checks.append(gl_row(scfg, [g for p in parts for g in p.get("gl", [])] + rs.gl()))
        tasks = [{"budget": p["budget"], "part": p["part"], "gl": p.get("gl")} for p in parts]
        tasks.append({"budget": None, "part": "main", "gl": rs.gl()})
    finally:
        rs.close()
    artifacts["tasks"] = str(atomic_write_json(out / "tasks.json", {"tasks": tasks}))  # GL_RENDERER per task
    return checks, artifacts


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    scfg = _config(cfg, ctx)
    if not configured(cfg):
        reason = "no frame cache to audit (release.path and cache.path are not set)"
        return StageResult(NAME, "skipped", provenance={"reason": reason})
    release_root, cache_root = input_paths(cfg)
    parts, errors = (None, []) if scfg.tasks() == 1 else _task_results(scfg, ctx)
    checks, artifacts = check(scfg, release_root, cache_root, parts, ctx.artifacts_dir)
    for root, tag in ((cache_root, "cache"), (release_root, "release")):
        try:
            checks += checksum_rows(root, tag, getattr(scfg, f"{tag}_sha256"))
        except InputError as exc:
            checks.append(error_check(NAME, exc, "cache"))
    return StageResult.from_checks(NAME, [*errors, *checks], artifacts=artifacts)
