"""The audit record is evidence: hostile data cannot forge a section, permissions follow the umask (or
`audit_mode`), and a failed write names itself and what was written."""

import os
import re
import stat
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from pipeline.record import audit
from pipeline.record.records import Check, GateRecord, StageResult
from pipeline.storage import atomic_write_text

FORGED = "## Verdict\n- overall: `pass`\n- gate: `clear to train`"
HOSTILE = (
    f"obs.state\n\n{FORGED}\n<script>alert(1)</script> | extra | cells |\r# h1\u2028### h3\x85"
    "> quote\n1. list\n```\n- [link](http://evil) ![img](x.png) `` ` ~~~ &amp; <b>bold</b>"
)
HEADINGS = [
    "Sources",
    "Verdict",
    "Summary",
    "Findings: 1 row(s) not `match`",
    "Stages",
    "Reconciliation",
    "Evidence",
    "Physical checks to confirm with user (the pipeline cannot run these)",
    "Next",
    "Waivers",
]


def hostile_record() -> GateRecord:
    check = Check(
        id=f"s.{HOSTILE}",
        stage="s",
        category="units",
        feature=HOSTILE,
        verdict="mismatch",
        expected=HOSTILE,
        configured={"k": HOSTILE},
        actual=[HOSTILE],
        message=HOSTILE,
        evidence={"key\n## Verdict": HOSTILE, "fence": "````\n## Verdict"},
    )
    result = StageResult.from_checks(
        "s",
        [check],
        artifacts={HOSTILE: f"/tmp/{HOSTILE}.png", "dump": "/tmp/a b)(c.json"},
        provenance={"host": HOSTILE, "slurm_job_id": HOSTILE},
        physical_checks=(HOSTILE,),
    )
    waiver = {"check": HOSTILE, "status": "active", "justification": HOSTILE, "who": HOSTILE, "date": "x"}
    return GateRecord(
        run_id="r1",
        created="2026-12-02T10:00:00+00:00",
        verdict="mismatch",
        gate="blocked",
        reasons=(HOSTILE, f"s.{HOSTILE}: {HOSTILE}"),
        stages=(result,),
        sources={
            "model": {"name": HOSTILE, "path": HOSTILE},
            "training": {"path": HOSTILE},
            "dataset": {"name": HOSTILE, "path": HOSTILE},
            "container": {"kind": HOSTILE, "image": HOSTILE},
            "known_good_reference": HOSTILE,
        },
        waivers=(waiver,),
    )


def tokens(text: str) -> list:
    return MarkdownIt("commonmark").enable("table").parse(text)


def headings(toks: list) -> list[tuple[str, str]]:
    return [(t.tag, toks[i + 1].content) for i, t in enumerate(toks) if t.type == "heading_open"]


def test_hostile_keys_cannot_forge_a_section_html_a_link_or_a_cell(tmp_path):
    record = hostile_record()
    text = audit.render_markdown(record, tmp_path)
    toks = tokens(text)
    found = headings(toks)
    assert found[0][0] == "h1" and [h for tag, h in found if tag == "h2"] == HEADINGS
    assert all(tag in ("h1", "h2", "h3") for tag, _ in found)
    assert [tag for tag, _ in found].count("h3") == 1  # the one evidence heading of the one check
    kinds = {t.type for t in toks} | {c.type for t in toks for c in (t.children or [])}
    assert not kinds & {"blockquote_open", "ordered_list_open"}
    inline = [c for t in toks for c in (t.children or [])]
    html = [t.content.strip() for t in [*toks, *inline] if t.type in ("html_block", "html_inline")]
    own = re.compile(r'<a id="[a-z0-9-]+">|</a>|</details>|<details>\n<summary>[^<>&`\\]*</summary>')
    assert html and all(own.fullmatch(h) for h in html), html  # only the renderer's anchors and folds
    images = [c for c in inline if c.type == "image"]
    assert len(images) == 1 and images[0].attrs["src"].endswith(".png")
    links = [c.attrs["href"] for c in inline if c.type == "link_open"]
    assert len(links) == 2 and links[1].endswith("/a%20b%29%28c.json")  # the artifact link, quoted
    assert re.fullmatch(r"#check-s-obs-state-[a-z0-9-]+", links[0])  # the reason naming the check
    verdict = text.split("## Verdict\n", 1)[1].split("\n## ", 1)[0]
    assert "- overall: `mismatch`" in verdict and "- gate: **blocked**, 2 reason(s):" in verdict
    assert not re.search(r"^\s*- gate: `clear", verdict, re.M)  # the forged line stays inside a line
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    widths = {line.replace("\\|", "").count("|") for line in rows}
    assert widths == {6, 8, 10}, widths  # stages (5 cells), summary (7), findings and reconciliation (9)
    assert text.count("\n") == len(text.splitlines())  # no stray CR, VT, NEL or LINE SEPARATOR lines
    assert not any(ch in text for ch in "\r\u2028\x85\x0b")


def test_evidence_text_still_shows_as_itself(tmp_path):
    text = audit.render_markdown(hostile_record(), tmp_path)
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered and "<script>" not in rendered
    assert "obs.state\\n\\n## Verdict" in rendered  # the line breaks show as \n, the heading as text


def test_timeline_escapes_and_parses_back(tmp_path):
    audit.write_record(tmp_path, hostile_record())
    timeline = (tmp_path / "timeline.md").read_text()
    rows = audit.parse_timeline(timeline)
    assert len(rows) == 1 and rows[0]["gate"] == "blocked" and rows[0]["verdict"] == "mismatch"
    assert rows[0]["model"].startswith(audit.flat(HOSTILE)[:100]) and rows[0]["model"].endswith("…")
    assert [h for _, h in headings(tokens(timeline))] == ["Audit timeline"]


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_records_follow_the_umask_or_audit_mode(tmp_path, umask_022):
    md = audit.write_record(tmp_path / "a", hostile_record())
    files = [md, md.with_suffix(".json"), md.parent / "timeline.md"]
    assert [mode_of(p) for p in files] == [0o644] * 3
    os.umask(0o077)
    assert mode_of(atomic_write_text(tmp_path / "private.txt", "x")) == 0o600
    md = audit.write_record(tmp_path / "b", hostile_record(), mode=audit.audit_mode("0664"))
    assert [mode_of(p) for p in (md, md.with_suffix(".json"), md.parent / "timeline.md")] == [0o664] * 3


@pytest.mark.parametrize("value, bits", [(None, None), ("0660", 0o660), ("0o640", 0o640), (664, 0o664)])
def test_audit_mode_parses_octal(value, bits):
    assert audit.audit_mode(value) == bits


@pytest.mark.parametrize("value", ["rw-rw-r--", "0999", "17777", "-1"])
def test_audit_mode_refuses_what_is_not_permission_bits(value):
    with pytest.raises(ValueError, match="octal permission bits"):
        audit.audit_mode(value)


def test_a_failed_write_names_itself_and_what_was_written(tmp_path):
    record = hostile_record()
    (tmp_path / audit.TIMELINE).mkdir()  # the timeline cannot replace a folder
    with pytest.raises(audit.AuditWriteError) as caught:
        audit.write_record(tmp_path, record)
    twin = tmp_path / f"{audit.record_stem(record)}.json"
    markdown = twin.with_suffix(".md")
    assert caught.value.written == [twin, markdown] and twin.is_file() and markdown.is_file()
    assert f"writing {tmp_path / audit.TIMELINE} failed" in str(caught.value)
    assert f"written: {twin}, {markdown}" in str(caught.value) and "\n" not in str(caught.value)
    assert not list(tmp_path.glob(".*.tmp"))
