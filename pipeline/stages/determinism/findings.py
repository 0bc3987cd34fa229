"""The rows that say under which conditions and over which horizon the twins' proof holds, why a
twin crashed, and whether DataLoader workers drew duplicated random streams."""

from __future__ import annotations

from typing import Any

from pipeline.record.records import Check, Rows
from pipeline.stages.determinism import compare
from pipeline.stages.determinism.conditions import MEANING
from pipeline.stages.determinism.config import NAME, DeterminismConfig
from pipeline.stages.determinism.outcome import Outcome, failure_verb
from pipeline.trainlog.spec import KNOWN_EVENTS

ROWS = Rows(NAME, "determinism")


def env_words(record: dict[str, Any], threads: Any) -> str:
    """`PYTHONHASHSEED=0, OMP_NUM_THREADS unset, 1 thread(s)`: the conditions a pair ran under."""
    words = [
        f"{k}={v}"
        for k, v in sorted((record.get("env_set") or {}).items())
        if not k.startswith("PREFLIGHT_H")
    ]
    words += [f"{k} unset" for k in record.get("env_unset") or []]
    return ", ".join([*words, f"{threads} torch thread(s)"])


def _not_covered(job: dict[str, Any], pair: Outcome) -> str:
    res = job.get("resources") or {}
    gaps = []
    if res.get("cpus_per_task") and res["cpus_per_task"] != pair.threads:
        gaps.append(f"the job's {res['cpus_per_task']} CPUs per task ({pair.threads} thread(s) here)")
    device = (pair.report.get("device") or {}).get("device")
    if res.get("gpus") and device != "cuda":
        gaps.append(f"the job's GPUs ({res['gpus']}; this pair ran on {device})")
    return f"; not covered: {', '.join(gaps)}" if gaps else ""


def conditions_check(config: DeterminismConfig, twins: list[Outcome], bare: list[Outcome]) -> Check | None:
    """Do same-seed runs agree under the training job's environment, not only the stage's?"""
    if not config.job_pair:
        return None
    first = bare[0].record
    job = first.get("job_conditions") or {}
    evidence = {"job": job, "bare_a": bare[0].evidence(), "bare_b": bare[1].evidence()}
    if bare[0].skipped:
        return ROWS(
            "conditions",
            "conditions",
            "match",
            f"the training job's environment: {first.get('reason')}",
            expected="bit-identical under the job's environment",
            actual="same as the twins",
            evidence=evidence,
        )
    if any(o.problem for o in bare):
        broken = "; ".join(f"{o.part} {o.problem}" for o in bare if o.problem)
        return ROWS(
            "conditions",
            "conditions",
            "error",
            f"run under the job's environment {failure_verb(bare)}: {broken}",
            evidence=evidence,
        )
    assert bare[0].stream is not None and bare[1].stream is not None
    hit = compare.earliest(compare.divergences(bare[0].stream, bare[1].stream))
    proven = env_words(first, bare[0].threads)
    differ = first.get("differing") or {}
    evidence.update(divergence=hit, threads=bare[0].threads)
    if hit is None:
        message = (
            f"same-seed runs bit-identical under the training job's environment too ({proven}) over "
            f"{len(bare[0].stream.rows)} step(s){_not_covered(job, bare[0])}"
        )
        return ROWS(
            "conditions",
            "conditions",
            "match",
            message,
            expected="bit-identical",
            actual="bit-identical",
            configured=differ,
            evidence=evidence,
        )
    return _diverged(config, twins, first, hit, evidence)


def _named(differ: dict[str, dict[str, str | None]]) -> str:
    """`PYTHONHASHSEED (stage 0, job unset: <what unset means>)` per variable the job does not share."""
    words = []
    for name, values in differ.items():
        job = values["job"]
        unset = job is None or (name == "PYTHONHASHSEED" and job == "random")
        meaning = f": {MEANING[name]}" if unset and name in MEANING else ""
        words.append(f"{name} (stage {values['stage']}, job {job or 'unset'}{meaning})")
    return "; ".join(words)


def _diverged(
    config: DeterminismConfig,
    twins: list[Outcome],
    first: dict[str, Any],
    hit: dict[str, Any],
    evidence: dict[str, Any],
) -> Check:
    """The pair under the job's environment diverged: name the variables when the twins agreed."""
    a, b = twins
    twins_ok = not (a.problem or b.problem) and a.stream is not None and b.stream is not None
    twins_ok = twins_ok and compare.earliest(compare.divergences(a.stream, b.stream)) is None
    differ = first.get("differing") or {}
    lead = (
        "same-seed runs are identical only under variables the training job does not set (or sets "
        f"otherwise): {_named(differ)}"
        if twins_ok
        else "same-seed runs diverge under the training job's environment too"
    )
    return ROWS(
        "conditions",
        "conditions",
        "mismatch",
        f"{lead}; under the job's environment ({env_words(first, evidence.get('threads'))}) they diverge: "
        f"{compare.describe(hit)}",
        severity=config.conditions_severity,
        expected="bit-identical under the job's environment",
        configured=differ,
        actual=f"diverge at step {hit['step']}",
        evidence=evidence,
    )


def horizon_check(config: DeterminismConfig, twin: Outcome) -> Check | None:
    """The steps the twins compared, the events inside them, and what the horizon did not cover."""
    if twin.problem or twin.stream is None:
        return None
    last = max(twin.stream.steps)
    seen = twin.events()
    after = config.horizon_after
    inside = {e: s for e, s in seen.items() if s < last}
    missing = [e for e in config.horizon_events if e not in seen or seen[e] + after > last]
    outside = [e for e in dict.fromkeys([*KNOWN_EVENTS, *config.horizon_events]) if e not in inside]
    words = ", ".join(f"{e} after step {s}" for e, s in sorted(inside.items(), key=lambda kv: kv[1]))
    message = f"horizon: steps 1..{last} compared; inside: {words or 'no reported event'}"
    if outside:
        message += (
            f"; not covered: {', '.join(outside)} (no such event reported inside the run): "
            "randomness first drawn after them is not proven"
        )
    evidence = {
        "steps": last,
        "events": seen,
        "required": config.horizon_events,
        "after": after,
        "max_steps": config.max_steps,
        "all_events": twin.all_events()[:50],
    }
    actual = {"steps": last, "events": inside}
    if missing:
        detail = ", ".join(
            f"{e} (after step {seen[e]}, {last - seen[e]} step(s) compared after it)"
            if e in seen
            else f"{e} (never reported)"
            for e in missing
        )
        return ROWS(
            "horizon",
            "horizon",
            "unverifiable",
            f"the smoke run did not cover {detail} with {after} step(s) after it within "
            f"max_steps={config.max_steps}; {message}. Raise stages.{NAME}.max_steps, or have the "
            "trainer call log.event(name) and stop on log.stop",
            expected=config.horizon_events,
            actual=actual,
            evidence=evidence,
        )
    return ROWS(
        "horizon",
        "horizon",
        "match",
        message,
        severity="hard" if config.horizon_events else "soft",
        expected=config.horizon_events,
        actual=actual,
        evidence=evidence,
    )


def _batch_repeats(twin: Outcome) -> list[dict[str, Any]]:
    """Steps whose input batch digest repeats an earlier one within the same epoch."""
    assert twin.stream is not None
    bounds = sorted(s for e, s in twin.all_events() if e == "epoch_end")
    seen: dict[tuple[int, str], int] = {}
    found = []
    for step in twin.stream.steps:
        digest = twin.stream.rows[step].get("batch_digest")
        if digest is None:
            continue
        key = (sum(1 for b in bounds if b < step), str(digest))
        if key in seen:
            found.append({"step": step, "same_as": seen[key], "digest": digest})
        seen.setdefault(key, step)
    return found


def worker_rng_check(config: DeterminismConfig, twin: Outcome) -> Check | None:
    """Random streams forked identically into DataLoader workers, and batches that repeat in an epoch."""
    if twin.problem or twin.stream is None:
        return None
    folder = twin.folder / "run" / "workers"
    from pipeline.trainlog.workers import duplicates  # imports torch: only in the stage's job

    streams = duplicates(folder) if folder.is_dir() else []
    repeats = _batch_repeats(twin)
    watched = len(list(folder.glob("worker*.json"))) if folder.is_dir() else 0
    digests = sum("batch_digest" in r for r in twin.stream.rows.values())
    if not watched and not digests:
        return None
    evidence = {
        "duplicated_streams": streams,
        "repeated_batches": repeats,
        "worker_records": watched,
        "batch_digests": digests,
    }
    if not streams and not repeats:
        return ROWS(
            "worker_rng",
            "worker_rng",
            "match",
            f"no duplicated random stream across {watched} DataLoader worker start(s); "
            f"{digests} batch digest(s), none repeated within an epoch",
            evidence=evidence,
        )
    parts = [f"{d['stream']} identical in workers {d['workers']}" for d in streams[:5]]
    parts += [f"batch at step {r['step']} repeats step {r['same_as']}" for r in repeats[:5]]
    return ROWS(
        "worker_rng",
        "worker_rng",
        "mismatch",
        "DataLoader workers draw duplicated random streams (forked or reseeded identically; seed "
        "each worker's generator from torch.initial_seed() or get_worker_info().seed): " + "; ".join(parts),
        severity=config.worker_rng_severity,
        expected="a distinct random stream per worker",
        actual=parts,
        evidence=evidence,
    )


def crash_advice(config: DeterminismConfig, twins: list[Outcome], bare: list[Outcome]) -> str | None:
    """What to do about a twin torch stopped for a nondeterministic op: warn_only only where the
    training job itself does not run under deterministic algorithms (the crash is the stage's doing)."""
    ops = {(o.record.get("cause") or {}).get("op") for o in twins if o.problem} - {None}
    if not ops or config.warn_only:
        return None
    op = ", ".join(sorted(ops))
    bare_ops = {(o.record.get("cause") or {}).get("op") for o in bare if o.problem} - {None}
    ran_bare = config.job_pair and not bare[0].skipped and not any(o.problem for o in bare)
    if bare_ops & ops:
        return (
            f"the training job's environment crashes on {op} as well, so the job itself runs "
            f"deterministic algorithms: replace {op} with a deterministic equivalent "
            f"(stages.{NAME}.warn_only would only hide it here)"
        )
    if ran_bare:
        return (
            f"only the stage's deterministic mode refuses {op} (the run under the job's environment "
            f"completed): set stages.{NAME}.warn_only=true so the twins run, list {op}, "
            "and compare bits"
        )
    return (
        f"if the training job does not switch deterministic algorithms on itself, set stages.{NAME}."
        f"warn_only=true so the twins run and list {op}; if it does, replace {op}"
    )
