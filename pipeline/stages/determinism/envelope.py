"""The loss envelope: this smoke run's loss curve against earlier clear runs of the same training config.

Bit-identical twins prove the run is repeatable, not that it trains as it used to: a new image, a
changed dataset export or a different checkpoint can give a perfectly deterministic curve that is
simply elsewhere. The history (`pipeline.record.history`) keeps each clear run's curve in its record (the
evidence of this row: per-step floats), so every later run of the same training config
(`envelope_match`: fingerprints that must be equal, default the training config) is compared with them.

The band, per step s, from the n earlier runs that logged s: mean ± half-width, with
half-width = max(k · sd · sqrt(1 + 1/n), envelope_rel_floor · |mean|, envelope_abs_floor).
`mean ± t · sd · sqrt(1 + 1/n)` is the prediction interval for one new draw from the distribution the
earlier runs came from (normal, unknown variance): it is the right question ("would this curve have
come from the same process?") and it widens on its own when few runs are known, which matters because
the history starts with two or three runs. k is Student's t quantile for `envelope_alpha` Bonferroni-
split over the steps compared (so a healthy curve of 64 steps is not flagged one time in two), unless
`envelope_k` fixes it. The floors keep a band from collapsing to a point when the earlier runs are
identical (same seed, same software: the usual case for a determinism gate), where any change at all
would otherwise be "outside". Fewer than `envelope_min_runs` (>= 2: one run has no spread) earlier
runs: a `match` row that says how many there are and stores this curve; it never blocks. A curve that
was outside its own envelope in a gate that still cleared (a soft finding) is a reference for later
runs: that run was accepted, and the band follows an accepted change instead of flagging it forever
(`envelope_severity: hard` keeps such a run from ever clearing).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.record import history, integrity
from pipeline.record.records import Check, Rows
from pipeline.stages.determinism import compare
from pipeline.stages.determinism.config import NAME, DeterminismConfig
from pipeline.storage import atomic_write_bytes

ROWS = Rows(NAME, "determinism")
CHECK = "envelope"
CHECK_ID = f"{NAME}.{CHECK}"
MAX_POINTS = 4096  # the curve kept in the record; a smoke run logs tens of steps


def curve_of(stream: compare.Stream | None) -> dict[int, float]:
    """Step -> loss (finite values only) from a metrics stream, read bit-exactly."""
    curve: dict[int, float] = {}
    for step in (stream.steps if stream is not None else [])[:MAX_POINTS]:
        text = compare.exact_text(stream.rows[step], "loss") if stream is not None else None
        value = compare.from_text(text) if text is not None else math.nan
        if math.isfinite(value):
            curve[step] = value
    return curve


def stored_curve(result: Any) -> dict[int, float]:
    """The curve an earlier determinism result kept in its envelope row ({} when it has none)."""
    for check in result.checks:
        if check.id == CHECK_ID:
            data = check.evidence.get("curve") or {}
            try:
                pairs = zip(data["steps"], data["loss"], strict=True)
                return {int(s): float(v) for s, v in pairs if math.isfinite(float(v))}
            except (KeyError, TypeError, ValueError):
                return {}
    return {}


def band(config: DeterminismConfig, earlier: list[dict[int, float]], steps: list[int]) -> dict[str, Any]:
    """Per-step mean, half-width and the number of runs, for the steps at least min_runs runs logged."""
    from scipy import stats  # ~0.8 s to import: here, not when every launch loads the stage

    rows: dict[str, list[float]] = {"step": [], "mean": [], "half": [], "n": []}
    usable = [s for s in steps if sum(s in c for c in earlier) >= config.envelope_min_runs]
    alpha = config.envelope_alpha / max(len(usable), 1)
    for step in usable:
        values = np.array([c[step] for c in earlier if step in c], dtype=float)
        n = len(values)
        k = config.envelope_k if config.envelope_k is not None else float(stats.t.ppf(1 - alpha / 2, n - 1))
        mean, sd = float(values.mean()), float(values.std(ddof=1))
        half = max(k * sd * math.sqrt(1 + 1 / n), config.envelope_rel_floor * abs(mean))
        for key, value in zip(rows, (step, mean, max(half, config.envelope_abs_floor), n), strict=True):
            rows[key].append(float(value))
    return rows


def envelope_check(
    cfg: Any,
    config: DeterminismConfig,
    stream: compare.Stream | None,
    fingerprints: dict[str, str],
    out: Path,
) -> tuple[Check | None, dict[str, str]]:
    """The envelope row (None when the run logged no loss) and its plot, if it was compared."""
    if not config.envelope_enabled:
        return None, {}
    curve = curve_of(stream)
    if not curve:
        return None, {}
    keys = tuple(config.envelope_match)
    audit = cfg.get("audit_dir")
    key = integrity.load_key((cfg.get("audit") or {}).get("key_file"))  # only verified twins count
    run = str(cfg.get("run_id"))
    found = history.same_inputs(audit, NAME, fingerprints, keys, run, key) if audit else []
    runs = [(e.run_id, c) for e in found[: config.envelope_max_runs] if (c := stored_curve(e.result))]
    steps = sorted(curve)
    kept = {"curve": {"steps": steps, "loss": [curve[s] for s in steps]}, "match": list(keys)}
    need = config.envelope_min_runs
    got = band(config, [c for _, c in runs], steps) if len(runs) >= need else {"step": []}
    if not got["step"]:
        what = f"{len(runs)} earlier run(s) of this training config with a loss curve, need {need}"
        message = f"loss envelope: {what}; this run's curve ({len(steps)} steps) is kept for later runs"
        evidence = {**kept, "earlier_runs": [r for r, _ in runs]}
        numbers = {"expected": f">= {need} earlier clear runs", "actual": f"{len(runs)} earlier run(s)"}
        return ROWS(CHECK, "loss", "match", message, severity="soft", evidence=evidence, **numbers), {}
    outside = [
        {"step": int(s), "loss": curve[int(s)], "low": m - h, "high": m + h}
        for s, m, h in zip(got["step"], got["mean"], got["half"], strict=True)
        if abs(curve[int(s)] - m) > h
    ]
    path = plot(out / "loss_envelope.png", runs, got, curve, outside)
    evidence = {**kept, "earlier_runs": [r for r, _ in runs], "outside": outside, "band": got}
    words = f"{len(got['step'])} step(s) against {len(runs)} earlier clear run(s) of this training config"
    numbers = {
        "expected": f"inside the band of {len(runs)} earlier runs at {len(got['step'])} steps",
        "actual": f"{len(outside)} step(s) outside",
    }
    if outside:
        first = outside[0]
        message = (
            f"loss outside the envelope at {len(outside)} of {words}; first at step {first['step']}: "
            f"{first['loss']:.6g} not in [{first['low']:.6g}, {first['high']:.6g}]"
        )
        severity = config.envelope_severity
        row = ROWS(CHECK, "loss", "mismatch", message, severity=severity, evidence=evidence, **numbers)
    else:
        message = f"loss inside the envelope at {words}"
        row = ROWS(CHECK, "loss", "match", message, evidence=evidence, **numbers)
    return row, {"loss_envelope": str(path)}


def plot(
    path: Path,
    runs: list[tuple[str, dict[int, float]]],
    got: dict[str, Any],
    curve: dict[int, float],
    outside: list[dict[str, Any]],
) -> Path:
    """Earlier runs (thin grey), their band, this run, and the steps outside (red), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        for index, (_run, earlier) in enumerate(runs):
            xs = sorted(earlier)
            label = f"earlier runs ({len(runs)})" if index == 0 else None
            ax.plot(xs, [earlier[x] for x in xs], color="0.7", linewidth=0.8, label=label)
        mean, half = np.array(got["mean"]), np.array(got["half"])
        ax.fill_between(got["step"], mean - half, mean + half, color="tab:blue", alpha=0.2, label="envelope")
        xs = sorted(curve)
        ax.plot(xs, [curve[x] for x in xs], color="tab:blue", marker=".", label="this run")
        if outside:
            ax.scatter([o["step"] for o in outside], [o["loss"] for o in outside], color="red", zorder=3,
                       label=f"outside ({len(outside)})")  # fmt: skip
        ax.set_title("determinism: smoke-run loss vs earlier clear runs")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(loc="best")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
