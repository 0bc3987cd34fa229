"""Counterfactual probes: the model as a witness of the data's conventions.

A model trained on correctly stored data fits that data best as declared. Scored on the same samples
under the likely alternatives (one camera's channels reversed, i.e. BGR; every camera x255 or /255;
two cameras exchanged), its paired per-sample error says which convention the data follows. An
alternative whose error is clearly lower (the bootstrap interval of alternative-minus-declared lies
below 0 and the relative drop reaches `probe_margin`) is a hard row naming it: the data as declared is
not what the model was trained on. Alternatives are applied greedily (best first, the rest tried again
on top of it), so two faults (an exchange and a BGR camera) are both named, while an alternative that
helped only by undoing part of another is a match row saying so. Every alternative's paired difference
against the data as declared is in its row; fewer paired samples than `min_pairs` cannot decide
(unverifiable).

Vector alternatives (the contract stage's suspected permutation / sign / unit) are not probed here:
this stage runs beside the contract stage, not after it, and receives none of its findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import combinations
from typing import Any

import numpy as np

from pipeline.records import Check, Rows
from pipeline.stages.teacher_forced import metrics, models
from pipeline.stages.teacher_forced.compare import sig

ROWS = Rows("teacher_forced", "diagnostics")
Alternative = tuple[str, str, Callable[[dict[str, Any]], dict[str, Any]]]  # id part, wording, transform


def _channels_reversed(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda b: {**b, key: np.ascontiguousarray(np.flip(b[key], axis=-3))}


def _scaled(keys: list[str], factor: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda b: {**b, **{k: (b[k] * np.float32(factor)).astype(np.float32) for k in keys}}


def _exchanged(a: str, b: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda batch: {**batch, a: batch[b], b: batch[a]}


def alternatives(cameras: list[str], batch: Mapping[str, Any]) -> Iterator[Alternative]:
    """Every alternative reading of the model's cameras (pairs of unequal shape cannot be exchanged)."""
    for key in cameras:
        yield f"bgr:{key}", f"{key}'s channels reversed (BGR)", _channels_reversed(key)
    if cameras:
        yield "scaled:x255", "the images x255 (0-255 instead of 0-1)", _scaled(cameras, 255.0)
        yield "scaled:div255", "the images /255", _scaled(cameras, 1 / 255.0)
    for a, b in combinations(cameras, 2):
        if np.shape(batch[a]) == np.shape(batch[b]):
            yield f"exchanged:{a}|{b}", f"{a} and {b} exchanged", _exchanged(a, b)


def probe_model(
    tf: Any, name: str, run: Any, batch: dict[str, Any], cameras: list[str], shared: Any
) -> list[Check]:
    """Every alternative against the data as declared, then a greedy search: the best clearly-better
    alternative is applied, and the others are tried again on top of it, until none helps. Only the
    alternatives that search keeps are hard rows; one that helped only because of a kept one (e.g. a
    BGR reading that undoes part of an exchange) is named as explained by it."""

    def errors(b: dict[str, Any]) -> np.ndarray:
        pred = models.infer(run.loaded.predict, b, tf.batch_size, tf.estimator_seeds[0], name)
        return metrics.score(pred, shared.truth, shared.valid, shared.scale).per_sample

    options = {part: (wording, fn) for part, wording, fn in alternatives(cameras, batch)}
    declared = run.scored.per_sample
    tried = {part: errors(fn(batch)) for part, (_, fn) in options.items()}
    first = {part: paired(tf, err, declared) for part, err in tried.items()}
    kept: list[tuple[str, dict[str, Any]]] = []
    current, base, remaining = batch, declared, dict(options)
    stats = first
    while remaining:
        fits = [p for p in remaining if clearly_better(tf, stats[p])]
        if not fits:
            break
        best = min(fits, key=lambda p: stats[p]["relative_change"])
        kept.append((best, stats[best]))
        current, base = remaining.pop(best)[1](current), tried[best]
        tried = {p: errors(fn(current)) for p, (_, fn) in remaining.items()}
        stats = {p: paired(tf, err, base) for p, err in tried.items()}
    return [_row(tf, name, part, options, first[part], kept) for part in options]


def paired(tf: Any, other: np.ndarray, declared: np.ndarray) -> dict[str, Any]:
    """Alternative minus declared per sample: bootstrap CI, Wilcoxon p, both means, relative change."""
    keep = np.isfinite(other) & np.isfinite(declared)
    result = metrics.paired(other, declared, tf.bootstrap_resamples, tf.confidence, tf.seed)
    base = float(declared[keep].mean()) if keep.any() else None
    alt = float(other[keep].mean()) if keep.any() else None
    change = (alt - base) / base if base and alt is not None else None
    nonfinite = int((~np.isfinite(other)).sum())
    return {
        **result,
        "declared_mean": base,
        "alternative_mean": alt,
        "relative_change": change,
        "nonfinite_samples": nonfinite,
    }


def clearly_better(tf: Any, st: Mapping[str, Any]) -> bool:
    """Enough pairs, the interval of the difference below 0, and a drop of at least the margin."""
    change, ci = st["relative_change"], st["ci"]
    return (
        st["n"] >= tf.min_pairs
        and ci is not None
        and ci[1] < 0
        and change is not None
        and (-change >= tf.probe_margin)
    )


def _row(
    tf: Any,
    name: str,
    part: str,
    options: Mapping[str, tuple[str, Any]],
    st: dict[str, Any],
    kept: list[tuple[str, dict[str, Any]]],
) -> Check:
    """One alternative's row: its paired difference against the data as declared, and its verdict."""
    wording = options[part][0]
    change, n = st["relative_change"], st["n"]
    evidence = {**st, "margin": tf.probe_margin, "kept": [p for p, _ in kept]}
    row_id, feature = f"probe.{name}.{part}", part.partition(":")[2]
    numbers = (
        f"mean L1 {sig(st['declared_mean'])} as declared, {sig(st['alternative_mean'])} with {wording} on "
        f"{n} paired samples (change {sig(None if change is None else 100 * change, 3)} %, "
        f"{int(tf.confidence * 100)}% CI of the difference {sig(st['ci'])}, Wilcoxon p {sig(st['p'], 3)})"
    )
    order = [p for p, _ in kept]
    if n < tf.min_pairs:
        why = f"only {n} paired samples, fewer than min_pairs={tf.min_pairs}: cannot decide"
        return ROWS.judge(
            row_id, feature, None, f"{name}: {numbers}; {why}", actual=change, evidence=evidence
        )
    if part in order:
        evidence["step_change"] = kept[order.index(part)][1]["relative_change"]
        alone = "" if order.index(part) == 0 else "alone against the data as declared: "
        message = _kept_message(name, part, options, kept, change) + f"; {alone}{numbers}"
        message += "; the data as declared is not what this model was trained on"
        return ROWS(
            row_id, feature, "mismatch", message, expected=tf.probe_margin, actual=change, evidence=evidence
        )
    if st["ci"] is None:
        message = f"{name}: identical errors with {wording} (the model does not read what it changes)"
        return ROWS(row_id, feature, "match", message, severity="soft", actual=change, evidence=evidence)
    explained = clearly_better(tf, st)
    why = (
        f"it fits better only through {' and '.join(options[p][0] for p in order)}, which explain it"
        if explained
        else f"the data as declared is not clearly beaten (margin {sig(100 * tf.probe_margin, 3)} %)"
    )
    message = f"{name}: {numbers}; {why}"
    return ROWS(row_id, feature, "match", message, expected=tf.probe_margin, actual=change, evidence=evidence)


def _kept_message(
    name: str, part: str, options: Mapping[str, tuple[str, Any]], kept: list, change: float
) -> str:
    """What a kept alternative does: alone (the first kept), or on top of the ones kept before it."""
    order = [p for p, _ in kept]
    at, wording = order.index(part), options[part][0]
    step = kept[at][1]["relative_change"]
    if at == 0:
        return f"{name}: the model's error drops {sig(-100 * change, 3)} % with {wording}"
    before = " and ".join(options[p][0] for p in order[:at])
    return f"{name}: with {before}, the model's error drops a further {sig(-100 * step, 3)} % with {wording}"
