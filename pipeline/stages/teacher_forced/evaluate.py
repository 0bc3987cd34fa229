"""The stage's sequence: provenance, samples, inference, findings, comparisons, pictures.

Each step decides verdicts and evidence, then makes one row call. A model whose checkpoint does not
match its pin is not evaluated (a wrong checkpoint's numbers would mislead); a sample manifest that no
longer matches the data stops the comparison (the pairing is no longer provable).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError, brief
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check, Rows, StageResult
from pipeline.stages import StageContext
from pipeline.stages.teacher_forced import (
    compare,
    findings,
    inputs,
    metrics,
    models,
    probe_rows,
    probes,
    provenance,
    repeatability,
    report,
    sample_index,
    samples,
)
from pipeline.storage import atomic_write_json

ROWS = Rows("teacher_forced", "diagnostics")
PROBE = 16  # samples re-run under a second seed to show that a model declared deterministic is


@dataclass
class Run:
    """What one model produced on the shared samples."""

    loaded: models.Loaded
    spec: Any
    scored: metrics.Scored
    summary: dict[str, Any]
    repeatable: bool | None = True


@dataclass
class Shared:
    """What every model is scored against: the same rows, targets, units and labels."""

    frames: samples.Frames
    rows: np.ndarray
    labels: list[str]
    truth: np.ndarray
    valid: np.ndarray
    scale: np.ndarray
    names: list[str]
    gripper: list[int]
    feeds: inputs.Feeds


def evaluate(
    tf: Any,
    specs: Sequence[Any],
    baseline: str,
    groups: Mapping[str, list[int]],
    dataset: Path,
    ctx: StageContext,
    source: Mapping[str, str] | None = None,
) -> StageResult:
    """Provenance, then the shared samples, then every model on them, then comparisons and pictures.
    `source`: policy key -> dataset key under the training's rename map (inputs.py)."""
    checks: list[Check] = []
    loaded = []
    device = models.device_for(tf.device)
    models.fit_threads(device, ctx.cpus)
    for spec in specs:
        try:  # one model's bad file or failing loader is its own row; the others still report
            row, ok = _provenance(spec, tf.require_provenance)
            checks.append(row)
            if ok is not False:
                key = f"stages.teacher_forced.models[{spec.name}]"
                loaded.append(
                    (spec, models.load(spec.name, spec.path, spec.loader, device, spec.inputs, key))
                )
        except Exception as exc:  # noqa: BLE001 - recorded as the model's error row
            checks.append(model_error(spec, exc, "loading"))
    declared = {spec.name: inputs.declare(model.obj, model.inputs, source) for spec, model in loaded}
    loaded, unfed = inputs.feedable(loaded, declared, dataset)
    checks += unfed
    extra = {c for c in (tf.subset_column, tf.reference_column) if c}
    if any(declared[spec.name].language for spec, _ in loaded):
        extra.add(inputs.TASK_INDEX)
    vectors = {declared[s.name].data_key(k) for s, _ in loaded for k in declared[s.name].vectors}
    keys = sorted(vectors | {tf.action_key} | extra)
    frames, rows, labels, sample_rows = _samples(tf, dataset, keys, groups, ctx.artifacts_dir)
    checks += sample_rows
    artifacts = {"samples": str(ctx.artifacts_dir / "samples.json")}
    if any(c.blocking for c in sample_rows) or not loaded:
        return _result(checks, artifacts)
    shared = prepare(tf, frames, rows, labels, {s.name: declared[s.name] for s, _ in loaded})
    loaded, undecoded = inputs.decoded(loaded, shared.feeds)
    checks += undecoded + inputs.images_row(shared.feeds)
    runs: dict[str, Run] = {}
    for spec, model in loaded:
        try:
            found, runs[spec.name] = score_model(tf, spec, model, shared)
        except Exception as exc:  # noqa: BLE001 - e.g. a wrong action width: this model's row
            checks.append(model_error(spec, exc, "scoring"))
            continue
        checks += found
    mean, std = shared.frames.moments(tf.action_key)
    data = {"mean": mean, "std": std}
    checks += compare.compare(tf, runs, baseline, shared.names, data)
    checks += _probes(tf, runs, baseline, shared)
    artifacts.update(report.write(tf, ctx.artifacts_dir, runs, shared))
    return _result(checks, artifacts)


def _probes(tf: Any, runs: Mapping[str, Run], baseline: str, shared: Shared) -> list[Check]:
    """The counterfactual probes for the configured models (default: the baseline), and for each model
    fed renamed cameras whether anything told them apart (`probe_rows.renamed_cameras`)."""
    names = [baseline] if tf.probe_models is None else list(tf.probe_models)
    out: list[Check] = []
    for name, run in runs.items():
        declared = shared.feeds.declared[name]
        found: list[Check] = []
        try:
            if name in names:
                batch = shared.feeds.batch(name)
                shifted = shared.feeds.shifted(name)
                found = probes.probe_model(
                    tf, name, run, batch, declared.cameras, declared.vectors, shared, shifted
                )
        except Exception as exc:  # noqa: BLE001 - an alternative the model cannot take: its row
            found = [model_error(run.spec, exc, "probing")]
        renamed = probe_rows.renamed_cameras(name, declared, found, name in names)
        out += found + ([renamed] if renamed is not None else [])
    return out


def model_error(spec: Any, exc: BaseException, doing: str) -> Check:
    """`teacher_forced.error.<model>`: what failed, named after the model and its file."""
    message = (
        f"{spec.name}: {doing} failed: {type(exc).__name__}: {brief(exc)} (model {spec.path}, "
        f"loader {spec.loader})"
    )
    evidence = {"path": spec.path, "loader": spec.loader, "exception": type(exc).__name__}
    return ROWS(f"error.{spec.name}", spec.name, "error", message, evidence=evidence)


def _result(checks: list[Check], artifacts: dict[str, str]) -> StageResult:
    """The record also carries, at the stage level, what proves the pairing: every checkpoint's digest
    and the evaluation data's fingerprint."""
    pins = {c.feature: c.actual for c in checks if c.id.startswith("teacher_forced.provenance.")}
    data = next((c.evidence.get("fingerprint") or c.actual for c in checks if c.feature == "samples"), None)
    return StageResult.from_checks(
        "teacher_forced",
        checks,
        artifacts=artifacts,
        provenance={"checkpoint_sha256": pins, "data_fingerprint": data},
    )


def prepare(
    tf: Any,
    frames: samples.Frames,
    rows: np.ndarray,
    labels: list[str],
    declared: Mapping[str, inputs.Declared],
) -> Shared:
    """Targets, units and every model's inputs (cameras decoded here, once)."""
    truth, valid = metrics.targets(frames, rows, tf.action_key, tf.horizon)
    scale = frames.moments(tf.action_key)[1]
    names = frames.names.get(tf.action_key) or [f"dim{d}" for d in range(truth.shape[-1])]
    gripper = tf.gripper_dims
    if gripper is None:
        gripper = [d for d, n in enumerate(names) if "gripper" in n.lower()]
    probing = tf.probe_models is None or bool(tf.probe_models)
    feeds = inputs.Feeds(frames, rows, declared, tf.probe_max_shift if probing else 0)
    feeds.decode(LeRobotData(frames.root))
    return Shared(
        frames,
        rows,
        labels,
        truth,
        valid,
        np.where(scale > 1e-12, scale, 1.0),
        list(names),
        list(gripper),
        feeds,
    )


def score_model(tf: Any, spec: Any, model: models.Loaded, shared: Shared) -> tuple[list[Check], Run]:
    """One model on the shared samples: inference, findings, repeatability, reference measure."""
    batch = shared.feeds.batch(spec.name)
    start = time.perf_counter()
    pred = models.infer(model.predict, batch, tf.batch_size, tf.estimator_seeds[0], spec.name)
    spent = time.perf_counter() - start
    scored = metrics.score(pred, shared.truth, shared.valid, shared.scale)
    summary = metrics.summary(scored, shared.gripper, shared.labels, shared.names)
    summary["inference_s"] = spent
    checks = findings.findings(tf, spec.name, scored, shared.truth, summary, shared.labels)
    again = _repeatable(tf, spec, model, shared, scored)
    checks.append(again)
    if tf.reference_column:
        reference = shared.frames.columns[tf.reference_column][shared.rows]
        checks.append(findings.reference(tf, spec.name, scored.per_sample, reference))
    return checks, Run(model, spec, scored, summary, again.verdict == "match")


def _provenance(spec: Any, required: bool) -> tuple[Check, bool | None]:
    if not spec.path:
        raise InputError(f"stages.teacher_forced.models[{spec.name}].path: not set", field="path")
    proof = provenance.verify(
        Path(spec.path), spec.expected_sha256, Path(spec.manifest) if spec.manifest else None
    )
    if proof.ok is None:
        message = f"{spec.name}: sha256 recorded; nothing pinned (set expected_sha256 or manifest)"
        row = ROWS.judge(
            f"provenance.{spec.name}",
            spec.name,
            None if required else True,
            message,
            severity="hard" if required else "soft",
            actual=proof.digest,
            evidence=proof.evidence(),
        )
        return row, None
    message = (
        f"{spec.name}: every pinned checkpoint file matches"
        if proof.ok
        else f"{spec.name}: checkpoint differs from its pin in {sorted(proof.mismatched)}; not evaluated"
    )
    return ROWS.judge(
        f"provenance.{spec.name}",
        spec.name,
        proof.ok,
        message,
        expected=proof.expected,
        actual=proof.digest,
        evidence=proof.evidence(),
    ), proof.ok


def _frames(dataset: Path, keys: Sequence[str], action_key: str, episodes: Any) -> tuple[Any, Any]:
    """The rows the samples need (their episodes whole, with the dataset's per-episode facts), from one
    streamed index pass; every row, as before, where the layout does not allow it (`sample_index`).
    `episodes`: a list, or a callable choosing the global rows from the index."""
    index = sample_index.read_index(dataset, [action_key])
    if index is not None:
        chosen = episodes(index) if callable(episodes) else None
        wanted = sample_index.episodes_of(index, chosen) if chosen is not None else episodes
        frames = sample_index.load(dataset, keys, index, wanted)
        if frames is not None:
            rows = None if chosen is None else sample_index.local(frames, index, chosen)
            return frames, rows
    frames = samples.read_frames(dataset, keys)
    return frames, None


def _samples(
    tf: Any, dataset: Path, keys: Sequence[str], groups: Mapping[str, list[int]], out: Path
) -> tuple[samples.Frames, np.ndarray, list[str], list[Check]]:
    """Reuse and verify a saved manifest, or select and save one."""
    saved_at = Path(tf.sample_manifest) if tf.sample_manifest else None
    if saved_at is not None and saved_at.is_file():
        saved = json.loads(saved_at.read_text(encoding="utf-8"))
        frames, _ = _frames(dataset, keys, tf.action_key, samples.manifest_episodes(saved))
        rows, problems = samples.resolve(frames, saved, saved_at)
        labels = [s.get("subset", "all") for s in saved["samples"]][: len(rows)]
        ok = not problems
        row = ROWS.judge(
            "samples.manifest",
            "samples",
            ok,
            f"{len(rows)} samples from {saved_at} "
            + ("still match the data" if ok else f"no longer match the data: {problems[:3]}"),
            expected=saved.get("fingerprint"),
            actual=samples.fingerprint(frames, rows),
            evidence={"manifest": str(saved_at), "problems": problems[:20]},
        )
        atomic_write_json(out / "samples.json", saved)
        return frames, rows, labels, [row]
    pick = tf.episodes or None
    frames, rows = _frames(
        dataset,
        keys,
        tf.action_key,
        lambda index: sample_index.select_index(index, tf.samples, tf.seed, pick),
    )
    if rows is None:
        rows = samples.select(frames, tf.samples, tf.seed, pick)
    labels = samples.subsets(frames, rows, tf.subset_column, groups)
    manifest = samples.manifest(frames, rows, tf.seed, labels)
    atomic_write_json(out / "samples.json", manifest)
    if saved_at is not None:
        atomic_write_json(saved_at, manifest)
    ok = len(rows) == tf.samples
    row = ROWS.judge(
        "samples.selection",
        "samples",
        ok,
        f"{len(rows)} of {tf.samples} samples across {len(set(frames.episode[rows].tolist()))} "
        "episodes (start/middle/end)",
        severity="soft",
        expected=tf.samples,
        actual=len(rows),
        evidence={"fingerprint": manifest["fingerprint"], "subsets": sorted(set(labels))},
    )
    return frames, rows, labels, [row]


def _repeatable(tf: Any, spec: Any, model: models.Loaded, shared: Shared, first: metrics.Scored) -> Check:
    """Stochastic models: per-sample error under every estimator seed, split halves must agree.
    Others: the same few samples under two seeds must give identical outputs (else: undeclared noise)."""
    if not spec.stochastic:
        probe = slice(0, min(PROBE, len(shared.rows)))
        part = {k: v[probe] for k, v in shared.feeds.batch(spec.name).items()}
        # both seeds on the same batches and every chunk step the model returns: the scored prediction
        # is cut to `horizon`, and other batch sizes may take other kernels, so neither is compared
        seeds = tf.estimator_seeds[:2]
        same = repeatability.same_outputs(
            *(models.infer(model.predict, part, tf.batch_size, s, spec.name) for s in seeds)
        )
        message = (
            f"{spec.name}: deterministic (same outputs under two seeds, {same['shape']})"
            if same["identical"]
            else f"{spec.name}: outputs change with the seed ({same['differs']}); declare stochastic: true"
        )
        return ROWS.judge(
            f"repeatability.{spec.name}",
            spec.name,
            same["identical"],
            message,
            evidence={"seeds": list(tf.estimator_seeds[:2]), "probe_samples": probe.stop, **same},
        )
    batch = shared.feeds.batch(spec.name)
    seeds = list(tf.estimator_seeds)
    matrix = np.stack(
        [first.per_sample]
        + [
            metrics.score(
                models.infer(model.predict, batch, tf.batch_size, s, spec.name),
                shared.truth,
                shared.valid,
                shared.scale,
            ).per_sample
            for s in seeds[1:]
        ]
    )
    result = repeatability.split_half(matrix)
    rho = result["spearman"]
    ok = None if rho is None or rho < tf.repeatability_min else True
    message = (
        f"{spec.name}: split-half Spearman {rho} over {len(seeds)} seeds "
        + ("below" if ok is None else "at least")
        + f" {tf.repeatability_min}"
    )
    return ROWS.judge(
        f"repeatability.{spec.name}",
        spec.name,
        ok,
        message,
        expected=tf.repeatability_min,
        actual=rho,
        evidence={**result, "estimator_seeds": list(seeds)},
    )
