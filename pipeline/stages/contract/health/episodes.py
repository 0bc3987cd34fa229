"""Episode rows: too short for this model, lengths against the metadata, outliers, gaps in the indices,
duplicated episodes.

"Too short" is the model's own horizon, read from the checkpoint's `config.json` (`chunk_size`,
`horizon`, `n_action_steps`, `n_obs_steps`), not a table of policy names: an episode shorter than the
window the model trains on is padded or skipped by the loader, silently. Duplicates are found by a
content digest per episode (exact) and a coarse signature (near), never by comparing all pairs.

With `dataset.episodes` the rows judge the episodes training reads: a copy of an episode that is not
trained on weighs nothing. A format that lists no lengths apart from its rows (robomimic HDF5 without
`num_samples`, `.npz` episodes) gives a skipped lengths row; a length is an outlier only where it departs
from the other episodes' on a log scale (a long take is common, two episodes joined or one cut short is
not), judged once there are `health.min_episodes`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.carries import EPISODE_LENGTHS
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.lerobot_windows import span
from pipeline.record.records import Check
from pipeline.stages.contract.health.common import ROWS, column, episode_ids, listed, trained, trained_text
from pipeline.stages.contract.health.departure import normal_isf
from pipeline.stages.contract.rows import Sources

HORIZON_FIELDS = ("chunk_size", "horizon", "n_action_steps", "action_horizon", "action_chunk_size")
LOG_FLOOR = 0.05  # the smallest spread of log lengths judged against (5 %): equal-length episodes
FAMILY_ALPHA = 0.05  # the chance that any episode of a clean dataset is called a length outlier


def episode_rows(src: Sources, facts: dict[str, Any], data: LeRobotData | None) -> list[Check]:
    every = dict(zip(episode_ids(facts), column(facts, "rows").astype(int).tolist(), strict=True))
    keep = trained(src, list(every))
    lengths = {e: n for (e, n), k in zip(every.items(), keep, strict=True) if k}
    return [
        _short(src, lengths),
        _meta_lengths(src, data, lengths),
        _length_outliers(src, every, lengths),
        _missing(src, facts),
        *_duplicates(src, facts),
    ]


def model_horizon(found: dict[str, int]) -> int | None:
    """Frames one training sample spans, from the window fields the model reader read off config.json
    (`readers.model.window_fields`): the longest chunk/horizon plus the observation steps before it."""
    steps = max((v for k, v in found.items() if k in HORIZON_FIELDS), default=None)
    if steps is None and "n_obs_steps" not in found:
        return None
    steps = (steps or 1) + found.get("n_action_pred_token", 1) - 1  # n_obs_steps only: a one-step policy
    return steps + found.get("n_obs_steps", 1) - 1


def sample_window(hints: dict[str, Any]) -> tuple[int | None, str]:
    """Frames one training sample spans and how that was read: LeRobot's own delta indices for the
    policy type (`readers.lerobot_windows`), else the generic rule over the window fields."""
    fields = dict(hints.get("window") or {})
    deltas = hints.get("delta_indices")
    if deltas is not None:
        said = "; ".join(f"{kind} {_range(ix)}" for kind, ix in deltas.items()) or "the sampled frame alone"
        return span(deltas), f"LeRobot's delta indices for this policy type: {said}"
    return model_horizon(fields), "from " + ", ".join(f"{k}={v}" for k, v in fields.items())


def _range(indices: Any) -> str:
    """`[a..b]` for consecutive indices, else the list; a window too long to list by its ends and count."""
    if isinstance(indices, dict):
        return f"[{indices['first']}..{indices['last']}] ({indices['count']} frames)"
    if indices and indices == list(range(indices[0], indices[-1] + 1)):
        return f"[{indices[0]}..{indices[-1]}]"
    return str(indices)


def _short(src: Sources, lengths: dict[int, int]) -> Check:
    fields = dict(src.a.hints.get("window") or {})
    need, rule = sample_window(src.a.hints)
    if need is None:
        message = f"the model's config.json ({src.a.path}) gives no chunk_size/horizon: length not judged"
        return ROWS(
            "health.episodes.short",
            "episode",
            "unverifiable",
            message,
            severity="soft",
            evidence={"fields": fields},
        )
    short = {e: n for e, n in lengths.items() if n < need}
    message = (
        f"{len(short)} episode(s) shorter than the model's window of {need} frames ({rule}): "
        f"{listed([f'{e} ({n})' for e, n in short.items()])}; the loader pads or drops them"
        if short
        else f"every episode spans the model's window of {need} frames ({rule})"
    )
    return ROWS(
        "health.episodes.short",
        "episode",
        "mismatch" if short else "match",
        message,
        expected=f">= {need} frames",
        actual=min(lengths.values()) if lengths else None,
        evidence={
            "episodes": list(short),
            "lengths": short,
            "fields": fields,
            "delta_indices": src.a.hints.get("delta_indices"),
        },
    )


def _listed_lengths(src: Sources, data: LeRobotData | None) -> dict[int, int] | None:
    """Each episode's length as the metadata lists it apart from the rows: LeRobot's meta/episodes, or
    what the format's reader found (robomimic's per-demo `num_samples`)."""
    if data is None:
        listed_c = src.c.claimed.get("episode_lengths")
        return {int(e): int(n) for e, n in listed_c.items()} if isinstance(listed_c, dict) else None
    try:
        listed_meta = data.episodes()
    except InputError:
        return None
    if listed_meta is None or listed_meta.length is None:
        return None
    return dict(zip(listed_meta.index.tolist(), listed_meta.length.tolist(), strict=True))


def _meta_lengths(src: Sources, data: LeRobotData | None, lengths: dict[int, int]) -> Check:
    claimed = _listed_lengths(src, data)
    if claimed is None:
        carries = src.c.carries
        if EPISODE_LENGTHS not in carries:
            message = carries.skipped(EPISODE_LENGTHS, "lengths against the metadata")
            return ROWS("health.episodes.lengths", "episode", "skipped", message, severity="soft")
        message = "no per-episode lengths in meta"
        return ROWS("health.episodes.lengths", "episode", "unverifiable", message, severity="soft")
    where = "meta/episodes" if data is not None else f"the {src.c.carries.format} metadata"
    off = {
        e: {"meta": int(claimed[e]), "data": n}
        for e, n in lengths.items()
        if e in claimed and int(claimed[e]) != n
    }
    message = (
        f"{len(off)} episode(s) hold another number of rows than {where} says: "
        f"{listed([_pair_text(e, v) for e, v in off.items()])}; the loader's "
        "per-episode windows then cross into other episodes"
        if off
        else f"every followed episode has the length {where} lists ({len(lengths)} compared)"
    )
    return ROWS(
        "health.episodes.lengths",
        "episode",
        "mismatch" if off else "match",
        message + trained_text(src),
        evidence={"episodes": list(off), "lengths": off},
    )


def _pair_text(episode: int, lengths: dict[str, int]) -> str:
    return f"{episode} ({lengths['data']} vs {lengths['meta']})"


def _length_outliers(src: Sources, every: dict[int, int], lengths: dict[int, int]) -> Check:
    """Lengths on a log scale (a take twice the median is as far as one half of it), robust z over every
    episode (median, MAD floored at `LOG_FLOOR`), beyond `length_z` and beyond the z that `FAMILY_ALPHA`
    allows over this many episodes (Bonferroni); only trained episodes are named."""
    least = src.cfg.health.min_episodes
    if len(every) < least:
        message = (
            f"{len(every)} episode(s): a length outlier needs the spread of at least {least} "
            "episodes' lengths; the data's size, not a fault"
        )
        return ROWS("health.episodes.length_outliers", "episode", "skipped", message, severity="soft")
    logs = np.log(np.maximum(np.array(list(every.values()), dtype=float), 1.0))
    centre = float(np.median(logs))
    spread = max(float(np.median(np.abs(logs - centre))) * 1.4826, LOG_FLOOR)
    z_max = max(src.cfg.health.length_z, normal_isf(FAMILY_ALPHA / (2 * len(every))))
    median = float(np.exp(centre))
    odd = {e: n for e, n in lengths.items() if abs(np.log(max(n, 1)) - centre) / spread > z_max}
    rule = (
        f"robust z of the log length > {z_max:.2f} around the median {median:g}, spread x{np.exp(spread):.3g}"
    )
    message = (
        f"{len(odd)} episode length outlier(s) ({rule}): {listed([f'{e} ({n})' for e, n in odd.items()])}"
        if odd
        else f"episode lengths within {rule}"
    )
    return ROWS(
        "health.episodes.length_outliers",
        "episode",
        "mismatch" if odd else "match",
        message + trained_text(src),
        severity="soft",
        evidence={"episodes": list(odd), "median": median, "log_spread": spread, "z_max": z_max},
    )


def _missing(src: Sources, facts: dict[str, Any]) -> Check:
    """Gaps in the episode indices, and episodes training asks for (`dataset.episodes`) that the data
    does not hold: the loader stops on those, so they are hard."""
    seen = sorted(int(e) for e in facts["order"])
    missing = sorted(set(range(seen[0], seen[-1] + 1)) - set(seen)) if seen else []
    absent = sorted(set(src.trained_episodes or ()) - set(seen))
    message = (
        f"{len(missing)} episode index(es) missing between {seen[0]} and {seen[-1]}: {listed(missing)}"
        if missing
        else f"episode indices run {seen[0]}..{seen[-1]} with none missing"
        if seen
        else "no episodes"
    )
    if absent:
        asked = f"dataset.episodes asks for {len(absent)} episode(s) the data lacks: {listed(absent)}"
        message = f"{asked}; {message}"
    return ROWS(
        "health.episodes.missing",
        "episode_index",
        "mismatch" if missing or absent else "match",
        message,
        severity="hard" if absent else "soft",
        evidence={"missing": missing[:200], "episodes": [], "trained_absent": absent[:200]},
    )


def _in_training(src: Sources, groups: list[list[int]]) -> list[list[int]]:
    """Each group of alike episodes cut to those training reads; a group left with one episode is none."""
    cut = [[e for e, k in zip(g, trained(src, g), strict=True) if k] for g in groups]
    return [g for g in cut if len(g) > 1]


def _alike(ids: list[int], digests: np.ndarray) -> list[list[int]]:
    """The groups of episodes sharing a digest, each in episode order, the groups in the order of their
    first episode (a dict over 20k digests in Python cost ~0.15 s; sorted once, only the shared ones)."""
    if not len(ids):
        return []
    _, first, inverse, counts = np.unique(digests, return_index=True, return_inverse=True, return_counts=True)
    members, ends = np.argsort(inverse.ravel(), kind="stable"), np.cumsum(counts)  # each digest's, in order
    shared = np.flatnonzero(counts > 1)
    return [
        [ids[i] for i in members[ends[g] - counts[g] : ends[g]]] for g in shared[np.argsort(first[shared])]
    ]


def _duplicates(src: Sources, facts: dict[str, Any]) -> list[Check]:
    ids = episode_ids(facts)
    every = _alike(ids, column(facts, "digest"))
    groups = _in_training(src, every)
    copies, judged = sum(len(g) - 1 for g in groups), int(trained(src, ids).sum())
    share, limit = copies / max(judged, 1), src.cfg.health.max_duplicate_share
    message = (
        f"{copies} duplicated episode(s) ({share:.1%} of {judged}, limit {limit:.1%}): "
        f"{listed([' = '.join(map(str, g)) for g in groups])}; the same frames recorded twice weigh "
        "double in training"
        if groups
        else f"no two episodes hold the same rows ({len(ids)} content digests)"
    )
    verdict, severity = ("mismatch", "hard" if share > limit else "soft") if groups else ("match", "hard")
    evidence = {
        "groups": groups,
        "share": share,
        "max_duplicate_share": limit,
        "episodes": [e for g in groups for e in g[1:]],
        "untrained_groups": [g for g in every if g not in groups][:50],
    }
    row = ROWS(
        "health.episodes.duplicates",
        "episode",
        verdict,
        message + trained_text(src),
        severity=severity,
        evidence=evidence,
    )
    alike = {e for g in every for e in g}
    return [row, _near(src, facts, alike), _repeated(src, facts, every)]


def _repeated(src: Sources, facts: dict[str, Any], groups: list[list[int]]) -> Check:
    """Runs of rows one episode repeats from another (readers/repeats.py), whole duplicates aside."""
    least, found = src.cfg.health.repeat_windows, facts.get("repeats") or {"runs": []}
    same = {frozenset(g) for g in groups}
    runs = [
        r
        for r in found["runs"]
        if r["windows"] >= least
        and not any({r["episode"], r["of"]} <= g for g in same)
        and trained(src, [r["episode"], r["of"]]).all()
    ]
    shown = [
        f"episode {r['episode']} frames {r['frames'][0]}-{r['frames'][1]} = episode {r['of']} frames "
        f"{r['of_frames'][0]}-{r['of_frames'][1]} (at least {r['rows']} rows)"
        for r in runs
    ]
    rule = (
        f"moving rows equal, bit for bit, in two episodes: >= {least} windows of {found.get('window')} "
        f"rows at one offset, 1 window in {found.get('sample')} kept"
    )
    message = (
        f"{len(runs)} repeated run(s) of rows across episodes ({rule}; a partial re-upload or a merge that "
        f"took part of an episode twice): {listed(shown, 3)}"
        if runs
        else f"no run of rows repeated across episodes ({rule})"
    )
    return ROWS(
        "health.episodes.repeated_rows",
        "episode",
        "mismatch" if runs else "match",
        message,
        severity="hard",
        evidence={
            "runs": runs[:50],
            "repeat_windows": least,
            # both sides: which of the two holds the copy the rows cannot tell (the later one in file
            # order is not always it: a re-upload can overwrite an earlier episode)
            "episodes": sorted({e for r in runs for e in (r["episode"], r["of"])}),
        },
    )


def _near(src: Sources, facts: dict[str, Any], exact: set[int]) -> Check:
    """Episodes whose length, means and first and last rows agree to `near_duplicate` x each dim's std:
    each episode's signature is those numbers on that grid, so equal signatures are found by hashing."""
    tol = src.cfg.health.near_duplicate
    rows = column(facts, "rows").astype(np.float64)
    parts = [rows[:, None]]
    for key in sorted(facts["diff_std"]):
        if f"{key}/total" not in facts["episodes"]:
            continue
        mean = column(facts, f"{key}/total") / np.maximum(rows, 1)[:, None]
        std = np.asarray(src.c.recomputed.get(key, {}).get("std", np.ones(mean.shape[1])), dtype=float)
        scale = np.where(std > 0, std * max(tol, 1e-9), 1.0)
        parts += [
            np.round(v / scale) for v in (mean, column(facts, f"{key}/first"), column(facts, f"{key}/last"))
        ]
    signature = np.concatenate(parts, axis=1)
    keys: dict[bytes, list[int]] = {}
    for episode, row in zip(episode_ids(facts), signature, strict=True):
        keys.setdefault(row.tobytes(), []).append(episode)
    groups = _in_training(src, [g for g in keys.values() if len(g) > 1 and not set(g) <= exact])
    message = (
        f"{len(groups)} group(s) of near-duplicate episodes (length, means, first and last rows within "
        f"{tol:g} x std): {listed([' ~ '.join(map(str, g)) for g in groups])}"
        if groups
        else f"no near-duplicate episodes (length, means and end rows within {tol:g} x std)"
    )
    return ROWS(
        "health.episodes.near_duplicates",
        "episode",
        "mismatch" if groups else "match",
        message,
        severity="soft",
        evidence={"groups": groups, "episodes": [e for g in groups for e in g[1:]]},
    )
