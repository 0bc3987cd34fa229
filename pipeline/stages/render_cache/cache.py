"""The frame cache of one budget: frames and goal frames (.npy, memory-mapped), metadata (.npz without
pickles: action, state, traj_id, optional goal position), an optional proprio array, and optional
higher-resolution caches. File names come from the config's templates.

Opening never reads the frames: `np.load(mmap_mode="r")` maps them, so a multi-GB cache costs the pages
the sampled checks touch. A missing or truncated file is an `InputError` naming file and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.storage.digest import sha256_file
from pipeline.storage.files import NPY_ERRORS, npz_member

META_KEYS = ("action", "state", "traj_id")


def file_facts(path: Path) -> dict[str, Any]:
    """exists / bytes / sha256: the evidence a `files` row carries."""
    if not path.is_file():
        return {"path": str(path), "exists": False, "bytes": None, "sha256": None}
    return {
        "path": str(path),
        "exists": True,
        "bytes": path.stat().st_size,
        "sha256": sha256_file(path, what="a cache file"),
    }


def load_npy(path: Path, what: str) -> np.ndarray:
    """A memory-mapped .npy; a missing, truncated or pickled file names itself."""
    if not path.is_file():
        raise InputError(f"{path}: {what} file does not exist", path=str(path), field=what)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except NPY_ERRORS as exc:
        raise InputError(
            f"{path}: {what} unreadable or truncated ({exc})", path=str(path), field=what
        ) from None


def load_meta(path: Path, keys: tuple[str, ...] = META_KEYS) -> dict[str, np.ndarray]:
    """Every array of the meta .npz, read now (small), with `keys` required."""
    if not path.is_file():
        raise InputError(f"{path}: meta file does not exist", path=str(path), field="meta")
    try:
        with np.load(path, allow_pickle=False) as handle:
            out = {k: np.asarray(npz_member(handle, k, path)) for k in handle.files}
    except NPY_ERRORS as exc:
        raise InputError(
            f"{path}: meta unreadable or truncated ({exc})", path=str(path), field="meta"
        ) from None
    for key in keys:
        if key not in out:
            raise InputError(f"{path}: meta has no {key!r} (has {sorted(out)})", path=str(path), field=key)
    return out


@dataclass
class BudgetCache:
    """The paths of one budget's cache files (templates resolved); arrays opened on demand."""

    budget: int
    frames: Path
    goals: Path
    meta: Path
    proprio: Path | None
    hires: dict[int, tuple[Path, Path]] = field(default_factory=dict)  # size -> (frames, meta)

    def paths(self) -> dict[str, Path]:
        out = {"frames": self.frames, "goals": self.goals, "meta": self.meta}
        if self.proprio is not None:
            out["proprio"] = self.proprio
        for size, (frames, meta) in self.hires.items():
            out[f"frames{size}"], out[f"meta{size}"] = frames, meta
        return out


def budget_cache(root: Path, cfg: Any, budget: int) -> BudgetCache:
    """Resolve the config's templates for `budget` (cfg: RenderCacheConfig)."""
    root = Path(root)
    largest = max(cfg.budgets)
    hires = {
        h.size: (root / h.frames.format(budget=budget), root / h.meta.format(budget=budget))
        for h in cfg.hires
        if budget in (h.budgets or [largest])
    }
    return BudgetCache(
        budget=budget,
        frames=root / cfg.frames.format(budget=budget),
        goals=root / cfg.goals.format(budget=budget),
        meta=root / cfg.meta.format(budget=budget),
        proprio=root / cfg.proprio.format(budget=budget) if cfg.proprio else None,
        hires=hires,
    )
