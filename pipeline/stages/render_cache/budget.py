"""Budget-level facts that need no rendering: files (exists, bytes, sha256), shapes, row counts, the
higher-resolution caches' ordering, and the nested-subset property across budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.stages.render_cache import cache as cache_mod
from pipeline.stages.render_cache import release
from pipeline.stages.render_cache.config import RenderCacheConfig


def facts(cfg: RenderCacheConfig, release_root: Path, cache_root: Path, budget: int) -> dict[str, Any]:
    """What one budget's files are and hold; an unreadable input is reported, not raised."""
    paths = cache_mod.budget_cache(cache_root, cfg, budget)
    out: dict[str, Any] = {"files": {k: cache_mod.file_facts(p) for k, p in paths.paths().items()}}
    try:
        entries = release.read_manifest(release_root, cfg.manifest, budget, cfg.episode_dir)
        out["manifest_total"] = sum(e.transition_count for e in entries)
        out["episodes"] = len(entries)
        frames = cache_mod.load_npy(paths.frames, "frames")
        goals = cache_mod.load_npy(paths.goals, "goals")
        meta = cache_mod.load_meta(paths.meta)
        out["shapes"] = {
            "frames": [list(frames.shape), str(frames.dtype)],
            "goals": [list(goals.shape), str(goals.dtype)],
            **{f"meta.{k}": [list(v.shape), str(v.dtype)] for k, v in sorted(meta.items())},
        }
        if paths.proprio is not None:
            prop = cache_mod.load_npy(paths.proprio, "proprio")
            out["shapes"]["proprio"] = [list(prop.shape), str(prop.dtype)]
        out["renderer"] = recorded_renderer(meta, cfg.renderer_meta)
        out["hires"] = {str(s): _hires(frames, meta, f, m, cfg) for s, (f, m) in paths.hires.items()}
    except InputError as exc:
        out["error"] = {"message": str(exc), "path": exc.path, "field": exc.field}
    return out


def recorded_renderer(meta: dict[str, np.ndarray], key: str) -> str | None:
    """The GL_RENDERER string the cache's writer recorded in its meta (a 0-d or 1-element string array);
    None when the cache does not say."""
    value = meta.get(key)
    if value is None or value.size == 0:
        return None
    return str(value.reshape(-1)[0])


def _hires(frames: np.ndarray, meta: dict[str, np.ndarray], f: Path, m: Path, cfg: Any) -> dict[str, Any]:
    """A higher-resolution cache holds the same rows in the same order as the base cache (and the same
    goal positions, which the base cache's own row checks against the release)."""
    goal = cfg.goal_meta
    hf = cache_mod.load_npy(f, f"frames {f.name}")
    hm = cache_mod.load_meta(m, ("action", "traj_id"))
    return {
        "shape": [list(hf.shape), str(hf.dtype)],
        "rows_match": len(hf) == len(frames) == len(hm["action"]),
        "actions_identical": bool(np.array_equal(hm["action"], meta["action"])),
        "traj_ids_identical": bool(np.array_equal(hm["traj_id"], meta["traj_id"])),
        "goals_identical": bool(np.array_equal(hm[goal], meta[goal]))
        if goal in hm and goal in meta
        else None,
        "renderer": recorded_renderer(hm, cfg.renderer_meta),
    }


def nested(cfg: RenderCacheConfig, release_root: Path) -> list[dict[str, Any]]:
    """Each smaller budget's manifest is a prefix of the next larger one (same files, same order)."""
    lists: dict[int, list[str]] = {}
    for b in sorted(cfg.budgets):
        try:
            lists[b] = [
                e.archive_file for e in release.read_manifest(release_root, cfg.manifest, b, cfg.episode_dir)
            ]
        except InputError:
            continue  # the budget's own rows report it
    ordered = sorted(lists)
    out = []
    for small, large in zip(ordered[:-1], ordered[1:], strict=True):
        a, b = lists[small], lists[large]
        diverge = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        prefix = len(a) <= len(b) and diverge is None
        out.append({"small": small, "large": large, "is_prefix": prefix, "first_difference": diverge})
    return out
