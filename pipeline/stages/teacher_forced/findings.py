"""Per-model findings: NaN/inf outputs, collapse, the error level, one subset far above the others,
and the association of the per-sample error with a reference measure.

Each decides its verdict and evidence, then makes one row call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.record.records import Check, Rows
from pipeline.stages.teacher_forced import metrics, repeatability
from pipeline.stages.teacher_forced.compare import sig

ROWS = Rows("teacher_forced", "diagnostics")


def findings(
    tf: Any, name: str, scored: metrics.Scored, truth: np.ndarray, summary: dict, labels: Sequence[str]
) -> list[Check]:
    bad = metrics.nonfinite(scored.pred)
    out = [
        ROWS.judge(
            f"finite.{name}",
            name,
            bad["samples"] == 0,
            f"{name}: {bad['samples']} sample(s) with NaN/inf actions",
            actual=bad["samples"],
            evidence=bad,
        )
    ]
    col = metrics.collapse(scored.pred, truth, tf.collapse_ratio)
    dims = [summary["dims"][d] for d in col["inactive_dims"]]
    message = (
        f"{name}: outputs barely vary across samples (collapsed or inactive model)"
        if col["collapsed"]
        else f"{name}: inactive dims {dims} (output spread < {tf.collapse_ratio} of the data's)"
        if col["inactive_dims"]
        else f"{name}: outputs vary with the observations"
    )
    out.append(
        ROWS.judge(
            f"collapse.{name}",
            name,
            not col["inactive_dims"],
            message,
            severity="hard" if col["collapsed"] else "soft",
            evidence=col,
        )
    )
    mean = summary["l1_norm_mean"]
    limit = "no limit set" if tf.max_l1 is None else f"limit {tf.max_l1}"
    finite = mean is not None and np.isfinite(mean)
    out.append(
        ROWS.judge(
            f"l1.{name}",
            name,
            None if mean is None else finite and (tf.max_l1 is None or mean <= tf.max_l1),
            f"{name}: mean L1 {sig(mean)} dataset std units ({limit}"
            + ("" if finite or mean is None else f"; {bad['samples']} sample(s) NaN/inf count as infinite")
            + f"); arm {sig(summary['arm_l1_norm'])}, gripper {sig(summary['gripper_l1_norm'])}",
            severity="hard" if tf.max_l1 is not None else "soft",
            expected=tf.max_l1,
            actual=mean,
            evidence={
                k: summary[k]
                for k in ("dims", "l1", "l1_norm", "mse", "l1_norm_by_step", "subsets", "inference_s")
            },
        )
    )
    out += subsets(tf, name, scored, labels)
    return out


def subsets(tf: Any, name: str, scored: metrics.Scored, labels: Sequence[str]) -> list[Check]:
    """One subset's error far above the others': the covariate-shift signature (reference 004)."""
    out: list[Check] = []
    gap = metrics.subset_gap(scored.per_sample, labels)
    if gap is not None:
        out.append(
            ROWS.judge(
                f"subsets.{name}",
                name,
                gap["ratio"] <= tf.subset_ratio,
                f"{name}: subset {gap['worst']} error {gap['ratio']:.2f}x the others'",
                severity=tf.subset_severity,
                expected=tf.subset_ratio,
                actual=gap["ratio"],
                evidence=gap,
            )
        )
    return out


def reference(tf: Any, name: str, score: np.ndarray, reference: np.ndarray) -> Check:
    """Per-sample error vs a reference measure: permutation control and leave-one-out."""
    ref = reference.reshape(len(reference), -1)[:, 0].astype(np.float64)
    keep = np.isfinite(score) & np.isfinite(ref)
    control = repeatability.permutation_control(score[keep], ref[keep], tf.permutations, tf.permutation_seed)
    loo = repeatability.leave_one_out(score[keep], ref[keep])
    holds = control["one_sided_p"] <= 1 - tf.confidence and loo["all_positive"]
    message = (
        f"{name}: error vs {tf.reference_column}: Spearman {control['spearman']:.3f}, "
        f"one-sided p {control['one_sided_p']:.4f}, leave-one-out all positive: {loo['all_positive']}"
    )
    return ROWS(
        f"reference.{name}",
        name,
        "match",
        message,
        severity="soft",
        actual={"association": bool(holds)},
        evidence={**control, "leave_one_out": loo},
    )
