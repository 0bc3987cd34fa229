"""The counterfactual probes' rows (probes.py searches, this module says what it found).

Each camera alternative has its own row (its paired difference against the data as declared); each
kept alternative is a hard row naming it with the error drop; the vector and target alternatives not
kept (about a hundred for a 7-dim state) are one row per model, `probe.<model>.vectors`: counts, the
best few with their numbers, and whether a cap cut the search short.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.teacher_forced import metrics
from pipeline.stages.teacher_forced.compare import sig

ROWS = Rows("teacher_forced", "diagnostics")
SHOWN = 5  # the best non-kept vector/target alternatives named in the summary row


def paired(
    tf: Any, other: np.ndarray, declared: np.ndarray, confidence: float | None = None, resamples: int = 0
) -> dict[str, Any]:
    """Alternative minus declared per sample: bootstrap CI, Wilcoxon p, both means, relative change."""
    keep = np.isfinite(other) & np.isfinite(declared)
    level = tf.confidence if confidence is None else confidence
    result = metrics.paired(other, declared, resamples or tf.bootstrap_resamples, level, tf.seed)
    base = float(declared[keep].mean()) if keep.any() else None
    alt = float(other[keep].mean()) if keep.any() else None
    return {
        **result,
        "confidence": level,
        "declared_mean": base,
        "alternative_mean": alt,
        "relative_change": (alt - base) / base if base and alt is not None else None,
        "nonfinite_samples": int((~np.isfinite(other)).sum()),
    }


def rows(tf: Any, name: str, declared: np.ndarray, found: Any) -> list[Check]:
    """Camera and kept alternatives one row each, the other vector/target ones in one row."""
    order = [s.alt.part for s in found.kept]
    out = [
        _row(tf, name, alt, paired(tf, found.first[alt.part], declared), found)
        for alt in found.options
        if alt.kind == "camera" or alt.part in order
    ]
    rest = [a for a in found.options if a.kind != "camera" and a.part not in order]
    if rest or found.capped_alternatives:
        out.append(summary(tf, name, rest, declared, found))
    return out


def _numbers(tf: Any, wording: str, st: dict[str, Any]) -> str:
    change = st["relative_change"]
    return (
        f"mean L1 {sig(st['declared_mean'])} as declared, {sig(st['alternative_mean'])} with {wording} on "
        f"{st['n']} paired samples (change {sig(None if change is None else 100 * change, 3)} %, "
        f"{sig(100 * st['confidence'], 4)}% CI of the difference {sig(st['ci'])}, "
        f"Wilcoxon p {sig(st['p'], 3)})"
    )


def _level(tf: Any, step: dict[str, Any]) -> str:
    """Why a kept alternative is clear although so many were tried (Bonferroni), and what it beat."""
    said = (
        f"a drop of at least {sig(100 * tf.probe_margin, 3)} % and, Bonferroni-adjusted over "
        f"{step['alternatives_tried']} alternatives tried, the {sig(100 * step['adjusted_confidence'], 4)}% "
        f"CI of the step's difference {sig(step['ci'])} below 0 and Wilcoxon p {sig(step['p'], 3)} "
        f"< {sig(step['alpha'], 3)}"
    )
    control = step.get("control")
    if control:
        on = "" if control.get("dims", "all") == "all" else " (on that dim's error, where they differ)"
        said += f"; {sig(-100 * control['change'], 3)} % below its control, {control['wording']}{on}"
    return said


def _row(tf: Any, name: str, alt: Any, st: dict[str, Any], found: Any) -> Check:
    """One alternative's row: its paired difference against the data as declared, and its verdict."""
    change, n = st["relative_change"], st["n"]
    order = [s.alt.part for s in found.kept]
    evidence = {**st, "margin": tf.probe_margin, "kept": order}
    row_id, feature = f"probe.{name}.{alt.part}", alt.part.partition(":")[2]
    numbers = _numbers(tf, alt.wording, st)
    if n < tf.min_pairs:
        why = f"only {n} paired samples, fewer than min_pairs={tf.min_pairs}: cannot decide"
        return ROWS.judge(
            row_id, feature, None, f"{name}: {numbers}; {why}", actual=change, evidence=evidence
        )
    if alt.part in order:
        at = order.index(alt.part)
        step = found.kept[at].stats
        evidence.update(step=step, step_change=step["relative_change"])
        alone = "" if at == 0 else "alone against the data as declared: "
        message = f"{_kept_message(name, found, at, change)} ({_level(tf, step)}); {alone}{numbers}"
        message += "; the data as declared is not what this model was trained on"
        return ROWS(
            row_id, feature, "mismatch", message, expected=tf.probe_margin, actual=change, evidence=evidence
        )
    if st["ci"] is None:
        message = f"{name}: identical errors with {alt.wording} (the model does not read what it changes)"
        return ROWS(row_id, feature, "match", message, severity="soft", actual=change, evidence=evidence)
    better = st["ci"][1] < 0 and change is not None and -change >= tf.probe_margin
    why = (
        f"it fits better only through {' and '.join(s.alt.wording for s in found.kept)}, which explain it"
        if better and order
        else "not clearly better at the Bonferroni-adjusted level"
        if better
        else f"the data as declared is not clearly beaten (margin {sig(100 * tf.probe_margin, 3)} %)"
    )
    message = f"{name}: {numbers}; {why}"
    return ROWS(row_id, feature, "match", message, expected=tf.probe_margin, actual=change, evidence=evidence)


def _kept_message(name: str, found: Any, at: int, change: float) -> str:
    """What a kept alternative does: alone (the first kept), or on top of the ones kept before it."""
    wording, step = found.kept[at].alt.wording, found.kept[at].stats["relative_change"]
    if at == 0:
        return f"{name}: the model's error drops {sig(-100 * change, 3)} % with {wording}"
    before = " and ".join(s.alt.wording for s in found.kept[:at])
    return f"{name}: with {before}, the model's error drops a further {sig(-100 * step, 3)} % with {wording}"


def summary(tf: Any, name: str, rest: list[Any], declared: np.ndarray, found: Any) -> Check:
    """`probe.<model>.vectors`: the vector and target alternatives not kept, counted, the best few named."""
    first = {a.part: paired_change(found.first[a.part], declared) for a in rest}
    same = [a for a in rest if np.array_equal(found.first[a.part], declared, equal_nan=True)]
    ranked = sorted((a for a in rest if first[a.part] is not None), key=lambda a: first[a.part])
    lower = [a for a in ranked if first[a.part] < 0 and a not in same]
    cut = [a for a in lower if -first[a.part] >= tf.probe_margin]
    shown = [
        {"part": a.part, "wording": a.wording, **paired(tf, found.first[a.part], declared)}
        for a in ranked[:SHOWN]
    ]
    n = int((np.isfinite(declared)).sum())
    counts = {
        "not_kept": len(rest),
        "raise_error": len(ranked) - len(lower) - len(same),
        "no_effect": len(same),
        "lower_error": len(lower),
        "cut_by_margin": len(cut),
    }
    tried = len(found.options)
    message = (
        f"{name}: {len(rest)} vector/target/view/time alternative(s) not kept, of {tried} tried in "
        f"{found.passes} greedy pass(es) ({found.forwards} forward call(s), {sig(found.seconds, 3)} s): "
        f"{counts['raise_error']} raise the error, {counts['no_effect']} change nothing, "
        f"{counts['lower_error']} lower it ({counts['cut_by_margin']} by the "
        f"{sig(100 * tf.probe_margin, 3)} % margin on the data as declared, none clearly better at the "
        f"Bonferroni-adjusted level{' on top of the kept ones' if found.kept else ''})"
    )
    if shown:
        best = "; ".join(f"{s['wording']} {sig(100 * (s['relative_change'] or 0), 3)} %" for s in shown[:3])
        message += f"; best: {best}"
    message += _capped(tf, found)
    evidence = {
        **counts,
        "best": shown,
        "passes": found.passes,
        "forwards": found.forwards,
        "seconds": found.seconds,
        "kept": [s.alt.part for s in found.kept],
        "capped_alternatives": found.capped_alternatives,
        "capped_rounds": found.capped_rounds,
        "probe_rounds": tf.probe_rounds,
        "probe_max_alternatives": tf.probe_max_alternatives,
        "margin": tf.probe_margin,
        "confidence": tf.confidence,
        "rule": "drop >= margin, CI at 1 - (1 - confidence)/m below 0, Wilcoxon p < (1 - confidence)/m",
    }
    ok = None if n < tf.min_pairs else True
    if ok is None:
        message += f"; only {n} paired samples, fewer than min_pairs={tf.min_pairs}: cannot decide"
    return ROWS.judge(f"probe.{name}.vectors", "vectors", ok, message, actual=len(rest), evidence=evidence)


def paired_change(other: np.ndarray, base: np.ndarray) -> float | None:
    """Relative change of the mean error over the samples finite under both (None: no base)."""
    keep = np.isfinite(other) & np.isfinite(base)
    if not keep.any():
        return None
    mean = float(base[keep].mean())
    return (float(other[keep].mean()) - mean) / mean if mean > 0 else None


def _capped(tf: Any, found: Any) -> str:
    """Say when a cap cut the search short."""
    said = ""
    if found.capped_alternatives:
        said += (
            f"; capped: {found.capped_alternatives} alternative(s) beyond probe_max_alternatives="
            f"{tf.probe_max_alternatives} not tried"
        )
    if found.capped_rounds:
        said += f"; capped: the search stopped at probe_rounds={tf.probe_rounds} passes, more may fit better"
    return said


def renamed_cameras(name: str, declared: Any, found: list[Check], probed: bool) -> Check | None:
    """`rename_map.<model>`: whether anything told apart the cameras the rename map feeds. The contract
    stage sees a camera's stats, alike for every camera where they are ImageNet's, so only the exchange
    probe can say that the map feeds each policy camera the dataset camera it was trained on: an
    exchange that clearly raises the error says so; one that is kept says the map crossed them; one
    within the noise (or no probe) leaves it unknown, which the record says rather than clearing
    silently: a soft finding, not `unverifiable`, because the right map and the crossed one give a
    model that cannot tell its cameras apart the same evidence, and a right map must not block."""
    renamed = [c for c in declared.cameras if c in declared.source]
    if not renamed or len(declared.cameras) < 2:
        return None
    fed = ", ".join(f"{c} <- {declared.source[c]}" for c in renamed)
    pairs = [r for r in found if r.id.startswith(f"teacher_forced.probe.{name}.exchanged:")]
    pairs = [r for r in pairs if any(c in r.id.partition(":")[2].split("|") for c in renamed)]
    evidence = {"fed": {c: declared.source[c] for c in renamed}, "probes": [r.id for r in pairs]}
    row_id, feature = f"rename_map.{name}", "rename_map"
    crossed = [r for r in pairs if r.verdict == "mismatch"]
    if crossed:
        message = (
            f"{name}: the rename map ({fed}) feeds cameras crossed: the exchange probe keeps "
            f"{crossed[0].feature.replace('|', ' <-> ')}; swap the map's policy keys"
        )
        return ROWS(row_id, feature, "mismatch", message, severity="soft", evidence=evidence)
    told = [r for r in pairs if (r.evidence.get("ci") or [0, 0])[0] > 0]
    if pairs and len(told) == len(pairs):
        said = "; ".join(f"{r.feature} +{sig(100 * (r.actual or 0), 3)} %" for r in told)
        message = (
            f"{name}: the model tells the renamed cameras apart ({fed}): exchanged, its error rises ({said})"
        )
        return ROWS(row_id, feature, "match", message, severity="soft", evidence=evidence)
    why = (
        "the exchange probe did not run for this model"
        if not probed or not pairs
        else "with them exchanged its error does not clearly rise ("
        + "; ".join(
            f"{r.feature} {sig(100 * (r.actual or 0), 3)} %, CI {sig(r.evidence.get('ci'))}" for r in pairs
        )
        + ")"
    )
    message = (
        f"{name}: no stage could tell whether the rename map ({fed}) feeds each policy camera the dataset "
        f"camera it was trained on: {why}, and stats cannot tell cameras apart where they are alike "
        "(ImageNet's, lerobot's default for every camera); a crossed map would look the same"
    )
    return ROWS(row_id, feature, "mismatch", message, severity="soft", evidence=evidence)
