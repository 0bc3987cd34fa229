"""The loss envelope: this smoke run's loss curve against earlier clear runs of the same training config.

Earlier runs are JSON twins written into a tmp audit_dir (the shape the gate writes); this run's curve
is a real `pipeline.trainlog` stream. One case runs the determinism stage for real (its parts in-process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline.errors import ConfigError
from pipeline.record import history
from pipeline.record.audit import record_stem
from pipeline.record.fingerprint import digest_path
from pipeline.record.records import GateRecord, StageResult
from pipeline.stages.config import typed
from pipeline.stages.determinism import compare, envelope
from pipeline.stages.determinism.config import DeterminismConfig
from pipeline.storage import atomic_write_json
from pipeline.trainlog import MetricsLog
from tests.stages.determinism.helpers import gate_reasons, run_stage, stage_cfg

PRINTS = {"training": "sha256:train", "model": "sha256:model", "config": "sha256:c", "container": "sha256:e"}
BASE = [1.0, 0.8, 0.65, 0.55, 0.5]
CFG = OmegaConf.create({"run_id": "now", "audit_dir": None})


def stream(folder: Path, losses: list[float]) -> compare.Stream:
    with MetricsLog(folder) as log:
        for step, loss in enumerate(losses, start=1):
            log.step(step, loss=loss)
    return compare.read_stream(folder / "metrics.jsonl")


def earlier(audit: Path, run_id: str, losses: list[float], gate: str = "clear", **prints: str) -> Path:
    """A gate record whose determinism result kept its curve in the envelope row, as the stage does."""
    steps = list(range(1, len(losses) + 1))
    row = envelope.ROWS(
        envelope.CHECK, "loss", "match", "kept", evidence={"curve": {"steps": steps, "loss": losses}}
    )
    result = StageResult.from_checks("determinism", [row], fingerprints={**PRINTS, **prints})
    record = GateRecord(
        run_id=run_id,
        created=f"2026-12-01T00:00:{len(list(audit.glob('*.json'))) if audit.exists() else 0:02d}",
        verdict="pass",
        gate=gate,
        reasons=() if gate == "clear" else ("x: blocked",),
        stages=(result,),
        sources={"model": {"name": "m"}, "dataset": {"name": "d"}},
        fingerprints={"determinism": result.fingerprints},
    )
    sealed = history.seal(record.to_dict(), history.chain_head(audit), None)  # as a gate writes it
    return atomic_write_json(audit / f"{record_stem(record)}.json", sealed)


def check(tmp_path: Path, losses: list[float], **settings):
    cfg = OmegaConf.merge(CFG, {"audit_dir": str(tmp_path / "audit")})
    config = DeterminismConfig(**settings)
    return envelope.envelope_check(cfg, config, stream(tmp_path / "run", losses), PRINTS, tmp_path / "art")


def test_fewer_than_two_earlier_runs_is_an_informative_row_that_keeps_the_curve(tmp_path):
    audit = tmp_path / "audit"
    earlier(audit, "a", BASE)
    earlier(audit, "blocked", BASE, gate="blocked")  # a blocked gate's curve is no reference
    earlier(audit, "other", BASE, training="sha256:another-config")
    (audit / "2026-12-02_m_d_torn_audit.json").write_text('{"run_id": "torn", "st')  # a partial twin
    row, plots = check(tmp_path, [5.0, 4.0, 3.0])
    assert row.verdict == "match" and row.severity == "soft" and not row.blocking and plots == {}
    assert "1 earlier run(s) of this training config with a loss curve, need 2" in row.message
    assert row.evidence["curve"] == {"steps": [1, 2, 3], "loss": [5.0, 4.0, 3.0]}
    kept = StageResult.from_checks("determinism", [row])
    assert envelope.stored_curve(StageResult.from_dict(json.loads(json.dumps(kept.to_dict())))) == {
        1: 5.0,
        2: 4.0,
        3: 3.0,
    }


def test_a_curve_inside_the_spread_of_earlier_runs_matches_and_is_plotted(tmp_path):
    audit = tmp_path / "audit"
    for index, shift in enumerate((-0.01, 0.0, 0.012)):
        earlier(audit, f"r{index}", [v + shift for v in BASE])
    row, plots = check(tmp_path, [v + 0.005 for v in BASE])
    assert row.verdict == "match", row.message
    assert "5 step(s) against 3 earlier clear run(s)" in row.message
    assert Path(plots["loss_envelope"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert row.evidence["earlier_runs"] == ["r2", "r1", "r0"]  # newest first


def test_a_curve_outside_is_a_soft_finding_naming_the_steps_and_hard_when_configured(tmp_path):
    audit = tmp_path / "audit"
    for index, shift in enumerate((-0.01, 0.0, 0.01)):
        earlier(audit, f"r{index}", [v + shift for v in BASE])
    drifted = [*BASE[:3], 0.9, 0.95]  # diverges from step 4 on
    row, plots = check(tmp_path, drifted)
    assert row.verdict == "mismatch" and row.severity == "soft" and not row.blocking
    assert [o["step"] for o in row.evidence["outside"]] == [4, 5]
    assert "outside the envelope at 2 of 5 step(s)" in row.message and "first at step 4" in row.message
    assert Path(plots["loss_envelope"]).stat().st_size > 1000
    hard, _ = check(tmp_path, drifted, envelope_severity="hard")
    assert hard.verdict == "mismatch" and hard.blocking
    # identical earlier runs (same seed, same software): the floor keeps the band from being a point
    same = tmp_path / "same"
    for name in ("s0", "s1"):
        earlier(same / "audit", name, BASE)
    row, _ = check(same, [v * 1.01 for v in BASE])
    assert row.verdict == "match", row.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("envelope_severity", "loud"),
        ("envelope_min_runs", 1),
        ("envelope_alpha", 0.0),
        ("envelope_match", ["x"]),
    ],
)
def test_envelope_settings_are_checked_at_launch(key, value):
    with pytest.raises(ConfigError) as info:
        typed(DeterminismConfig, {key: value}, "stages.determinism")
    assert info.value.key.startswith(f"stages.determinism.{key}")


def test_the_real_stage_finds_its_curve_outside_earlier_runs_and_keeps_it(tmp_path, tiny_dataset):
    """Two earlier clear runs on the same dataset with a loss near 1000: the tiny run is far outside.

    The stage runs for real (reference-trainer twins, in-process as the part jobs run them), reading the
    audit_dir a launch passes it and the dataset fingerprint the plan gives it."""
    audit = tmp_path / "audit_logs"
    for name, shift in (("e1", 0.0), ("e2", 1.0)):
        earlier(audit, name, [1000.0 + shift] * 3, dataset=digest_path(tiny_dataset))
    cfg = stage_cfg(
        tiny_dataset,
        extra={"run_id": "now", "audit_dir": str(audit)},
        steps=3,
        job_pair=False,
        envelope_match=["dataset"],
        **{"reload.enabled": False},
    )
    prints = {"dataset": digest_path(tiny_dataset)}
    result, found = run_stage(tmp_path / "run", cfg, ("twin_a", "twin_b", "control"), fingerprints=prints)
    assert not gate_reasons(result), result.checks  # soft: the gate stays clear (a launch exits 0)
    row = found["envelope"]
    assert row.verdict == "mismatch" and row.severity == "soft"
    assert row.evidence["earlier_runs"] == ["e2", "e1"]
    assert row.evidence["curve"]["steps"] == [1, 2, 3] and len(row.evidence["outside"]) == 3
    assert Path(result.artifacts["loss_envelope"]).exists()
