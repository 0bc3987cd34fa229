"""The run folder owns every path of a run, reads its records back, and decides the gate's exit code."""

from pathlib import Path

from pipeline.record.records import Check, GateRecord, StageResult
from pipeline.record.runfolder import RunFolder, default_output_root, demo_dir
from pipeline.stages import StageContext


def record(gate: str, reasons: tuple[str, ...] = ()) -> GateRecord:
    check = Check(id="s.x", stage="s", category="units", feature="x", verdict="match")
    return GateRecord(
        run_id="r1",
        created="2026-12-02T00:00:00+00:00",
        verdict="pass" if gate == "clear" else "mismatch",
        gate=gate,
        reasons=reasons,
        stages=(StageResult.from_checks("s", [check]),),
    )


def test_paths_come_from_output_root_and_run_id(tmp_path):
    folder = RunFolder.of(tmp_path / "out", "r1")
    assert folder.root == (tmp_path / "out" / "runs" / "r1").resolve() and folder.run_id == "r1"
    names = [
        folder.config_file,
        folder.plan_file,
        folder.jobs_file,
        folder.gate_file,
        folder.result_file("a"),
    ]
    assert [p.relative_to(folder.root).as_posix() for p in names] == [
        "config.yaml",
        "plan.json",
        "jobs.json",
        "gate.json",
        "stages/a.json",
    ]
    assert folder.submitit_dir == folder.root / "submitit" / "%j"
    assert demo_dir(tmp_path / "out") == tmp_path / "out" / "demo"
    ctx = StageContext(run_dir=folder.root, stage="det", part="twin_a")
    assert ctx.artifacts_dir == folder.root / "artifacts" / "det" and ctx.artifacts_dir.is_dir()
    assert ctx.state_dir == folder.root / "state" / "det" / "twin_a" and ctx.state_dir.is_dir()
    assert (
        ctx.part_dir("twin_b") == folder.part_dir("det", "twin_b") == folder.root / "parts" / "det" / "twin_b"
    )


def test_default_output_root_is_the_shipped_configs(monkeypatch, tmp_path):
    monkeypatch.delenv("PREFLIGHT_OUTPUT_ROOT", raising=False)
    assert default_output_root() == Path("preflight")
    monkeypatch.setenv("PREFLIGHT_OUTPUT_ROOT", str(tmp_path))
    assert default_output_root() == tmp_path
    assert RunFolder.find("r9") == RunFolder.of(tmp_path, "r9")
    assert RunFolder.find(str(tmp_path)).root == tmp_path.resolve()


def test_gate_outcome_is_computed_and_reported_in_one_place(tmp_path):
    folder = RunFolder.of(tmp_path, "r1")
    code, lines = folder.gate_outcome()
    assert code == 1 and lines[0].startswith(f"gate: no record at {folder.gate_file}")
    folder.write_gate(record("clear"))
    assert folder.gate_outcome() == (0, ["gate: clear (pass)"])
    folder.write_gate(record("blocked", ("s.x: off by 57x",)))
    said: list[str] = []
    assert folder.report_gate(said.append) == 3
    assert said == ["gate: blocked (mismatch)", "  - s.x: off by 57x"]
    folder.gate_file.write_text("{")
    code, lines = folder.gate_outcome()
    assert code == 1 and "unreadable" in lines[0]


def test_records_round_trip_through_the_folder(tmp_path):
    folder = RunFolder.of(tmp_path, "r1")
    assert folder.load_jobs() == {} and folder.result_status("s") == ""
    folder.write_jobs({"s": {"job_id": "7", "state": "COMPLETED"}})
    folder.write_plan({"jobs": {"s": {"kind": "stage"}}})
    result = StageResult.from_checks("s", [])
    folder.write_result("s", result)
    assert folder.load_jobs()["s"]["job_id"] == "7" and folder.load_plan()["jobs"]["s"]["kind"] == "stage"
    assert folder.load_result("s") == result and folder.result_status("s") == result.status
