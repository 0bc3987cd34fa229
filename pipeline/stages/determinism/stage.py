"""determinism: same-seed twin runs, a different-seed control, DDP sanity, and the reload round trip.

Reference 001's manual checklist, done exactly and on every gate. Four part jobs run the user's smoke
training command (`stages.determinism.train_cmd`, else the lerobot-train line typed after `--` on the launch
line, run through `pipeline.trainers.lerobot_train`: `runner.train_argv`): `twin_a` and `twin_b` with the
same seed, `control`
with another seed, and `ddp` under torchrun when `ddp_procs` > 1 (parts are fixed per stage, so with
`ddp_procs: 1` the ddp part only records that it was skipped, in a second). The main job then compares
the metrics streams bit for bit, and reloads twin A's checkpoint through the configured eval loader.

Verdicts: twins bit-identical and the control different -> pass; twins differ -> hard mismatch naming
the first divergent step; control identical too -> `unverifiable` (the stream does not depend on the
seed, so identity proves nothing); a crashed run -> `error`, with its cause read from the log (the op
torch refused under deterministic algorithms, and whether `warn_only` is the right answer).

Round two (`findings`): `bare_a`/`bare_b` repeat the twins under the training job's environment
(`conditions`), so identity that holds only under the stage's injected variables is a finding naming
them; the horizon row states the steps compared and the trainer's events inside them (the config can
require some); the worker_rng row reports random streams duplicated across DataLoader workers.
The envelope row (`envelope`) compares the smoke loss curve with earlier clear runs of the same
training config in the audit history, and keeps this run's curve for the runs after it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pipeline.errors import ConfigError, InputError
from pipeline.readers.rename import rename_map
from pipeline.record.records import Check, Rows, StageResult
from pipeline.stages import StageContext, error_check
from pipeline.stages.determinism import compare, envelope, findings, reload, runner
from pipeline.stages.determinism.config import NAME, DeterminismConfig
from pipeline.stages.determinism.ddp import ddp_checks
from pipeline.stages.determinism.outcome import Outcome, failure_verb, read_outcome
from pipeline.stages.determinism.runner import BARE, stage_config
from pipeline.storage import atomic_write_json

__all__ = ["PARTS", "Outcome", "read_outcome", "run", "twins_check"]
PARTS = ("twin_a", "twin_b", "control", "ddp", *BARE)
ROWS = Rows(NAME, "determinism")
TRAINERS = "pipeline.trainers."  # the shipped smoke trainers: each declares the packages it needs


def twins_check(
    a: Outcome, b: Outcome, steps: int, advice: str | None = None
) -> tuple[Check, dict[str, Any]]:
    evidence = {"twin_a": a.evidence(), "twin_b": b.evidence()}
    if a.problem or b.problem:
        broken = "; ".join(f"{o.part} {o.problem}" for o in (a, b) if o.problem)
        evidence["advice"] = advice
        verb = failure_verb([a, b])
        message = f"twin run {verb}: {broken}" + (f". {advice}" if advice and verb == "crashed" else "")
        return ROWS("twins", "twins", "error", message, evidence=evidence), {}
    assert a.stream is not None and b.stream is not None
    found = compare.divergences(a.stream, b.stream, (*compare.METRICS, compare.DIGEST, compare.BATCH))
    first = compare.earliest(found)
    evidence.update(divergences=found, steps_a=len(a.stream.rows), steps_b=len(b.stream.rows))
    if first is None:
        digests = sum(compare.DIGEST in r for r in a.stream.rows.values())
        message = (
            f"twins (seed {a.record.get('seed')}) bit-identical over {len(a.stream.rows)} step(s): "
            f"{', '.join(k for k in found if not k.endswith('_digest'))}, {digests} parameter digest(s); "
            f"proven under {findings.env_words(a.record, a.threads)}"
        )
        return ROWS(
            "twins",
            "twins",
            "match",
            message,
            expected="bit-identical",
            actual="bit-identical",
            configured={"steps": steps},
            evidence=evidence,
        ), found
    return ROWS(
        "twins",
        "twins",
        "mismatch",
        f"same-seed twins diverge: {compare.describe(first)}",
        expected="bit-identical",
        actual=f"diverge at step {first['step']}",
        configured={"steps": steps},
        evidence=evidence,
    ), found


def control_check(twin: Outcome, control: Outcome) -> Check:
    evidence = {"twin": twin.part, "control": control.evidence()}
    if twin.problem or control.problem:
        broken = "; ".join(f"{o.part} {o.problem}" for o in (twin, control) if o.problem)
        return ROWS(
            "control", "control", "error", f"cannot compare the control run: {broken}", evidence=evidence
        )
    assert twin.stream is not None and control.stream is not None
    found = compare.divergences(twin.stream, control.stream)
    first = compare.earliest(found)
    evidence["divergences"] = found
    seeds = f"seed {control.record.get('seed')} vs {twin.record.get('seed')}"
    if first is None:
        return ROWS(
            "control",
            "control",
            "unverifiable",
            f"control ({seeds}) is bit-identical to the twin: the "
            "stream does not depend on the seed, so identical twins prove nothing",
            expected="differs from the twins",
            actual="identical",
            evidence=evidence,
        )
    return ROWS(
        "control",
        "control",
        "match",
        f"control ({seeds}) differs from the twins as it should (from step {first['step']})",
        expected="differs from the twins",
        actual=f"differs at step {first['step']}",
        evidence=evidence,
    )


def device_check(a: Outcome, b: Outcome) -> Check | None:
    """Bit-identity is only expected on the same kind of device and software; say when it was not."""
    if a.problem or b.problem:
        return None
    keys = ("torch", "cuda", "cudnn", "device", "gpu", "capability", "threads")
    seen = [
        {k: (o.report.get("device") or {}).get(k) for k in keys} | {"nvidia_smi": o.record.get("gpu")}
        for o in (a, b)
    ]
    same = seen[0] == seen[1]
    return ROWS(
        "device",
        "device",
        "match" if same else "mismatch",
        "twins ran on the same kind of device and software"
        if same
        else f"twins ran on different devices/software: {seen[0]} vs {seen[1]}",
        severity="soft",
        expected="same device kind",
        actual=seen[0] if same else seen,
        evidence={"twin_a": seen[0], "twin_b": seen[1]},
    )


def nondeterministic_ops_check(outcomes: list[Outcome]) -> Check:
    ops = sorted(
        {
            op
            for o in outcomes
            for op in [
                *(o.report.get("nondeterministic_ops") or []),
                *(o.record.get("nondeterministic_ops_in_log") or []),
            ]
        }
    )
    return ROWS(
        "nondeterministic_ops",
        "nondeterministic_ops",
        "mismatch" if ops else "match",
        f"nondeterministic op(s) hit under warn_only: {', '.join(ops)}"
        if ops
        else "no nondeterministic op was hit (warn_only)",
        severity="soft",
        expected=[],
        actual=ops,
        evidence={"ops": ops},
    )


def reload_checks(cfg: DictConfig, config: DeterminismConfig, twin: Outcome) -> list[Check]:
    if not config.reload.enabled:
        return []
    if twin.problem:
        message = f"no smoke checkpoint to reload: {twin.part} {twin.problem}"
        return [ROWS("reload.checkpoint", "reload.checkpoint", "error", message)]
    checkpoint = twin.folder / "run" / config.checkpoint_subdir
    try:
        loader = reload_loader(config, checkpoint)
    except InputError as exc:
        return [dataclasses.replace(error_check(f"{NAME}.reload", exc, "reload"), stage=NAME)]
    if isinstance(loader, Check):
        return [loader]
    dataset = config.reload.dataset or cfg.dataset.get("path")
    if not dataset:
        raise InputError(
            f"stages.{NAME}.reload.dataset: no dataset to re-inject stats from (dataset.path is null)",
            field=f"stages.{NAME}.reload.dataset",
        )
    told = runner.uses_placeholder(config.train_cmd, "save_normalization_stats")
    try:
        rename = rename_map(cfg)
        return reload.round_trip(checkpoint, Path(dataset), config.reload, loader, told=told, rename=rename)
    except InputError as exc:
        return [dataclasses.replace(error_check(f"{NAME}.reload", exc, "reload"), stage=NAME)]


def reload_loader(config: DeterminismConfig, checkpoint: Path) -> str | Check:
    """The configured reload loader, else the one the smoke checkpoint's own `config.json` calls for
    (a LeRobot policy type: LeRobot's loader); a soft `unverifiable` row when there is none, or when
    the packages it declares are not installed here (the row names them)."""
    from pipeline.stages.determinism import lerobot_reload

    key = f"stages.{NAME}.reload.loader"
    name = config.reload.loader or lerobot_reload.default_loader(checkpoint)
    if not name:
        message = (
            f"no reload loader ({key}: module:function(checkpoint_dir, dataset_dir), the code eval "
            f"reloads with), and {checkpoint}/config.json names no policy type with a shipped one: "
            "the train -> eval round trip was not checked"
        )
        return ROWS("reload.loader", "reload.loader", "unverifiable", message, severity="soft")
    missing = lerobot_reload.missing_packages(reload.resolve(name, key))
    if missing:
        message = (
            f"the reload loader {name} needs the package(s) {missing}, not installed where this job ran: "
            "the train -> eval round trip was not checked"
        )
        evidence = {"loader": name, "missing": missing, "checkpoint": str(checkpoint)}
        return ROWS(
            "reload.loader", "reload.loader", "unverifiable", message, severity="soft", evidence=evidence
        )
    return name


def run(cfg: DictConfig, ctx: StageContext) -> StageResult:
    """Merge what the parts left: compare the streams, then reload twin A's checkpoint."""
    config = stage_config(cfg, ctx.config)
    runner.validate(cfg, config)
    metrics_file = config.metrics_file
    got = {p: read_outcome(ctx.part_dir(p), p, metrics_file) for p in PARTS if p != "ddp"}
    pair, bare = [got["twin_a"], got["twin_b"]], [got[p] for p in BARE]
    advice = findings.crash_advice(config, pair, bare)
    twins, found = twins_check(got["twin_a"], got["twin_b"], config.steps, advice)
    healthy = got["twin_b"] if got["twin_a"].problem and not got["twin_b"].problem else got["twin_a"]
    checks = [twins, control_check(healthy, got["control"])]
    extra = (
        findings.conditions_check(config, pair, bare),
        findings.horizon_check(config, healthy),
        findings.worker_rng_check(config, healthy),
    )
    checks += [c for c in extra if c is not None]
    if (device := device_check(got["twin_a"], got["twin_b"])) is not None:
        checks.append(device)
    if config.warn_only:
        checks.append(nondeterministic_ops_check(list(got.values())))
    if config.ddp_procs > 1:
        ddp = read_outcome(ctx.part_dir("ddp"), "ddp", metrics_file)
        checks += ddp_checks(ddp, config.ddp_procs, metrics_file, config.steps)
    checks += reload_checks(cfg, config, got["twin_a"])
    curve = None if healthy.problem else healthy.stream
    row, plots = envelope.envelope_check(cfg, config, curve, ctx.fingerprints, ctx.artifacts_dir)
    checks += [row] if row is not None else []
    path = atomic_write_json(
        ctx.artifacts_dir / "compare.json",
        {"twins": found, "parts": {p: o.evidence() for p, o in got.items()}},
    )
    artifacts = {"compare": str(path), **plots}
    return StageResult.from_checks(NAME, checks, artifacts=artifacts, timings=_part_timings(got))


def unmet(cfg: Any) -> tuple[str, ...]:
    """At launch: a command that runs one of the shipped trainers (`-m pipeline.trainers.<name>`) whose
    declared packages (`REQUIRES`, lerobot for lerobot_train) are not importable is exit 2 now, one line
    naming the key, as a teacher-forced loader's are (`loader_installed`); else every part job would
    start only to record "No module named lerobot"."""
    section = (cfg.get("stages") or {}).get(NAME) or {}
    commands = {name: section.get(name) for name in ("train_cmd", "ddp_cmd")}
    if not commands["train_cmd"] and runner.lerobot_flags(cfg) is not None:
        commands["train_cmd"] = list(runner.LEROBOT_TRAIN_CMD)  # the line after `--`, through the wrapper
    for name, argv in commands.items():
        if not isinstance(argv, Sequence) or isinstance(argv, str):
            continue  # a shell string is refused where the command is filled (runner.substitute)
        items = [str(a) for a in argv]
        modules = [m for flag, m in zip(items, items[1:], strict=False) if flag == "-m"]
        for module in (m for m in modules if m.startswith(TRAINERS)):
            try:
                needs = getattr(importlib.import_module(module), "REQUIRES", ())
            except ImportError as exc:
                raise ConfigError(f"stages.{NAME}.{name}", f"{module} cannot be imported: {exc}") from exc
            missing = [p for p in needs if importlib.util.find_spec(p) is None]
            if missing:
                raise ConfigError(
                    f"stages.{NAME}.{name}",
                    f"runs {module}, which needs {', '.join(missing)}: not importable here (install the "
                    f"package(s) {missing} where the stage runs, train with another command, or "
                    "skip=[determinism])",
                )
    return ()


def _part_timings(got: dict[str, Outcome]) -> dict[str, float]:
    """Start/end of each run, so overlapping twins are visible in the record."""
    out: dict[str, float] = {}
    for part, outcome in got.items():
        for key in ("started", "ended"):
            if isinstance(outcome.record.get(key), (int, float)):
                out[f"{part}_{key}"] = float(outcome.record[key])
    return out
