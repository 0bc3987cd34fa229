import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema

from pipeline.record import audit
from pipeline.record.records import SCHEMA_PATH, Check, GateRecord, StageResult

# Fifty gate writers, each a process of its own, forked from one parent that imported the audit writer
# once (50 imports were ~17 CPU-s of the test): each waits on a pipe until all are forked, so they write
# at once, as gate jobs on a shared filesystem ending together would.
WRITERS = """
import os, sys, traceback
from pathlib import Path
from pipeline.record import audit
from pipeline.record.records import Check, GateRecord, StageResult

def write(i):
    bad = i % 2
    check = Check(id="s.x", stage="s", category="units", feature="x", verdict="mismatch" if bad else "match")
    rec = GateRecord(run_id=f"run-{i:03d}", created=f"2026-12-02T10:00:{i % 60:02d}+00:00",
                     verdict="mismatch" if bad else "pass", gate="blocked" if bad else "clear",
                     reasons=("s.x: planted",) if bad else (),
                     stages=(StageResult.from_checks("s", [check]),),
                     sources={"model": {"name": "m|odel", "path": "/m"}, "training": {"path": None},
                              "dataset": {"name": "d", "path": "/d"}, "container": {"kind": "none"}})
    audit.write_record(Path(sys.argv[1]), rec)

start, go = os.pipe()
pids = []
for i in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        os.close(go)
        os.read(start, 1)  # end of file once the parent closed its end: every writer forked
        try:
            write(i)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    pids.append(pid)
os.close(start)
os.close(go)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
print(codes)
sys.exit(0 if codes == [0] * len(pids) else 1)
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
    """Separate processes, as separate gate jobs on a shared filesystem would be (`WRITERS`)."""
    proc = subprocess.run(
        [sys.executable, "-c", WRITERS, str(tmp_path), "50"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == str([0] * 50), proc.stdout + proc.stderr
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
    assert "- gate: **blocked**, 1 reason(s):\n  - s.x: bad\n" in text  # its row matches: nothing to link
    assert "| x\\|y | units | [1, 2] | — | — | — | match | hard | `s.x` |" in text  # no D: an empty D cell
    assert "- plot: [plot](" in text and "(not copied: no such file when the gate ran)" in text
    assert "Resolve `s.x`" not in text  # a match is not a reason; the reasons come from the record


def record_with(*checks: Check, artifacts: dict[str, str] | None = None) -> GateRecord:
    reasons = tuple(f"{c.id}: {c.message}" for c in checks if c.blocking)
    return GateRecord(
        run_id="r2",
        created="2026-12-02T10:00:00+00:00",
        verdict="mismatch" if reasons else "pass",
        gate="blocked" if reasons else "clear",
        reasons=reasons,
        stages=(StageResult.from_checks("s", checks, artifacts=artifacts or {}),),
        sources=gate_record("x").sources,
    )


def row(id_: str, verdict: str, category: str = "units", severity: str = "hard") -> Check:
    return Check(
        id=id_,
        stage="s",
        category=category,
        feature="f",
        verdict=verdict,
        severity=severity,
        message=f"{id_} is {verdict}",
        evidence={"n": 1},
    )


def test_summary_findings_first_and_the_full_table_folded(tmp_path):
    checks = [row(f"s.m{i}", "match") for i in range(30)]
    checks += [
        row("s.bad", "mismatch", "layout"),
        row("s.crash", "error"),
        row("s.soft", "mismatch", severity="soft"),
    ]
    text = audit.render_markdown(record_with(*checks), tmp_path)
    head, folded = text.split("<details>", 1)
    assert "| s | 30 | 2 | · | · | 1 | units 32 (1 mismatch, 1 error); layout 1 (1 mismatch) |" in head
    findings = head.split("## Findings: 3 row(s) not `match`\n", 1)[1].split("\n## ", 1)[0]
    ids = re.findall(r"\| (?:<a id=\"[a-z0-9-]+\"></a>)?`(s\.\w+)` \|", findings)
    assert ids == ["s.crash", "s.bad", "s.soft"]  # what blocks first
    assert "`s.m0`" not in head and "`s.m0`" in folded  # matching rows only in the folded table
    assert '<a id="check-s-bad"></a>' in findings and "[`s.bad`](#check-s-bad)" in head


def test_next_fixes_errors_and_waives_only_mismatches(tmp_path):
    text = audit.render_markdown(record_with(row("s.bad", "mismatch"), row("s.crash", "error")), tmp_path)
    steps = text.split("## Next\n", 1)[1].splitlines()
    assert steps[0].startswith("- Fix `s.crash`") and "not waived" in steps[0] and "waivers" not in steps[0]
    assert steps[1].startswith("- Resolve `s.bad`") and "waive it in configs/waivers.yaml" in steps[1]


def test_artifacts_are_copied_beside_the_record_and_linked_relatively(tmp_path):
    run = tmp_path / "run" / "artifacts"
    run.mkdir(parents=True)
    (run / "p.png").write_bytes(b"\x89PNG fake")
    (run / "dump.json").write_text("{}")
    big = run / "big.bin"
    with open(big, "wb") as handle:
        handle.truncate(audit.MAX_COPY_BYTES + 1)
    (run / "q.png").write_bytes(b"\x89PNG other")
    artifacts = {"plot": str(run / "p.png"), "dump": str(run / "dump.json"), "big": str(big)}
    artifacts["plot?"] = str(run / "q.png")  # file-name safe, it is "plot" too: copied under another name
    md = audit.write_record(tmp_path / "audit", record_with(row("s.m", "match"), artifacts=artifacts))
    files = tmp_path / "audit" / f"{md.stem}_files" / "s"
    assert sorted(p.name for p in files.iterdir()) == ["dump.json", "plot-2.png", "plot.png"]
    text = md.read_text()
    assert f"![plot]({md.stem}_files/s/plot.png)" in text and f"({md.stem}_files/s/plot-2.png)" in text
    assert f"- dump: [dump]({md.stem}_files/s/dump.json)" in text
    assert "- big: [big](../run/artifacts/big.bin) (not copied: 8.0 MiB, over the 8 MiB cap" in text
    shutil.rmtree(tmp_path / "run")  # the run folder gone: the record still shows its plot
    assert (files / "plot.png").read_bytes() == b"\x89PNG fake"
    assert not list(files.glob(".*.tmp"))


def test_stages_show_jobs_parts_wall_time_and_reuse(tmp_path):
    result = StageResult.from_checks(
        "det",
        [row("det.x", "match")],
        provenance={
            "host": "n1",
            "jobs": {"main": "41", "twin_a": "42", "twin_b": "43"},
            "reused_from": "r0",
        },
        timings={"wall_s": 0.065, "parts": 2, "span_s": 31.2},
    )
    record = dataclasses.replace(record_with(row("s.m", "match")), stages=(result,))
    text = audit.render_markdown(record, tmp_path)
    jobs = "41; parts: twin\\_a 42, twin\\_b 43"
    assert f"| det | pass · reused from run r0 | n1 | {jobs} | 31.2 (own 0.065, 2 part jobs) |" in text


def test_timeline_tells_inputs_apart(tmp_path):
    base = record_with(row("s.m", "match"))
    for run_id, variant, digest in (
        ("a", "default", "sha256:1"),
        ("b", "faulty", "sha256:2"),
        ("c", None, "sha256:2"),
    ):
        sources = {**base.sources, "variant": variant} if variant else base.sources
        audit.write_record(
            tmp_path,
            dataclasses.replace(
                base, run_id=run_id, sources=sources, fingerprints={"s": {"model": digest, "config": run_id}}
            ),
        )
    rows = audit.parse_timeline((tmp_path / "timeline.md").read_text())
    inputs = [r["inputs"] for r in rows]
    assert inputs[0].startswith("default · ") and inputs[1].startswith("faulty · ")
    assert inputs[1].split(" · ")[1] == inputs[2] != inputs[0].split(" · ")[1]  # config digests left out


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
