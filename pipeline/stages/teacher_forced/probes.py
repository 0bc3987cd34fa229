"""Counterfactual probes: the model as a witness of the data's conventions.

A model trained on correctly stored data fits that data best as declared. Scored on the same samples
under the likely alternatives (alternatives.py: a camera BGR, the images x255 or /255, two cameras
exchanged; a vector input's dims exchanged, a sign flipped, degrees vs radians; the targets recorded in
other units or with a flipped sign), its paired per-sample error says which convention the data
follows. The search is greedy: the alternative that cuts the error most, clearly, is kept and applied,
and the others are tried again on top of it, until none helps or `probe_rounds` passes are spent. So
several faults are named in turn (demo=faulty: its swapped state dims dominate the error and hide the
camera faults until they are undone).

"Clearly" is strict because so many alternatives are tried (a hundred for a 7-dim state): the drop
must reach `probe_margin`, and the paired difference must clear a Bonferroni-adjusted level, alpha =
(1 - confidence) / m for the m alternatives tried in that pass: the bootstrap interval at 1 - alpha
lies below 0 and the Wilcoxon p is below alpha. A dim xpi/180 must also beat the same dim zeroed (its
control; alternatives.py says why) by the same margin, `probe_margin`: a near-constant model fits a dim
/57 barely better than the dim zeroed (a barely trained ACT: by 0.03 % of its error), which says
nothing about units. A dim x180/pi must beat itself with the dim's values handed to other samples by
that margin too: a 50-step ACT's outputs moved 10 % nearer the targets with one dim x57, whatever its
values said. An exchange or a sign flip must beat itself with the whole input handed to other samples:
the same 50-step ACT came 10 % nearer with two state dims exchanged and as near with every sample's
state another's, while demo=faulty's base gains 99.8 % from its exchange only with its own state.
A target alternative and its control differ in one action dim only, so they are
compared on that dim: summed with the dims both leave alone, a real degrees dim's lead over its control
is diluted below any margin (7 % of the whole error where it is 97 % of the dim's own). The control
gets the margin, not a second significance test: the step against the data as declared already passed
one, and a dim that moves in a few stretches only (demo=faulty's yaw rate, ~0 elsewhere) leaves most
paired differences at ~0, so a rank test cannot see its 37 % lead (Wilcoxon p 0.07).
A kept alternative is a hard row naming it; the camera
alternatives keep one row each (their paired difference against the data as declared); the vector and
target alternatives that were not kept are summed up in one row per model (counts, the best few with
their numbers). Fewer paired samples than `min_pairs` cannot decide (unverifiable).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.record.records import Check
from pipeline.stages.teacher_forced import alternatives, metrics, models
from pipeline.stages.teacher_forced.alternatives import Alternative, Batch
from pipeline.stages.teacher_forced.probe_rows import paired, paired_change, rows

Tried = dict[str, tuple[np.ndarray | None, np.ndarray]]  # part -> (predictions if re-run, per-sample error)


@dataclass
class Step:
    """A kept alternative: its paired difference against the state before it, in the pass it won."""

    alt: Alternative
    stats: dict[str, Any]


@dataclass
class Search:
    """What the greedy search did: every alternative's error on the data as declared, the kept steps."""

    options: list[Alternative]
    first: dict[str, np.ndarray]
    kept: list[Step] = field(default_factory=list)
    passes: int = 0
    capped_rounds: bool = False
    capped_alternatives: int = 0  # alternatives left out by probe_max_alternatives
    forwards: int = 0  # calls of the model's forward (grouped alternatives share one)
    seconds: float = 0.0


class Witness:
    """One model's forward passes and scores on the shared samples. On a GPU, a deterministic model
    gets several alternatives' samples in one batch (up to `batch_size` rows); on the CPU each
    alternative is its own forward, because there a larger batch costs more per sample (the demo
    policy on 2 cores: 14 ms per 96 samples alone, 21-24 ms per 96 in batches of 192; demo=faulty's
    probes took 9.2 s one alternative per forward and 19 s two per forward). A stochastic model's
    alternatives are each alone, under the same seed as its scored run."""

    def __init__(self, tf: Any, name: str, run: Any, shared: Any) -> None:
        self.tf, self.name, self.run, self.shared = tf, name, run, shared
        rows = len(shared.rows)
        gpu = models.device_for(tf.device).startswith("cuda")
        self.group = max(1, tf.batch_size // max(rows, 1)) if gpu and not run.spec.stochastic else 1
        self.forwards = 0

    def errors(self, pred: np.ndarray, truth: np.ndarray, dims: Sequence[int] = ()) -> np.ndarray:
        """Per-sample error over every action dim, or over `dims` only."""
        at = list(dims) or slice(None)
        return metrics.score(
            pred[..., at], truth[..., at], self.shared.valid, self.shared.scale[at]
        ).per_sample

    def predict(self, batch: Batch, makers: Sequence[Callable[[Batch], Batch]]) -> list[np.ndarray]:
        """Each alternative batch's predictions, `group` alternatives per call."""
        out: list[np.ndarray] = []
        n = len(self.shared.rows)
        for start in range(0, len(makers), self.group):
            parts = [make(batch) for make in makers[start : start + self.group]]
            joined = {k: _joined([p[k] for p in parts]) for k in parts[0]}
            seed = self.tf.estimator_seeds[0]
            pred = models.infer(self.run.loaded.predict, joined, self.tf.batch_size, seed, self.name)
            self.forwards += 1
            out += [pred[i * n : (i + 1) * n] for i in range(len(parts))]
        return out


def _joined(values: list[Any]) -> Any:
    if isinstance(values[0], list):
        return [v for value in values for v in value]
    return values[0] if len(values) == 1 else np.concatenate(values)


def probe_model(
    tf: Any,
    name: str,
    run: Any,
    batch: Batch,
    cameras: list[str],
    vectors: list[str],
    shared: Any,
    shifted: dict[str, dict[int, np.ndarray]] | None = None,
) -> list[Check]:
    """Every alternative against the data as declared, then the greedy search; the rows."""
    start = time.perf_counter()
    names = dict(shared.frames.names)
    renamed = shared.feeds.declared[name].source  # a renamed vector's dims named as the dataset names them
    names.update({key: names.get(data_key) for key, data_key in renamed.items()})
    options = alternatives.generate(
        cameras, vectors, batch, names, tf.action_key, int(shared.truth.shape[-1]), shifted or {}
    )
    capped = max(0, len(options) - tf.probe_max_alternatives)
    options = options[: tf.probe_max_alternatives]
    witness = Witness(tf, name, run, shared)
    found = search(tf, witness, options, batch, run.scored)
    found.capped_alternatives, found.forwards = capped, witness.forwards
    found.seconds = time.perf_counter() - start
    return rows(tf, name, run.scored.per_sample, found)


def _try(
    w: Witness,
    alts: Sequence[Alternative],
    state: tuple[Batch, np.ndarray, np.ndarray],
    cache: dict[str, np.ndarray],
) -> Tried:
    """Each alternative on top of the current (batch, targets, predictions): input ones re-run the
    model (unless the batch is unchanged since their last run: `cache`), target ones re-score."""
    batch, truth, pred = state
    ins = [a for a in alts if a.inputs is not None and a.part not in cache]
    preds = w.predict(batch, [a.inputs for a in ins if a.inputs is not None])
    cache.update({a.part: p for a, p in zip(ins, preds, strict=True)})
    out: Tried = {}
    for a in alts:
        if a.target is not None:
            out[a.part] = (None, w.errors(pred, a.target(truth)))
        else:
            out[a.part] = (cache[a.part], w.errors(cache[a.part], truth))
    return out


def _control(
    w: Witness, batch: Batch, truth: np.ndarray, pred: np.ndarray
) -> Callable[[Alternative, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """An alternative's and its control's per-sample errors on top of the current state, on the dims
    where they can differ (a forward pass for an input control; `errors`: the alternative's, all dims)."""

    def versus(alt: Alternative, errors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        control = alt.control
        if control is None:
            raise ValueError(f"{alt.part}: has no control")
        if control.inputs is not None:
            return errors, w.errors(w.predict(batch, [control.inputs])[0], truth)
        mine = w.errors(pred, alt.target(truth), alt.dims) if alt.target is not None else errors
        return mine, w.errors(pred, control.target(truth) if control.target else truth, alt.dims)

    return versus


def search(tf: Any, w: Witness, options: list[Alternative], batch: Batch, scored: Any) -> Search:
    """Greedy: try every remaining alternative on top of the kept ones, keep the best that clears the
    margin and the adjusted level, until none does or `probe_rounds` passes are spent. A kept target
    alternative changes no input: the next pass re-scores the predictions it already has."""
    truth, pred, base = w.shared.truth, scored.pred, scored.per_sample
    remaining, cache = list(options), {}
    found = Search(options, {})
    while remaining and found.passes < tf.probe_rounds:
        tried = _try(w, remaining, (batch, truth, pred), cache)
        if not found.first:
            found.first = {p: err for p, (_, err) in tried.items()}
        found.passes += 1
        step = best(tf, remaining, tried, base, _control(w, batch, truth, pred))
        if step is None:
            return found
        found.kept.append(step)
        remaining.remove(step.alt)
        again, base = tried[step.alt.part]
        if step.alt.inputs is not None and again is not None:
            batch, pred, cache = step.alt.inputs(batch), again, {}
        elif step.alt.target is not None:
            truth = step.alt.target(truth)
    found.capped_rounds = bool(remaining) and found.passes >= tf.probe_rounds
    return found


def best(
    tf: Any,
    remaining: Sequence[Alternative],
    tried: Tried,
    base: np.ndarray,
    control: Callable[[Alternative, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> Step | None:
    """The alternative with the largest drop among those that clear the margin and the Bonferroni-
    adjusted level and beat their control by that same margin (only candidates past the margin pay for
    the stricter bootstrap and the control, best first)."""
    m = len(remaining)
    drops = {a.part: paired_change(tried[a.part][1], base) for a in remaining}
    finite = int(np.isfinite(base).sum())
    candidates = [
        a
        for a in remaining
        if drops[a.part] is not None
        and -drops[a.part] >= tf.probe_margin
        and int(np.isfinite(tried[a.part][1]).sum()) >= finite  # NaN outputs never look better
    ]
    for alt in sorted(candidates, key=lambda a: drops[a.part]):
        stats = adjusted(tf, tried[alt.part][1], base, m)
        if not strict(tf, stats):
            continue
        if alt.control is not None:
            mine, theirs = control(alt, tried[alt.part][1])
            versus = paired_change(mine, theirs)
            stats["control"] = {
                "part": alt.control.part,
                "wording": alt.control.wording,
                "change": versus,
                "dims": list(alt.dims) or "all",
                "margin": tf.probe_margin,
            }
            if versus is None or -versus < tf.probe_margin:
                continue  # not better than the dim zeroed by the margin: no evidence of other units
        return Step(alt, stats)
    return None


def adjusted(tf: Any, other: np.ndarray, base: np.ndarray, m: int) -> dict[str, Any]:
    """The paired difference at the Bonferroni-adjusted level for m alternatives tried together (more
    bootstrap resamples, so the interval's far tail is not a handful of resamples)."""
    alpha = (1 - tf.confidence) / max(m, 1)
    resamples = max(tf.bootstrap_resamples, int(np.ceil(10 / alpha)))
    stats = paired(tf, other, base, confidence=1 - alpha, resamples=resamples)
    return {**stats, "alpha": alpha, "alternatives_tried": m, "adjusted_confidence": 1 - alpha}


def strict(tf: Any, st: dict[str, Any]) -> bool:
    """Enough pairs, the adjusted interval below 0, Wilcoxon p below alpha, a drop of the margin."""
    drop, ci, p = st["relative_change"], st["ci"], st["p"]
    return (
        st["n"] >= tf.min_pairs
        and ci is not None
        and ci[1] < 0
        and p is not None
        and p < st["alpha"]
        and drop is not None
        and -drop >= tf.probe_margin
    )
