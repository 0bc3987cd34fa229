"""Turn the budget facts and the merged per-episode results into rows (one call per check).

Rows are a pure function of the concatenated per-episode lists, so the merge of a sharded run and the
unsharded run give identical rows (a test holds them to it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.content import out_of_order
from pipeline.stages.render_cache.frame_rows import ROWS, frame_rows
from pipeline.stages.render_cache.stats import bound_fields

__all__ = ["ROWS", "budget_rows", "frame_rows", "merge", "nested_row"]
ROW_CHECKS = (("actions", "order.actions"), ("states", "order.states"), ("traj_id", "order.traj_id"))


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One budget's parts (any split) as one result: lists concatenated in episode order."""
    parts = sorted(parts, key=lambda p: p["part"][0])
    errors = [p["error"] for p in parts if "error" in p]
    out: dict[str, Any] = {"error": errors[0] if errors else None, "episodes": [], "frames": []}
    out.update(hires={}, content={}, renderer={})
    for p in parts:
        out["episodes"] += p.get("episodes", [])
        out["frames"] += p.get("frames", [])
        for key in ("hires", "content"):
            for size, rows in p.get(key, {}).items():
                out[key].setdefault(size, []).extend(rows)
        for size, name in p.get("renderer", {}).items():
            out["renderer"].setdefault(size, name)
    return out


def _error_row(check_id: str, feature: str, err: dict[str, Any]) -> Check:
    return ROWS(
        check_id,
        feature,
        "error",
        err["message"],
        evidence={"path": err.get("path"), "field": err.get("field")},
    )


def budget_rows(
    cfg: RenderCacheConfig, budget: int, facts: dict[str, Any], got: dict[str, Any]
) -> list[Check]:
    """Every row of one budget."""
    tag, feature = f"b{budget}", f"budget {budget}"
    rows = [files_row(tag, feature, facts)]
    err = facts.get("error") or got.get("error")
    if err:
        return [*rows, _error_row(f"load.{tag}", feature, err)]
    eps = [e for e in got["episodes"] if "error" not in e]
    bad = [e for e in got["episodes"] if "error" in e]
    if bad:
        first = bad[0]["error"]
        rows.append(
            _error_row(
                f"episodes.{tag}",
                feature,
                {**first, "message": f"{len(bad)} episode file(s) unreadable; first: {first['message']}"},
            )
        )
    rows += [shapes_row(cfg, tag, feature, facts), counts_row(tag, feature, facts, eps)]
    rows += [order_row(f"{name}.{tag}", feature, key, eps) for key, name in ROW_CHECKS]
    if any("proprio" in e for e in eps):
        rows.append(order_row(f"proprio.{tag}", feature, "proprio", eps, "recomputed with " + cfg.proprio_fn))
    if any("goal_position" in e for e in eps):
        rows.append(
            order_row(
                f"goals.position.{tag}", feature, "goal_position", eps, f"meta[{cfg.goal_meta!r}] vs release"
            )
        )
    rows += replay_rows(cfg, tag, feature, eps)
    population = sum(int(e.get("checked") or 0) for e in eps)  # the rows a sample was drawn from
    sides = {"check": got["renderer"].get(str(cfg.size)), "cache": facts.get("renderer")}
    rows += frame_rows(cfg, f"frames.{tag}", feature, got["frames"], cfg.size, population, sides)
    rows.append(goal_row(tag, feature, eps, cfg))
    for size, info in facts.get("hires", {}).items():
        content = got["content"].get(size, [])
        rows.append(hires_order_row(cfg, f"hires{size}.order.{tag}", feature, info, (int(size), content)))
        hires = got["hires"].get(size, [])
        sides = {"check": got["renderer"].get(size), "cache": info.get("renderer")}
        rows += frame_rows(cfg, f"hires{size}.{tag}", feature, hires, int(size), population, sides)
    return rows


def files_row(tag: str, feature: str, facts: dict[str, Any]) -> Check:
    files = facts["files"]
    missing = [k for k, f in files.items() if not f["exists"]]
    if missing:
        path = files[missing[0]]["path"]
        return ROWS(
            f"files.{tag}",
            feature,
            "error",
            f"{path}: cache file missing ({', '.join(missing)})",
            evidence={"path": path, "field": missing[0], "files": files},
        )
    total = sum(f["bytes"] for f in files.values())
    return ROWS.judge(
        f"files.{tag}",
        feature,
        True,
        f"{len(files)} cache files, {total} bytes, sha256 recorded",
        actual={k: f["sha256"] for k, f in files.items()},
        evidence={"files": files},
    )


def shapes_row(cfg: RenderCacheConfig, tag: str, feature: str, facts: dict[str, Any]) -> Check:
    shapes = facts["shapes"]
    n = shapes["frames"][0][0] if shapes["frames"][0] else 0
    want = [[n, cfg.size, cfg.size, 3], "uint8"]
    problems = []
    if shapes["frames"] != want:
        problems.append(f"{facts['files']['frames']['path']}: frames {shapes['frames']} (expected {want})")
    if shapes["goals"] != shapes["frames"]:
        problems.append(f"goals {shapes['goals']} != frames {shapes['frames']}")
    for key, (shape, _dtype) in shapes.items():
        per_row = (key.startswith("meta.") and key != f"meta.{cfg.renderer_meta}") or key == "proprio"
        if per_row:  # the recorded renderer string is the one meta entry that is not one value per row
            if not shape or shape[0] != n:
                problems.append(f"{key} has {shape[0] if shape else 0} rows, frames {n}")
    for size, info in facts.get("hires", {}).items():
        if info["shape"][0][1:] != [int(size), int(size), 3]:
            problems.append(f"frames{size} {info['shape']}")
    return ROWS.judge(
        f"shapes.{tag}",
        feature,
        not problems,
        "; ".join(problems) or f"{n} rows of {want[0][1:]} uint8",
        expected=want,
        actual=shapes["frames"],
        evidence={"shapes": shapes},
    )


def counts_row(tag: str, feature: str, facts: dict[str, Any], eps: list[dict[str, Any]]) -> Check:
    n = facts["shapes"]["frames"][0][0]
    off = [e for e in eps if e["manifest"] != e["release_transitions"]]
    ok = n == facts["manifest_total"] and not off
    msg = f"cache {n} rows, manifest {facts['manifest_total']} transitions over {facts['episodes']} episodes"
    if off:
        e = off[0]
        msg += (
            f"; {len(off)} manifest line(s) disagree with their file, first {e['file']}: "
            f"transition_count {e['manifest']} vs {e['release_transitions']} in the file"
        )
    return ROWS.judge(
        f"counts.{tag}",
        feature,
        ok,
        msg,
        expected=facts["manifest_total"],
        actual=n,
        evidence={
            "manifest_vs_file": [[e["file"], e["manifest"], e["release_transitions"]] for e in off[:20]]
        },
    )


def order_row(
    check_id: str, feature: str, key: str, eps: list[dict[str, Any]], how: str = "row for row vs the release"
) -> Check:
    bad = [e for e in eps if e.get(key) is not None]
    rows = sum(e["checked"] for e in eps)
    msg = f"{key}: {rows} rows identical {how}"
    if bad:
        e = bad[0]
        msg = f"{key}: {len(bad)} of {len(eps)} episodes differ {how}; first {e['file']} at its row {e[key]}"
    return ROWS.judge(
        check_id,
        feature,
        not bad,
        msg,
        evidence={"rows": rows, "episodes": len(eps), "differing": [[e["file"], e[key]] for e in bad[:20]]},
    )


def replay_rows(cfg: RenderCacheConfig, tag: str, feature: str, eps: list[dict[str, Any]]) -> list[Check]:
    """The release's observation reproduced after replaying qpos/qvel: continuous dims within obs_atol,
    the binary contact flag(s) reported separately as the fraction of rows that differ."""
    errs = [r for e in eps for r in e["obs_err"]]
    if not errs or any(len(r) != len(errs[0]) for r in errs) or (np.asarray(errs) < 0).any():
        return [
            ROWS.judge(
                f"observation.replay.{tag}",
                feature,
                False,
                "replayed observation has another shape than the release's",
            )
        ]
    arr = np.asarray(errs)
    flags = [d for d in cfg.contact_dims if d < arr.shape[1]]
    cont = np.delete(arr, flags, axis=1)
    worst = float(cont.max()) if cont.size else 0.0
    per_dim = arr.max(0)
    replay = ROWS.judge(
        f"observation.replay.{tag}",
        feature,
        worst <= cfg.obs_atol,
        f"{len(arr)} replayed rows: continuous dims max |diff| {worst:.3g} (tolerance {cfg.obs_atol})",
        expected=cfg.obs_atol,
        actual=worst,
        evidence={
            "rows": len(arr),
            "mean_abs": float(cont.mean()) if cont.size else 0.0,
            "per_dim_max": [float(x) for x in per_dim],
            "worst_dims": [int(x) for x in np.argsort(-per_dim)[:5]],
        },
    )
    frac = float((arr[:, flags] > 0.5).any(axis=1).mean()) if flags else 0.0
    contact = ROWS.judge(
        f"observation.contact.{tag}",
        feature,
        frac <= cfg.contact_max_fraction,
        f"binary flag dims {flags}: {frac:.1%} of replayed rows differ (a static mj_forward does not always "
        "reproduce a contact registered while stepping)",
        severity="soft",
        expected=cfg.contact_max_fraction,
        actual=frac,
        evidence={"dims": flags, "rows": len(arr)},
    )
    return [replay, contact]


def goal_row(tag: str, feature: str, eps: list[dict[str, Any]], cfg: RenderCacheConfig) -> Check:
    """Every row's goal frame == a render of its episode's terminal state, within the frames' tolerance
    (`tolerance.pixel`, `max_fraction`, `psnr_db`): renderer noise clears, another state blocks."""
    goals = [e["goal"] for e in eps]
    bad = [(e["file"], e["goal"]) for e in eps if not e["goal"].get("within", e["goal"]["exact"])]
    maxd = max((g["max_abs"] or 0 for g in goals), default=0)
    exact = sum(bool(g["exact"]) for g in goals)
    msg = (
        f"{len(goals) - len(bad)}/{len(goals)} episodes: goal frame == render of the terminal state "
        f"({exact} exact, the rest {_tolerance_band(cfg)})"
    )
    if bad:
        file, g = bad[0]
        m = g.get("reported") or {}
        psnr = "inf" if m.get("psnr_db") is None else f"{m['psnr_db']:.1f}"
        msg += (
            f"; first bad {file}: {g.get('rows_outside', '?')} goal row(s) outside the band, first its row "
            f"{g.get('first_outside')} (max diff {m.get('max_abs', g['max_abs'])}, "
            f"{m.get('frac_differ', 1.0):.1%} of values differ, PSNR {psnr} dB; same on every row: "
            f"{g['constant']})"
        )
    return ROWS.judge(
        f"goals.terminal.{tag}",
        feature,
        None if not goals else not bad,
        msg,
        evidence={
            **bound_fields(len(bad), len(goals), cfg.confidence),
            "max_abs_pixel_diff": maxd,
            "exact": exact,
            "tolerance": vars(cfg.tolerance).copy(),
            "outside": [[f, g.get("first_outside"), g.get("reported")] for f, g in bad[:20]],
        },
    )


def _tolerance_band(cfg: RenderCacheConfig) -> str:
    t = cfg.tolerance
    return f"within |diff| <= {t.pixel}, <= {t.max_fraction:.0%} of values, PSNR >= {t.psnr_db:g} dB"


def hires_order_row(
    cfg: RenderCacheConfig, check_id: str, feature: str, info: dict[str, Any], at: tuple[int, list]
) -> Check:
    """Same rows, actions, traj ids and goals as the base cache (metadata), and the same order judged
    from the pixels: each sampled frame, downsampled, looks most like the base cache's frame of its row."""
    size, content = at
    limit = next((h.content_max_mean for h in cfg.hires if h.size == size), 4.0)
    moved = out_of_order(content, limit)
    ok = info["rows_match"] and info["actions_identical"] and info["traj_ids_identical"]
    ok = ok and info.get("goals_identical") is not False and not moved
    msg = (
        f"{size}x{size} cache vs base cache: same rows {info['rows_match']}, "
        f"actions identical {info['actions_identical']}, traj ids identical {info['traj_ids_identical']}, "
        f"goal positions identical {info.get('goals_identical')}; content: "
    )
    if moved:
        m = moved[0]
        msg += (
            f"{len(moved)}/{len(content)} sampled frames, downsampled ({cfg.diagnosis.resize}), look like "
            f"another row of the base cache: first row {m['row']} is closest to row {m['closest']} "
            f"(mean |diff| {m['mean_abs_closest']} vs {m['mean_abs_same']} to its own row)"
        )
    else:
        msg += f"{len(content)} sampled frames, downsampled, closest to their own base row"
    evidence = {**info, "content_sampled": len(content), "content_out_of_order": moved[:20]}
    return ROWS.judge(check_id, feature, None if not content and ok else ok, msg, evidence=evidence)


def nested_row(nested: list[dict[str, Any]]) -> Check:
    bad = [n for n in nested if not n["is_prefix"]]
    msg = (
        "; ".join(
            f"budget {n['small']} is not a prefix of {n['large']} (first difference at line "
            f"{n['first_difference']})"
            for n in bad
        )
        or f"{len(nested)} budget pairs nested"
    )
    return ROWS.judge(
        "subsets.nested", "subsets", None if not nested else not bad, msg, evidence={"pairs": nested}
    )
