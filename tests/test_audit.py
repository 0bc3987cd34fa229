import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from pipeline import audit
from pipeline.records import SCHEMA_PATH, Check, GateRecord, StageResult

WRITER = """
import sys
from pathlib import Path
from pipeline import audit
from pipeline.records import Check, GateRecord, StageResult
i = int(sys.argv[2])
check = Check(id="s.x", stage="s", category="units", feature="x", verdict="mismatch" if i % 2 else "match")
rec = GateRecord(run_id=f"run-{i:03d}", created=f"2026-12-02T10:00:{i % 60:02d}+00:00",
                 verdict="mismatch" if i % 2 else "pass", gate="blocked" if i % 2 else "clear",
                 reasons=("s.x: planted",) if i % 2 else (), stages=(StageResult.from_checks("s", [check]),),
                 sources={"model": {"name": "m|odel", "path": "/m"}, "training": {"path": None},
                          "dataset": {"name": "d", "path": "/d"}, "container": {"kind": "none"}})
audit.write_record(Path(sys.argv[1]), rec)
"""


def gate_record(run_id: str, gate: str = "clear") -> GateRecord:
    check = Check(
        id="s.x",
        stage="s",
        category="units",
        feature="x|y",
        verdict="match",
        expected=[1, 2],
        message="line one\nline two",
        evidence={"path": "/data"},
    )
    return GateRecord(
        run_id=run_id,
        created="2026-12-02T10:00:00+00:00",
        verdict="pass",
        gate=gate,
        reasons=() if gate == "clear" else ("s.x: bad",),
        stages=(StageResult.from_checks("s", [check], artifacts={"plot": "/tmp/p.png"}),),
        sources={
            "model": {"name": "m", "path": "/m"},
            "training": {"path": "/t.yaml"},
            "dataset": {"name": "d", "path": "/d"},
            "container": {"kind": "none"},
        },
    )


def test_fifty_concurrent_gates_lose_no_entry(tmp_path):
    """Separate processes, as separate gate jobs on a shared filesystem would be."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(i)]) for i in range(50)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    rows = audit.parse_timeline((tmp_path / "timeline.md").read_text())
    assert sorted(r["run"] for r in rows) == sorted(f"`run-{i:03d}`" for i in range(50))
    assert [r["created"] for r in rows] == sorted(r["created"] for r in rows)
    assert len(list(tmp_path.glob("*_audit.md"))) == 50
    assert not list(tmp_path.glob(".*.tmp"))
    schema = json.loads(SCHEMA_PATH.read_text())
    for path in tmp_path.glob("*_audit.json"):
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_markdown_record_follows_the_template(tmp_path):
    path = audit.write_record(tmp_path, gate_record("r1", gate="blocked"))
    text = path.read_text()
    assert path.name == "2026-12-02_m_d_r1_audit.md"
    for heading in (
        "## Sources",
        "## Verdict",
        "## Reconciliation",
        "## Evidence",
        "## Physical checks to confirm with user",
        "## Next",
    ):
        assert heading in text
    assert "gate: `blocked — s.x: bad`" in text
    assert "| x\\|y | units | [1, 2] | — | — | match | hard | `s.x` |" in text
    assert "![plot](../../tmp/p.png)" in text or "![plot](" in text
    assert "Resolve `s.x`" not in text  # a match is not a reason; the reasons come from the record


def test_rebuild_timeline_repairs_a_deleted_or_corrupt_index(tmp_path):
    for i in range(3):
        audit.write_record(tmp_path, gate_record(f"r{i}"))
    (tmp_path / "timeline.md").write_text("garbage | | |")
    (tmp_path / "2026-12-02_x_y_bad_audit.json").write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.audit", "rebuild-timeline", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "3 record(s)" in proc.stdout
    text = (tmp_path / "timeline.md").read_text()
    assert len(audit.parse_timeline(text)) == 3
    assert "Unreadable records (inspect by hand): 2026-12-02_x_y_bad_audit.json" in text


def test_label_is_file_name_safe():
    assert audit.label({"name": None, "path": "/ckpt/pi05 base/"}) == "pi05-base"
    assert audit.label({"name": "../../etc", "path": None}) == "etc"
    assert audit.label({"name": None, "path": None}) == "none"


def test_timeline_row_escapes_nothing_it_cannot_parse(tmp_path):
    audit.write_record(tmp_path, gate_record("r|1"))
    assert Path(tmp_path / "timeline.md").exists()
