import datetime as dt
import json

import pytest
from omegaconf import OmegaConf

from pipeline.errors import InputError
from pipeline.record.records import Check, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.record.waivers import apply_waivers, load_waivers
from pipeline.run.gate import collect_results, merge
from pipeline.storage import atomic_write_json

CFG = OmegaConf.create(
    {
        "run_id": "r",
        "gate": {"unverifiable": "block"},
        "model": {"name": "m", "path": None},
        "dataset": {"name": "d", "path": None},
        "training": {"path": None},
        "container": {"kind": "none", "image": None},
    }
)


def row(id_, verdict, severity="hard"):
    return Check(
        id=id_,
        stage="s",
        category="units",
        feature="x",
        verdict=verdict,
        severity=severity,
        message=f"{id_} is {verdict}",
    )


def gate_for(*checks, unverifiable="block", waivers=()):
    cfg = OmegaConf.merge(CFG, {"gate": {"unverifiable": unverifiable}})
    return merge(cfg, {"waivers": list(waivers)}, [StageResult.from_checks("s", checks)])


def test_hard_mismatch_blocks_soft_mismatch_warns():
    assert gate_for(row("a", "match")).gate == "clear"
    soft = gate_for(row("a", "mismatch", "soft"))
    assert (soft.gate, soft.verdict) == ("clear", "mismatch")
    hard = gate_for(row("a", "mismatch"))
    assert (hard.gate, hard.verdict, hard.reasons, hard.exit_code) == (
        "blocked",
        "mismatch",
        ("a: a is mismatch",),
        3,
    )


def test_unverifiable_blocks_or_warns_by_config():
    assert gate_for(row("u", "unverifiable")).gate == "blocked"
    warn = gate_for(row("u", "unverifiable"), unverifiable="warn")
    assert (warn.gate, warn.verdict) == ("clear", "unverifiable")


def test_error_blocks_even_when_unverifiable_only_warns():
    record = gate_for(row("e", "error"), unverifiable="warn")
    assert record.gate == "blocked" and record.verdict == "unverifiable"


def test_waiver_turns_a_named_mismatch_into_waived_and_is_listed():
    waiver = {"check": "a", "justification": "known rig quirk", "who": "jd", "date": "2026-12-01"}
    record = gate_for(row("a", "mismatch"), row("b", "match"), waivers=[waiver])
    assert record.gate == "clear" and record.stages[0].checks[0].verdict == "waived"
    assert record.waivers == ({**waiver, "status": "applied"},)


def test_expired_waiver_does_not_apply():
    waiver = {"check": "a", "justification": "j", "who": "w", "date": "2026-01-01", "expires": "2026-02-01"}
    results, used = apply_waivers(
        [StageResult.from_checks("s", [row("a", "mismatch")])], [waiver], dt.date(2026, 12, 2)
    )
    assert results[0].checks[0].verdict == "mismatch" and used[0]["status"] == "expired"


def test_missing_and_corrupt_results_become_error_checks(tmp_path):
    plan = {
        "jobs": {
            "a": {"kind": "stage"},
            "b": {"kind": "stage"},
            "c": {"kind": "stage"},
            "gate": {"kind": "gate"},
        }
    }
    (tmp_path / "jobs.json").write_text(json.dumps({"a": {"job_id": "17", "state": "FAILED"}}))
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "b.json").write_text('{"stage": "b", "status": "pa')
    atomic_write_json(
        tmp_path / "stages" / "c.json", StageResult.from_checks("c", [row("c", "match")]).to_dict()
    )
    a, b, c = collect_results(RunFolder(tmp_path), plan)
    assert a.status == "error" and "job (17) ended FAILED" in a.checks[0].message
    assert b.status == "error" and "unreadable result" in b.checks[0].message
    assert c.status == "pass"


@pytest.mark.parametrize(
    "text, field",
    [
        ("waivers: {a: 1}", "waivers"),
        (
            "waivers:\n  - check: a\n    justification: j\n    who: w\n    date: 12/01/2026\n",
            "waivers[0].date",
        ),
        ("waivers:\n  - check: a\n    who: w\n    date: 2026-12-01\n", "waivers[0].justification"),
        ("waivers: [", "waivers"),
    ],
)
def test_bad_waivers_name_the_file_and_field(tmp_path, text, field):
    path = tmp_path / "waivers.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_waivers(path)
    assert info.value.field == field and str(path) in str(info.value)


def test_gate_without_its_audit_record_exits_1_and_never_leaves_a_clear(tmp_path, capsys):
    """A write of the audit record fails (its folder is a file): no gate.json, exit 1, one line naming
    the write; an earlier run's "clear" does not stand for this one."""
    from pipeline.run.gate import run_gate

    folder = RunFolder.of(tmp_path / "out", "r1")
    audit_dir = tmp_path / "audit"
    audit_dir.write_text("a file where the audit folder should be")
    folder.write_config(OmegaConf.merge(CFG, {"audit_dir": str(audit_dir)}))
    folder.write_plan({"jobs": {"s": {"kind": "stage"}}})
    folder.write_result("s", StageResult.from_checks("s", [row("a", "match")]))
    folder.write_gate(gate_for(row("a", "match")))  # an earlier decision, clear
    assert run_gate(folder.root) == 1
    assert not folder.gate_file.exists()
    assert json.loads(folder.incomplete_gate_file.read_text())["gate"] == "clear"
    err = capsys.readouterr().err.strip()
    assert err.startswith("gate: no complete record: audit record: writing ") and "\n" not in err
    assert f"files written: {folder.incomplete_gate_file}" in err
    code, lines = folder.gate_outcome()
    assert code == 1 and lines == [err]
    audit_dir.unlink()
    assert run_gate(folder.root) == 0
    assert folder.gate_file.exists() and not folder.gate_failure_file.exists()
    assert not folder.incomplete_gate_file.exists() and len(list(audit_dir.glob("*_audit.md"))) == 1


def test_stage_results_name_their_jobs_and_the_wall_time_of_their_parts(tmp_path):
    """jobs.json gives each job's id; parts' done.json their start and end: the stage's wall time spans
    from the first part's start to the stage's end."""
    folder = RunFolder(tmp_path)
    plan = {
        "jobs": {
            "det.a": {"kind": "part", "stage": "det", "part": "a"},
            "det.b": {"kind": "part", "stage": "det", "part": "b"},
            "det": {"kind": "stage", "stage": "det"},
            "old": {"kind": "stage", "stage": "old", "reused": True},
        }
    }
    folder.write_jobs({"det.a": {"job_id": "11"}, "det.b": {"job_id": "12"}, "det": {"job_id": "13"}})
    for part, (start, end) in {"a": (100.0, 130.0), "b": (101.0, 120.0)}.items():
        atomic_write_json(
            folder.part_done_file("det", part), {"part": part, "started": start, "finished": end}
        )
    result = StageResult.from_checks(
        "det", [row("det.x", "match")], timings={"started": 131.0, "wall_s": 0.5}
    )
    folder.write_result("det", result)
    folder.write_result("old", StageResult.from_checks("old", [row("old.x", "match")]))
    det, old = collect_results(folder, plan)
    assert det.provenance["jobs"] == {"main": "13", "a": "11", "b": "12"}
    assert (det.timings["parts"], det.timings["parts_wall_s"], det.timings["span_s"]) == (2, 49.0, 31.5)
    assert "jobs" not in old.provenance  # reused: this launch ran no job for it


def test_demo_variant_only_when_an_input_is_the_demo(tmp_path):
    from pipeline.run.gate import demo_variant

    demo = tmp_path / "out" / "demo" / "faulty" / "model"
    cfg = OmegaConf.merge(
        CFG,
        {"output_root": str(tmp_path / "out"), "demo": {"variant": "faulty"}, "model": {"path": str(demo)}},
    )
    assert demo_variant(cfg) == "faulty"
    assert demo_variant(OmegaConf.merge(cfg, {"model": {"path": str(tmp_path / "mine")}})) is None


def test_gate_writes_junit_where_configured_and_a_failed_write_is_no_clear(tmp_path, monkeypatch):
    from pipeline.run.gate import run_gate

    monkeypatch.chdir(tmp_path)
    folder = RunFolder.of(tmp_path / "out", "r1")
    cfg = OmegaConf.merge(
        CFG, {"audit_dir": str(tmp_path / "audit"), "gate": {"unverifiable": "block", "junit": "ci/gate.xml"}}
    )
    folder.write_config(cfg)
    folder.write_plan({"jobs": {"s": {"kind": "stage"}}})
    folder.write_result("s", StageResult.from_checks("s", [row("a", "match")]))
    assert run_gate(folder.root) == 0
    assert "<testcase" in (tmp_path / "ci" / "gate.xml").read_text()
    (tmp_path / "ci" / "gate.xml").unlink()
    (tmp_path / "ci" / "gate.xml").mkdir()  # the report cannot replace a folder
    assert run_gate(folder.root) == 1 and not folder.gate_file.exists()
    assert "ci/gate.xml failed" in folder.gate_failure()
