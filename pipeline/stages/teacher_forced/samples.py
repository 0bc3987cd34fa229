"""Paired samples: which frames every model is scored on, chosen once and provable afterwards.

Every model is compared on the same frames, so the selection is seeded and stratified (episodes in a
seeded order, each round moving to the next third of the episode: start, middle, end), and saved as a
manifest of sample identities (episode, frame, a sha256 of the row's values) under a fingerprint of the
data (feature schema, row counts). A later run given that manifest re-reads the same rows and proves
they still hold the same values; any drift is a hard finding, not a silently different comparison.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError

POSITIONS = ("start", "middle", "end")
MANIFEST_VERSION = 1


@dataclass
class Frames:
    """The dataset's vector columns in row order, with each row's episode and frame."""

    root: Path
    columns: dict[str, np.ndarray]  # key -> (rows, D) float32
    episode: np.ndarray  # (rows,) int64
    frame: np.ndarray  # (rows,) int64
    names: dict[str, list[str] | None] = field(default_factory=dict)
    schema: dict[str, Any] = field(default_factory=dict)
    # the whole dataset's per-episode facts and moments (`sample_index.Index`) where these rows are only
    # the sampled episodes'; None where they are every row
    dataset: Any = None

    def __len__(self) -> int:
        return len(self.episode)

    def moments(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std of a column over every row of the dataset, float64."""
        if self.dataset is not None and key in self.dataset.moments:
            return self.dataset.moments[key]
        values = self.columns[key].astype(np.float64)
        return values.mean(axis=0), values.std(axis=0)


def read_frames(root: Path, keys: Sequence[str]) -> Frames:
    """THE one call site of the dataset readers: the LeRobot data API (v2.0-v3.0, path containment)."""
    from pipeline.readers.lerobot_data import LeRobotData

    data = LeRobotData(root)
    features = check_keys(data, keys)
    wanted = [*keys, "episode_index"] + (["frame_index"] if "frame_index" in features else [])
    cat = data.frames(wanted)
    if "episode_index" not in cat:
        raise InputError(f"{root}: no episode_index column", path=root, field="episode_index")
    return frames_of(data.root, features, keys, wanted, cat)


def frames_of(
    root: Path,
    features: Mapping[str, Any],
    keys: Sequence[str],
    wanted: Sequence[str],
    cat: Mapping[str, np.ndarray],
    dataset: Any = None,
) -> Frames:
    """A Frames from the columns read (`wanted`: `keys`, episode_index and frame_index where the data
    has it), every row's (`read_frames`) or the sampled episodes' (`sample_index.load`, `dataset` set)."""
    from pipeline.readers.lerobot_dataset import flat_names

    episode = cat["episode_index"].reshape(-1).astype(np.int64)
    frame = cat["frame_index"].reshape(-1).astype(np.int64) if "frame_index" in cat else _counts(episode)
    described = [k for k in wanted if k != "episode_index"]
    schema = {k: {"dtype": features[k].get("dtype"), "shape": features[k].get("shape")} for k in described}
    names = {k: flat_names(features[k].get("names")) for k in keys}
    columns = {k: np.asarray(cat[k], dtype=np.float32).reshape(len(episode), -1) for k in keys}
    return Frames(root, columns, episode, frame, names, schema, dataset=dataset)


def check_keys(data: Any, keys: Sequence[str]) -> dict[str, Any]:
    """info.json's features, with every evaluated key among them (else an InputError naming it)."""
    info_path = data.root / "meta" / "info.json"
    features = data.features
    missing = [k for k in keys if k not in features]
    if missing:
        raise InputError(
            f"{info_path}: features lack {missing[0]!r} (has {sorted(features)})",
            path=info_path,
            field=missing[0],
        )
    return features


def _ranks(episode: np.ndarray, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's rank within its episode (by frame) and its episode's length; one sort, no per-episode
    scans, so a dataset of thousands of episodes costs O(rows log rows)."""
    order = np.lexsort((frame, episode))
    sorted_ep = episode[order]
    starts = np.flatnonzero(np.r_[True, sorted_ep[1:] != sorted_ep[:-1]])
    lengths = np.diff(np.r_[starts, len(order)])
    group = np.repeat(np.arange(len(starts)), lengths)
    rank, length = np.empty(len(order), np.int64), np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order)) - starts[group]
    length[order] = lengths[group]
    return rank, length


def _counts(episode: np.ndarray) -> np.ndarray:
    """Frame numbers from row order when the data has no frame_index column."""
    return _ranks(episode, np.arange(len(episode)))[0]


def position_of(frames: Frames) -> np.ndarray:
    """Each row's place in its episode in [0, 1] (0 = first frame, 1 = last)."""
    rank, length = _ranks(frames.episode, frames.frame)
    return rank / np.maximum(1, length - 1)


def third(rank: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Which third of its episode (0 start, 1 middle, 2 end) each row lies in, from its rank."""
    return np.minimum((rank / np.maximum(1, length - 1) * 3).astype(int), 2)


def _strata(frames: Frames) -> dict[tuple[int, int], np.ndarray]:
    """Rows (ascending) of every (episode, third of the episode) stratum."""
    part = third(*_ranks(frames.episode, frames.frame))
    order = np.lexsort((np.arange(len(frames)), part, frames.episode))
    keys = np.stack([frames.episode[order], part[order]], axis=1)
    cuts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]).any(axis=1), True])
    return {(int(keys[a, 0]), int(keys[a, 1])): order[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)}


def select(frames: Frames, n: int, seed: int, episodes: Sequence[int] | None = None) -> np.ndarray:
    """Row indices of `n` samples: episodes in a seeded order, positions rotating start/middle/end."""
    strata = _strata(frames)
    empty = np.zeros(0, np.int64)
    pool = np.unique(frames.episode) if episodes is None else np.asarray(sorted(set(episodes)))
    return draw(frames.root, pool, n, seed, lambda ep: [strata.get((ep, t), empty) for t in range(3)])


def draw(
    root: Path, pool: np.ndarray, n: int, seed: int, strata: Callable[[int], list[np.ndarray]]
) -> np.ndarray:
    """The seeded draw over `pool`'s episodes; `strata(ep)` gives an episode's rows per third, ascending
    (from every row, or from per-episode facts: `sample_index`, the same draw)."""
    rng = np.random.default_rng(seed)
    pool = rng.permutation(pool)
    if len(pool) == 0:
        raise InputError(f"{root}: no episodes to sample from", path=root, field="episodes")
    chosen: list[int] = []
    taken: set[int] = set()
    for step in range(n * 4):
        if len(chosen) == n:
            break
        ep = int(pool[step % len(pool)])
        parts = strata(ep)
        stratum = (step % len(pool) + step // len(pool)) % 3
        rows = [int(r) for r in parts[stratum] if r not in taken]
        if not rows:
            whole = np.sort(np.concatenate(parts))
            rows = [int(r) for r in whole if r not in taken]
        if rows:
            pick = rows[rng.integers(len(rows))]
            chosen.append(pick)
            taken.add(pick)
    return np.asarray(chosen, dtype=np.int64)


def row_hash(frames: Frames, row: int) -> str:
    """sha256 of one row's values (float32 bytes of every evaluated column, in key order)."""
    digest = hashlib.sha256()
    for key in sorted(frames.columns):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(frames.columns[key][row], dtype=np.float32).tobytes())
    return digest.hexdigest()


def fingerprint(frames: Frames, rows: np.ndarray) -> dict[str, Any]:
    """Schema, row counts and the sampled rows' hashes: equal fingerprints = the same evaluation data."""
    if frames.dataset is not None:  # these rows are the sampled episodes': the dataset's own counts
        per_episode, rows_total = frames.dataset.counts(), frames.dataset.rows
    else:
        episodes, counts = np.unique(frames.episode, return_counts=True)
        per_episode, rows_total = dict(zip(episodes.tolist(), counts.tolist(), strict=True)), len(frames)
    hashes = [row_hash(frames, int(r)) for r in rows]
    return {
        "schema": frames.schema,
        "rows": rows_total,
        "episodes": len(per_episode),
        "episode_rows_sha256": hashlib.sha256(
            json.dumps({str(e): int(c) for e, c in per_episode.items()}, sort_keys=True).encode()
        ).hexdigest(),
        "samples_sha256": hashlib.sha256("".join(hashes).encode()).hexdigest(),
    }


def subsets(
    frames: Frames, rows: np.ndarray, column: str | None, groups: Mapping[str, Sequence[int]]
) -> list[str]:
    """Each sample's subset: a named episode list (rest = 'other'), else a column's value, else 'all'."""
    if groups:
        lookup = {int(e): name for name, eps in groups.items() for e in eps}
        return [lookup.get(int(frames.episode[r]), "other") for r in rows]
    if column:
        values = frames.columns[column][rows].reshape(len(rows), -1)[:, 0]
        return [f"{column}={v:g}" for v in values]
    return ["all"] * len(rows)


def manifest(frames: Frames, rows: np.ndarray, seed: int, labels: list[str]) -> dict[str, Any]:
    pos = position_of(frames)
    return {
        "version": MANIFEST_VERSION,
        "dataset": str(frames.root),
        "seed": seed,
        "fingerprint": fingerprint(frames, rows),
        "samples": [
            {
                "episode": int(frames.episode[r]),
                "frame": int(frames.frame[r]),
                "position": round(float(pos[r]), 6),
                "subset": label,
                "sha256": row_hash(frames, int(r)),
            }
            for r, label in zip(rows, labels, strict=True)
        ],
    }


def _find(frames: Frames, wanted: Sequence[tuple[int, int]]) -> list[int | None]:
    """Row of each (episode, frame) pair, None where the data lacks it (one sort, then binary search)."""
    order = np.lexsort((frames.frame, frames.episode))
    eps, frs = frames.episode[order], frames.frame[order]
    out: list[int | None] = []
    for episode, frame in wanted:
        lo = np.searchsorted(eps, episode, "left")
        hi = np.searchsorted(eps, episode, "right")
        at = lo + np.searchsorted(frs[lo:hi], frame)
        out.append(int(order[at]) if at < hi and frs[at] == frame else None)
    return out


def manifest_episodes(saved: Any) -> list[int]:
    """The episodes a saved manifest's samples name (what must be read to check them); what is not a
    well-formed sample is left to `resolve`, which names it."""
    try:
        return sorted({int(s["episode"]) for s in saved["samples"]})
    except (KeyError, TypeError, ValueError):
        return []


def resolve(frames: Frames, saved: Mapping[str, Any], path: Path) -> tuple[np.ndarray, list[str]]:
    """Rows of a saved manifest in this data, and what no longer matches (empty = provably the same)."""
    try:
        samples = list(saved["samples"])
        want = saved["fingerprint"]
    except (KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a sample manifest ({exc})", path=path, field="samples") from exc
    found = _find(frames, [(int(s["episode"]), int(s["frame"])) for s in samples])
    rows, problems = [], []
    for number, (sample, row) in enumerate(zip(samples, found, strict=True)):
        if row is None:
            problems.append(f"sample {number}: episode {sample['episode']} frame {sample['frame']} absent")
            continue
        rows.append(row)
        if row_hash(frames, row) != sample.get("sha256"):
            problems.append(f"sample {number}: episode {sample['episode']} frame {sample['frame']} changed")
    have = fingerprint(frames, np.asarray(rows, dtype=np.int64))
    for key in ("schema", "rows", "episodes", "episode_rows_sha256"):
        if have[key] != want.get(key):
            problems.append(f"fingerprint.{key}: manifest {want.get(key)!r}, data {have[key]!r}")
    return np.asarray(rows, dtype=np.int64), problems
