"""The index a gate updates from each record's kept summary (`index.rows.json`): unchanged twins are
not read again, a new or changed twin is summarized once, trust is decided afresh at each update, and
`preflight-status --html` summarizes every twin again. Records made in code, written by the audit
writer as a gate writes them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pipeline.record import audit
from pipeline.record.html import INDEX, rebuild_html, write_html
from pipeline.record.html.summaries import SUMMARIES
from tests.record.html_support import make_record


def gate(audit_dir: Path, run_id: str, day: int, **kwargs) -> Path:
    markdown = audit.write_record(
        audit_dir, make_record(run_id, f"2026-12-{day:02d}T10:00:00+00:00", **kwargs)
    )
    write_html(audit_dir, markdown)
    return markdown


def runs(audit_dir: Path) -> list[str]:
    return re.findall(r'data-run="([^"]+)"', (audit_dir / INDEX).read_text())


def plant(audit_dir: Path, twin: Path, model: str, **cells: str) -> None:
    """Rewrite one kept summary's cells (its stamp untouched): shown only if the summary is used."""
    kept = json.loads((audit_dir / SUMMARIES).read_text())
    kept["rows"][twin.name]["row"].update(model=model, **cells)
    (audit_dir / SUMMARIES).write_text(json.dumps(kept))


def test_a_gate_reads_only_new_or_changed_twins(tmp_path):
    first = gate(tmp_path, "r1", 1)
    gate(tmp_path, "r2", 2)
    kept = json.loads((tmp_path / SUMMARIES).read_text())
    assert sorted(kept["rows"]) == sorted(p.name for p in tmp_path.glob("*_audit.json"))
    plant(tmp_path, first.with_suffix(".json"), "kept_summary_model")
    gate(tmp_path, "r3", 3)
    index = (tmp_path / INDEX).read_text()
    assert runs(tmp_path) == ["r3", "r2", "r1"]
    assert "kept_summary_model" in index  # r1's twin was not read again: its stamp still matches
    twin = first.with_suffix(".json")
    os.utime(twin, ns=(1, 1))  # the twin "changed": summarized again from the file
    gate(tmp_path, "r4", 4)
    assert "kept_summary_model" not in (tmp_path / INDEX).read_text()
    assert runs(tmp_path) == ["r4", "r3", "r2", "r1"]


def test_trust_is_decided_at_each_update_and_a_bad_summaries_file_is_rebuilt(tmp_path):
    gate(tmp_path, "r1", 1)
    second = gate(tmp_path, "r2", 2)
    gate(tmp_path, "r3", 3)
    second.with_suffix(".json").unlink()  # r3's twin (unchanged, its summary kept) now names a gap
    gate(tmp_path, "r4", 4)
    assert runs(tmp_path) == ["r4", "r3", "r1"]
    assert "not trusted: chain gap" in (tmp_path / INDEX).read_text()  # this update's verify decides
    (tmp_path / SUMMARIES).write_text('{"version": 1, "rows": {"x": [1]}, ')  # not JSON
    gate(tmp_path, "r5", 5)
    assert runs(tmp_path) == ["r5", "r4", "r3", "r1"]
    assert json.loads((tmp_path / SUMMARIES).read_text())["version"] == 1  # written again, whole


def test_an_unreadable_record_stays_one_line_and_status_rebuilds_every_summary(tmp_path):
    first = gate(tmp_path, "r1", 1)
    bad = tmp_path / "2026-12-02_m_d_bad_audit.json"
    body = json.loads(first.with_suffix(".json").read_text())
    bad.write_text(json.dumps({**body, "run_id": "bad", "stages": [1]}))
    gate(tmp_path, "r3", 3)
    unreadable = (tmp_path / INDEX).read_text().split("Unreadable records", 1)[1]
    assert bad.name in unreadable and runs(tmp_path) == ["r3", "r1"]
    plant(tmp_path, first.with_suffix(".json"), "kept_summary_model")
    pages, index = rebuild_html(tmp_path)
    assert pages == 3 and "kept_summary_model" not in index.read_text()  # every twin summarized again
    assert bad.name in index.read_text().split("Unreadable records", 1)[1]


def test_a_summary_that_says_another_verdict_than_its_record_is_redone(tmp_path):
    blocked = gate(tmp_path, "r1", 1, mismatched=2)
    plant(tmp_path, blocked.with_suffix(".json"), "forged_model", verdict="pass", gate="clear")
    gate(tmp_path, "r2", 2)
    index = (tmp_path / INDEX).read_text()
    assert "forged_model" not in index  # summarized again from the twin the history verified
    assert re.search(r'data-run="r1"[^>]*data-verdict="mismatch" data-gate="blocked"', index)
