"""The sampled re-render rows of one cache (base or high-resolution): re-render exactness under the
calibrated tolerance with the renderer strings of both sides and each mismatch diagnosed, row order, and
the pairing convention. Every sampled row carries n and its Clopper-Pearson bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.render_cache.config import RenderCacheConfig
from pipeline.stages.render_cache.stats import bound_fields, sample_size

ROWS = Rows("render_cache", "cache")


WORDS = {
    "noise": "renderer noise within the calibrated band",
    "bgr": "channels reversed (BGR)",
    "lighting": "a constant brightness/colour offset (lighting) of",
    "camera": "another camera of the scene:",
    "resized": "rendered at another size and resized, from",
    "shift": "another row of the episode, offset",
    "episode": "the same row of another episode:",
}


def explain(d: dict[str, Any]) -> str:
    """One diagnosis in words, with the numbers of its fit."""
    fit = d["fit"]
    psnr = "inf" if fit["psnr_db"] is None else f"{fit['psnr_db']:.1f}"
    numbers = f"max diff {fit['max_abs']}, {fit['frac_differ']:.1%} of values differ, PSNR {psnr} dB"
    if not d["fits"]:
        return f"unexplained (closest: {_words(d['closest'])}; {numbers})"
    return f"{_words(d['explanation'])} ({numbers})"


def _words(name: str) -> str:
    kind = name.split(":", 1)[0].split("[", 1)[0]
    rest = name[len(kind) :].lstrip(":")
    return f"{WORDS.get(kind, kind)} {rest}".strip()


def _tolerance_text(cfg: RenderCacheConfig, tol: list[dict[str, Any]]) -> str:
    t = cfg.tolerance
    band = f"|diff| <= {t.pixel}, <= {t.max_fraction:.0%} of values, PSNR >= {t.psnr_db:g} dB"
    if not tol:
        return f"0 within tolerance ({band})"
    worst = max(tol, key=lambda r: (r["max_abs"], r["frac_differ"]))
    return (
        f"{len(tol)} within tolerance ({band}; worst row {worst['row']}: max diff {worst['max_abs']}, "
        f"{worst['frac_differ']:.1%} of values, PSNR {worst['psnr_db']} dB)"
    )


def _rerender_message(cfg: RenderCacheConfig, got: list, diff: list, explained: int, sides: dict) -> str:
    n, tol = len(got), [r for r in got if r["class"] == "tolerance"]
    exact = sum(r["class"] == "exact" for r in got)
    who = f"renderer: check {sides.get('check')!r}, cache {sides.get('cache') or 'not recorded'!r}"
    if not diff:
        return (
            f"{n} sampled frames: {exact} exact, {_tolerance_text(cfg, tol)}, {explained} explained by the "
            f"rows below; {who}"
        )
    d = diff[0]
    # a sharded run diagnosed up to N per task: the first N in row order are the unsharded run's N
    told = [f"row {r['row']}: {explain(r['diagnosis'])}" for r in _diagnosed(cfg, diff)]
    return (
        f"{len(diff)}/{n} sampled frames match no render of their state within tolerance (row {d['row']}: "
        f"max diff {d['max_abs']}, mean {d['mean_abs']:.2f}); diagnosis: {'; '.join(told) or 'none run'}; "
        f"{who}"
    )


def _diagnosed(cfg: RenderCacheConfig, diff: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The diagnosed frames a row reports: the first `diagnosis.frames` mismatching ones in row order."""
    return [r for r in diff[: cfg.diagnosis.frames] if "diagnosis" in r]


def frame_rows(
    cfg: RenderCacheConfig,
    prefix: str,
    feature: str,
    got: list[dict[str, Any]],
    size: int,
    population: int | None = None,
    renderers: dict[str, Any] | None = None,
) -> list[Check]:
    """Cached frame == fresh render (within the calibrated tolerance) under the claimed pairing, on the
    seeded sample; each mismatch is explained as a shifted row, the other pairing convention, or, for a
    frame rendered differently, by its diagnosis (the first `diagnosis.frames` in row order)."""
    n = len(got)
    other = "live_step" if cfg.pairing == "state" else "state"
    diff, shift, alt = ([r for r in got if r["class"] == c] for c in ("different", "shift", other))
    got = sorted(got, key=lambda r: r["row"])
    diff = sorted(diff, key=lambda r: r["row"])
    sides = dict(renderers or {})
    stats_ = {
        "size": size,
        "max_abs_pixel_diff": max((r["max_abs"] for r in got), default=0),
        "mean_abs_pixel_diff": float(np.mean([r["mean_abs"] for r in got])) if got else 0.0,
        "tolerance": vars(cfg.tolerance).copy(),
        "within_tolerance": sum(r["class"] == "tolerance" for r in got),
        "renderer": sides,
        "diagnosis": [{"row": r["row"], **r["diagnosis"]} for r in _diagnosed(cfg, diff)],
    }
    msg = _rerender_message(cfg, got, diff, len(shift) + len(alt), sides)
    rerender = _sampled(
        cfg, f"{prefix}.rerender", feature, diff, (n, population), msg, {**stats_, "rows": _rows(diff)}
    )
    if shift:
        later = "later" if shift[0]["offset"] > 0 else "earlier"
        msg = (
            f"{len(shift)}/{n} sampled frames show the state one row {later} (first row {shift[0]['row']}): "
            "frames are shifted against actions/states"
        )
    else:
        msg = f"no sampled frame shows a neighbouring row's state ({n} sampled)"
    order = _sampled(
        cfg,
        f"{prefix}.order",
        feature,
        shift,
        (n, population),
        msg,
        {"rows": [[r["row"], r["offset"]] for r in shift[:20]]},
    )
    exact = n - len(diff) - len(shift) - len(alt)
    return [rerender, order, _pairing_row(cfg, prefix, feature, alt, (n, population), exact, other)]


def _pairing_row(
    cfg: RenderCacheConfig, prefix: str, feature: str, alt: list, drawn: tuple, exact: int, other: str
) -> Check:
    n = drawn[0]
    if alt:
        msg = (
            f"cache claims pairing {cfg.pairing!r} but {len(alt)}/{n} sampled frames follow {other!r}: a "
            "pairing convention (frame from env.step vs set_state render), not renderer nondeterminism"
        )
    else:
        msg = f"frames follow the claimed pairing {cfg.pairing!r} ({exact}/{n} exact)"
    extra = {"configured": cfg.pairing, "actual": other if alt else cfg.pairing}
    return _sampled(cfg, f"{prefix}.pairing", feature, alt, drawn, msg, {"rows": _rows(alt)}, **extra)


def _rows(found: list[dict[str, Any]]) -> list[int]:
    return [r["row"] for r in found[:20]]


def _sampled(
    cfg: RenderCacheConfig,
    check_id: str,
    feature: str,
    bad: list,
    drawn: tuple[int, int | None],
    msg: str,
    ev: dict,
    **fields: Any,
) -> Check:
    """A sampled row: n, mismatches and the Clopper-Pearson bound in its evidence. Mismatches are a
    mismatch; nothing sampled is unverifiable; 0 mismatches is `match` only when every row was checked
    or the bound lies below `max_mismatch_rate`, else `unverifiable`, saying how many samples settle it."""
    n, population = drawn
    bound = bound_fields(len(bad), n, cfg.confidence)
    exhaustive = population is not None and n >= population > 0
    ok: bool | None = None if n == 0 else not bad
    upper = bound["mismatch_rate_upper_bound"]
    if ok and not exhaustive and upper is not None and upper >= cfg.max_mismatch_rate:
        needed = sample_size(population or n + 1, None, cfg.max_mismatch_rate, cfg.confidence)
        ok, msg = (
            None,
            (
                f"{msg}; but 0 of {n} sampled bounds the mismatch rate only below {upper:.2%} at "
                f"{cfg.confidence:.0%}, not below max_mismatch_rate {cfg.max_mismatch_rate:.2%}: sample "
                f"{needed} frames (stages.render_cache.sample) to settle it"
            ),
        )
    evidence = {**ev, **bound, "population": population, "exhaustive": exhaustive}
    return ROWS.judge(check_id, feature, ok, msg, evidence=evidence, **fields)
