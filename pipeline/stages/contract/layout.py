"""Layout and ordering: feature keys, shapes, vector element names and order, image keys and order,
and a data-driven permutation check for when names agree or are absent.

A permutation passes every shape check and corrupts the meaning of every token, so names are not
enough: C's per-dim statistics are matched against A's with a minimum-cost assignment, and a cycle of
dims that fits much better permuted than in place is reported (e.g. `state[3] <-> state[4]`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.contract.assignment import assign
from pipeline.stages.contract.rows import (
    NAME,
    Pair,
    Sources,
    a_label,
    dim_values,
    fmt,
    rename_evidence,
    rename_text,
    spec,
    usable_stats,
    vec,
)

SIGNATURE = ("mean", "std")
ROWS = Rows(NAME, "layout")


def key_rows(src: Sources, pair: Pair) -> list[Check]:
    key = pair.a.key
    check_id = f"layout.key:{key}"
    if pair.c is None:
        same_role = [k for k, f in src.c.features.items() if f.role == pair.a.role]
        message = f"{key}: not in the dataset" + (f"; same-role keys there: {same_role}" if same_role else "")
        message += rename_text(src)
        configured = key if key in src.b_features() else None
        evidence = {"dataset_keys": list(src.c.features), **rename_evidence(src)}
        return [
            ROWS(check_id, key, "mismatch", message, expected=key, configured=configured, evidence=evidence)
        ]
    lerobot_both = src.a.kind.startswith("lerobot") and src.c.kind.startswith("lerobot")
    if pair.how == "role" and lerobot_both:
        message = (
            f"{key}: the dataset calls it '{pair.c.key}'; LeRobot matches features by exact key (after "
            f"the rename map), so this feature would be dropped or passed through{rename_text(src)}"
        )
        evidence = {"matched_by": "role", **rename_evidence(src)}
        return [ROWS(check_id, key, "mismatch", message, expected=key, actual=pair.c.key, evidence=evidence)]
    note = "" if pair.how == "exact" else f" (matched by {pair.how})"
    return [
        ROWS(
            check_id,
            key,
            "match",
            f"{key} -> dataset '{pair.c.key}'{note}",
            expected=key,
            configured=key if key in src.b_features() else "inherited",
            actual=pair.c.key,
            evidence={"matched_by": pair.how},
        )
    ]


def shape_rows(src: Sources, pair: Pair) -> list[Check]:
    if pair.c is None:
        return []
    key = pair.a.key
    b = src.b_features().get(key)
    dims = {"A": pair.a.dim, "B": b.dim if b else None, "C": pair.c.dim}
    known = {k: v for k, v in dims.items() if v is not None}
    if len(known) < 2:
        verdict, message = "unverifiable", f"{key}: only {list(known) or 'no source'} state(s) a width"
    else:
        verdict = "match" if len(set(known.values())) <= 1 else "mismatch"
        message = f"{key}: width A {dims['A']}, B {dims['B']}, C {dims['C']}"
    evidence = {"A": spec(pair.a), "C": spec(pair.c, key=True), **rename_evidence(src)}
    if verdict == "mismatch":
        message = (
            f"{key}: the {a_label(src)} expects {spec(pair.a)}, the dataset's {spec(pair.c, key=True)} "
            f"gives width {dims['C']} (training config: {dims['B'] or 'inherits'}){rename_text(src)}"
        )
        if src.a.kind.startswith("lerobot") and src.c.kind.startswith("lerobot"):
            message += "; finetuning keeps the base's input_features, so the model trains on a wrong spec"
    widths = {"expected": dims["A"], "configured": dims["B"], "actual": dims["C"]}
    return [ROWS(f"layout.shape:{key}", key, verdict, message, evidence=evidence, **widths)]


def names_rows(src: Sources, pair: Pair) -> list[Check]:
    """Element names and order where at least two sources name the dims."""
    if pair.c is None:
        return []
    key = pair.a.key
    b = src.b_features().get(key)
    named = {s: n for s, n in (("A", pair.a.names), ("B", b.names if b else None), ("C", pair.c.names)) if n}
    if len(named) < 2:
        return []
    ref_source, ref = next(iter(named.items()))
    problems = {}
    for source, names in named.items():
        if names == ref:
            continue
        if sorted(names) == sorted(ref):
            moved = [i for i, (x, y) in enumerate(zip(ref, names, strict=True)) if x != y]
            problems[source] = {"permuted_dims": moved, "as": [names[i] for i in moved]}
        else:
            problems[source] = {"differs": sorted(set(names) ^ set(ref))[:12]}
    permuted = any("permuted_dims" in p for p in problems.values())
    verdict = "mismatch" if problems else "match"
    severity = "hard" if permuted or any(len(n) != len(ref) for n in named.values()) else "soft"
    msg = (
        f"{key}: names agree across {', '.join(named)}"
        if not problems
        else f"{key}: names differ from {ref_source}: {problems}"
    )
    return [
        ROWS(
            f"layout.names:{key}",
            key,
            verdict,
            msg,
            severity=severity if problems else "hard",
            expected=named.get("A"),
            configured=named.get("B"),
            actual=named.get("C"),
            evidence={"reference": ref_source, "problems": problems},
        )
    ]


def permutation_rows(src: Sources, pair: Pair) -> list[Check]:
    """Match C's per-dim (mean, std) against A's; report cycles that fit far better permuted."""
    if pair.c is None:
        return []
    key = pair.a.key
    a_stats, c_stats = usable_stats(src.a.stats.get(pair.a.key)), src.c.recomputed.get(pair.c.key)
    if not a_stats or not c_stats:
        return []
    stats = [s for s in SIGNATURE if vec(a_stats, s) is not None and vec(c_stats, s) is not None]
    n = pair.a.dim or 0
    if not stats or any(vec(a_stats, s).size != n or vec(c_stats, s).size != n for s in stats) or n < 2:
        return []
    cost = _cost(a_stats, c_stats, stats)
    perm = assign(cost)
    cfg = src.cfg.permutation
    taken = src.explained.get(key, {})  # dims a sign/offset/relation row explains in place
    cycles = [
        c
        for c in _cycles(perm)
        if _accept(c, perm, cost, cfg.match_tol, cfg.min_gain) and not any(d in taken for d in c)
    ]
    if not cycles:
        message = f"{key}: per-dim stats of the data line up with the base's in place ({n} dims)"
        evidence = {"signature": stats, "identity_cost": fmt(np.diag(cost), 3)}
        check_id = f"layout.permutation:{key}"
        return [
            ROWS(check_id, key, "match", message, expected="identity", actual="identity", evidence=evidence)
        ]
    mapping = {int(i): int(perm[i]) for c in cycles for i in c}
    src.permutations[key] = mapping
    src.explain(key, sorted(mapping), "layout.permutation")
    names = pair.c.names or pair.a.names
    short = key.split(".")[-1]
    swaps = [" <-> ".join(_dim_label(short, d, names) for d in cyc) for cyc in cycles]
    evidence = _swap_evidence(cycles, mapping, cost, stats, (a_stats, c_stats), names)
    evidence["values"] = dim_values(src, pair, sorted(mapping), c_dims=mapping)
    first = min(mapping)
    message = (
        f"{key}: likely swap {'; '.join(swaps)}: the data in dim {mapping[first]} matches the base's "
        f"dim {first} (cost {evidence['permuted_cost'][first]} vs {evidence['in_place_cost'][first]} "
        "in place)"
    )
    check_id = f"layout.permutation:{key}"
    return [ROWS(check_id, key, "mismatch", message, expected="identity", actual=swaps, evidence=evidence)]


def _swap_evidence(
    cycles: list[list[int]],
    mapping: dict[int, int],
    cost: np.ndarray,
    stats: list[str],
    sources: tuple[dict, dict],
    names: list[str] | None,
) -> dict[str, Any]:
    """Per moved dim: the in-place and permuted costs, and A's and C's values behind them."""
    dims = sorted(mapping)
    a_stats, c_stats = sources
    return {
        "cycles": [[int(d) for d in cyc] for cyc in cycles],
        "signature": stats,
        "in_place_cost": {d: round(float(cost[d, d]), 3) for d in dims},
        "permuted_cost": {d: round(float(cost[d, mapping[d]]), 3) for d in dims},
        "runner_up_cost": {d: round(_runner_up(cost, d, mapping[d]), 3) for d in dims},
        "A": {s: {d: round(float(vec(a_stats, s)[d]), 5) for d in dims} for s in stats},
        "C": {s: {d: round(float(vec(c_stats, s)[d]), 5) for d in dims} for s in stats},
        "names": {d: names[d] for d in dims} if names else None,
    }


def _runner_up(cost: np.ndarray, d: int, partner: int) -> float:
    """The cheapest other pairing of the base's dim `d` or of the data's dim `partner`: how far the
    found partner beats the next candidate (a remedy is offered only where it clearly does)."""
    row = np.delete(cost[d], partner)
    col = np.delete(cost[:, partner], d)
    return float(min(row.min(initial=np.inf), col.min(initial=np.inf)))


def _dim_label(short: str, d: int, names: list[str] | None) -> str:
    return f"{short}[{d}]" + (f" ({names[d]})" if names and d < len(names) else "")


def _cost(a_stats: dict, c_stats: dict, stats: list[str]) -> np.ndarray:
    """cost[i, j]: how unlike A's dim i is C's dim j, in units of their pooled spread."""
    std_a, std_c = vec(a_stats, "std"), vec(c_stats, "std")
    floor = 1e-9 + 1e-3 * float(max(np.max(np.abs(std_a)), np.max(np.abs(std_c))))
    scale = std_a[:, None] + std_c[None, :] + floor
    total = sum(np.abs(vec(a_stats, s)[:, None] - vec(c_stats, s)[None, :]) for s in stats) / scale
    n = total.shape[0]
    return total + 1e-9 * (1 - np.eye(n))  # ties keep dims in place


def _cycles(perm: np.ndarray) -> list[list[int]]:
    seen, out = set(), []
    for start in range(len(perm)):
        if start in seen or perm[start] == start:
            continue
        cycle, i = [], start
        while i not in seen:
            seen.add(i)
            cycle.append(int(i))
            i = int(perm[i])
        out.append(cycle)
    return out


def _accept(cycle: list[int], perm: np.ndarray, cost: np.ndarray, tol: float, min_gain: float) -> bool:
    permuted = np.array([cost[i, perm[i]] for i in cycle])
    in_place = np.array([cost[i, i] for i in cycle])
    return bool(np.all(permuted <= tol) and permuted.sum() <= (1 - min_gain) * in_place.sum())


def frames_rows(src: Sources) -> list[Check]:
    """What the metadata claims (frames, per-episode lengths, episodes) vs what the data files hold."""
    claimed = src.c.claimed
    evidence = {"claimed": claimed, "rows": src.c.rows, "episodes": src.c.episodes, "files": len(src.c.files)}
    total, lengths = claimed.get("total_frames"), claimed.get("episode_lengths_total")
    severity = src.cfg.frames_severity
    if not src.c.files and src.c.kind.startswith("lerobot"):
        return [_metadata_only_row(src, total, lengths, evidence)]
    problems = _frame_problems(src, total, lengths)
    if problems:
        text = "; ".join(f"{k}: metadata says {v[0]}, data holds {v[1]}" for k, v in problems.items())
        verdict, message = "mismatch", f"{src.c.path}: {text}"
    else:
        verdict, message = "match", f"{src.c.rows} rows in {src.c.episodes} episode(s), as the metadata says"
        severity = "hard"
    return [
        ROWS(
            "layout.frames:dataset",
            "dataset",
            verdict,
            message,
            severity=severity,
            expected=total,
            actual=src.c.rows,
            evidence=evidence,
        )
    ]


def _frame_problems(src: Sources, total: Any, lengths: Any) -> dict[str, list[int]]:
    problems = {}
    if total is not None and int(total) != src.c.rows:
        problems["total_frames"] = [int(total), src.c.rows]
    if lengths is not None and int(lengths) != src.c.rows:
        problems["episode lengths"] = [int(lengths), src.c.rows]
    episodes = src.c.claimed.get("total_episodes")
    if episodes is not None and src.c.episodes and int(episodes) != src.c.episodes:
        problems["total_episodes"] = [int(episodes), src.c.episodes]
    return problems


def _metadata_only_row(src: Sources, total: Any, lengths: Any, evidence: dict[str, Any]) -> Check:
    """A LeRobot dataset shipped without data files: only the metadata can contradict itself."""
    check_id = "layout.frames:dataset"
    if total is not None and lengths is not None and int(total) != int(lengths):
        message = (
            f"{src.c.path}: info.json total_frames {total} but the episodes metadata sums to "
            f"{lengths} (no data files to settle it)"
        )
        severity = src.cfg.frames_severity
        return ROWS(
            check_id,
            "dataset",
            "mismatch",
            message,
            severity=severity,
            expected=total,
            actual=lengths,
            evidence=evidence,
        )
    message = f"{src.c.path}: no data files, only metadata; nothing to recompute from"
    evidence = {**evidence, "notes": src.c.notes}
    return ROWS(check_id, "dataset", "unverifiable", message, expected=total, actual=None, evidence=evidence)


def image_rows(src: Sources) -> list[Check]:
    """Image keys and their order: A's positional image tokens vs B's declared order vs C's keys."""
    a_images = [k for k, f in src.a.features.items() if f.role == "image"]
    if not a_images:
        return []
    c_images = [k for k, f in src.c.features.items() if f.role == "image"]
    b_order = src.b.hints.get("image_order") or [k for k, f in src.b.features.items() if f.role == "image"]
    reordered = bool(b_order) and [k for k in b_order if k in a_images] != [
        k for k in a_images if k in b_order
    ]
    # which dataset camera provides each of the base's is one row per camera (`inputs.camera_rows`)
    why = [f"training orders cameras {b_order}, the base's token order is {a_images}"] if reordered else []
    message = "; ".join(why) if why else f"image order agrees: {a_images}"
    configured = (b_order or None) if why else (b_order or "inherited")
    evidence = {"A": a_images, "B": b_order or "inherited", "C": c_images}
    return [
        ROWS.judge(
            "layout.images",
            "images",
            not why,
            message,
            expected=a_images,
            configured=configured,
            actual=c_images,
            evidence=evidence,
        )
    ]
