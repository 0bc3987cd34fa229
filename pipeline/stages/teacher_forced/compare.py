"""Model against baseline, on what both can be compared on: the same samples, the same chunk steps.

A 1-step model is compared with the first step of a 4-step one (the row says so). A model is called
worse only when the paired bootstrap interval of the per-sample difference lies above 0 and the
Wilcoxon signed-rank test agrees at the configured level; when they disagree the row says which and
why, and the verdict stays with the stricter reading. Fewer paired samples than `min_pairs` (reference
002's floor, 64) cannot clear a comparison. A model with NaN/inf outputs is not compared by its finite
samples alone (that would make the broken model look better): it is a finding of its own.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.teacher_forced import dims, metrics

ROWS = Rows("teacher_forced", "diagnostics")


def sig(value: Any, digits: int = 4) -> str:
    """A number as people read it in a row (full precision stays in the evidence)."""
    if value is None:
        return "n/a"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sig(v, digits) for v in value) + "]"
    return f"{float(value):.{digits}g}"


def common_steps(a: metrics.Scored, b: metrics.Scored) -> int:
    return min(a.l1_norm.shape[1], b.l1_norm.shape[1])


def per_sample(scored: metrics.Scored, steps: int) -> np.ndarray:
    """Mean normalized L1 over the first `steps` chunk steps; inf where the model's output is not finite."""
    part = scored.l1_norm[:, :steps].reshape(len(scored.l1_norm), -1)
    bad = ~np.isfinite(scored.pred[:, :steps].reshape(len(part), -1)).all(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a sample with no valid step stays NaN
        out = np.nanmean(part, axis=1) if part.size else np.zeros(len(part))
    return np.where(bad, np.inf, out)


def compare(
    tf: Any, runs: Mapping[str, Any], baseline: str, names: Sequence[str] = (), data: Any = None
) -> list[Check]:
    """Every model against the baseline; `data` is the scored action column's own mean and std."""
    if baseline not in runs:
        return []
    others = [(name, run) for name, run in runs.items() if name != baseline]
    return [_one(tf, name, run, baseline, runs[baseline], names, data) for name, run in others]


def _one(tf: Any, name: str, run: Any, baseline: str, base: Any, names: Sequence[str], data: Any) -> Check:
    steps = common_steps(run.scored, base.scored)
    h_run, h_base = run.scored.l1_norm.shape[1], base.scored.l1_norm.shape[1]
    where = f"on the same {{n}} samples, chunk step(s) 1-{steps}"
    if h_run != h_base:
        where += f" ({name} predicts {h_run}, {baseline} {h_base}: compared on the first {steps})"
    row_id, unverified = f"compare.{name}_vs_{baseline}", not (run.repeatable and base.repeatable)
    a, b = per_sample(run.scored, steps), per_sample(base.scored, steps)
    if not np.isfinite(a).all():
        k = int((~np.isfinite(a)).sum())
        message = f"{name} vs {baseline} {where.format(n=len(a))}: {k} sample(s) of NaN/inf output, worse"
        return ROWS(row_id, name, "mismatch", message, evidence={"nonfinite_samples": k, "steps": steps})
    if np.array_equal(run.scored.pred[:, :steps], base.scored.pred[:, :steps], equal_nan=True):
        message = f"{name} vs {baseline} {where.format(n=len(a))}: identical predictions"
        return ROWS(row_id, name, "match", message, severity="soft", evidence={"steps": steps})
    result = metrics.paired(a, b, tf.bootstrap_resamples, tf.confidence, tf.seed)
    row = _judged(tf, row_id, name, baseline, where.format(n=result["n"]), result, unverified, a, b)
    if row.verdict != "mismatch":
        return row
    return _which_dims(tf, row, run, base, steps, names, data)


def _which_dims(
    tf: Any, row: Check, run: Any, base: Any, steps: int, names: Sequence[str], data: Any
) -> Check:
    """A worse model's row says where its extra error sits and whether its normalizer differs."""
    found = dims.excess(run.scored.l1_norm[:, :steps], base.scored.l1_norm[:, :steps], names)
    stats = dims.normalizer(run.spec.path, base.spec.path, tf.action_key, data)
    words = dims.text(found, stats, names)
    evidence = {**row.evidence, "dims": found, "normalizer_dims": stats}
    return replace(row, message=f"{row.message}; {words}" if words else row.message, evidence=evidence)


def _judged(
    tf: Any,
    row_id: str,
    name: str,
    baseline: str,
    where: str,
    result: dict[str, Any],
    unverified: bool,
    a: np.ndarray,
    b: np.ndarray,
) -> Check:
    alpha = 1 - tf.confidence
    ci, p = result["ci"], result["p"]
    mean_a, mean_b = float(np.nanmean(a)), float(np.nanmean(b))
    ratio = mean_a / mean_b if mean_b > 0 else None
    above = bool(ci) and ci[0] > 0
    significant = p is not None and p < alpha
    worse = above and significant
    numbers = (
        f"mean diff {sig(result['mean_diff'])}, {int(tf.confidence * 100)}% CI {sig(ci)}, Wilcoxon p "
        f"{sig(p, 3)}, error ratio {sig(ratio)}"
    )
    if result["n"] < tf.min_pairs:
        ok, why = (
            None,
            f"only {result['n']} paired samples, fewer than min_pairs={tf.min_pairs}: cannot clear",
        )
    elif unverified:
        ok, why = None, "a model's outputs are not repeatable under a second seed"
    elif worse:
        far = ratio is not None and ratio > tf.baseline_ratio
        ok, why = (
            False,
            f"clearly worse (interval above 0 and p < {sig(alpha, 3)})"
            + (f", above {tf.baseline_ratio}x" if far else ""),
        )
    else:
        ok, why = True, _disagreement(above, significant, ci, p, alpha) or "not clearly worse"
    return ROWS.judge(
        row_id,
        name,
        ok,
        f"{name} vs {baseline} {where}: {numbers}; {why}",
        severity=tf.baseline_severity,
        expected=tf.baseline_ratio,
        actual=ratio,
        evidence={**result, "ratio": ratio, "min_pairs": tf.min_pairs, "worse": worse},
    )


def _disagreement(above: bool, significant: bool, ci: Any, p: Any, alpha: float) -> str:
    """Why the two tests part ways, in the words the row needs."""
    if above and not significant:
        return (
            f"the bootstrap interval lies above 0 but Wilcoxon p {sig(p, 3)} >= {sig(alpha, 3)}: the mean is "
            "pulled up by a few large errors while most samples do not differ; not clearly worse"
        )
    if significant and not above and ci and ci[1] > 0:
        return (
            f"Wilcoxon p {sig(p, 3)} < {sig(alpha, 3)} but the bootstrap interval {sig(ci)} includes 0: most "
            "samples shift while the mean does not move clearly; not clearly worse"
        )
    return ""
