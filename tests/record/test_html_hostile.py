"""A hostile or careless audit folder: records placed there by hand (not sealed) whose artifact and
profile paths point outside the folder (`//host`, `javascript:`, absolute, `..`, links), a record of a
shape no gate writes, a planted `<record>_files` link and an `index.html` that is a folder. Nothing
outside the audit folder is linked, read or written; the gate and `preflight-status --html` go on."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from omegaconf import OmegaConf

from pipeline.record import audit
from pipeline.record.html import INDEX, page_path, write_html
from pipeline.record.records import Check, StageResult
from pipeline.record.runfolder import RunFolder
from pipeline.run.status import main as status_main
from tests.record.html_support import PNG, make_record, write_profile

SECRET = "SECRET-ROW-outside"


def gate(audit_dir: Path, record) -> Path:
    markdown = audit.write_record(audit_dir, record)
    write_html(audit_dir, markdown)
    return page_path(markdown)


def outside_folder(tmp_path: Path) -> Path:
    """A folder beside the audit folder holding a valid profile whose rows must never reach a page."""
    outside = tmp_path / "outside"
    write_profile(outside, [{"feature": "observation.state", "dim": 0, "name": SECRET}])
    (outside / "x.json").write_text((outside / "profile.json").read_text())
    return outside


def plant(audit_dir: Path, name: str, artifacts: dict[str, str], files: dict[str, str] | None = None) -> Path:
    """A record JSON written by hand into the audit folder: a gate's twin, its paths replaced."""
    data = json.loads(next(audit_dir.glob("*_r1_audit.json")).read_text())
    data.pop("integrity")
    data["run_id"] = name
    data["stages"][1]["artifacts"] = artifacts
    data["files"] = files or {}
    twin = audit_dir / f"2026-12-02_m_d_{name}_audit.json"
    twin.write_text(json.dumps(data))
    return twin


def urls(html: str) -> list[str]:
    return re.findall(r'(?:href|src)="([^"]*)"', html)


def assert_inside(audit_dir: Path) -> None:
    """Every URL of every page is a fragment, `data:`, or relative and resolving inside the folder."""
    root = audit_dir.resolve()
    for page in audit_dir.glob("*.html"):
        html = page.read_text()
        assert SECRET not in html, page
        for url in urls(html):
            if url.startswith("#") or url.startswith("data:"):
                continue
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc and not url.startswith("/"), (page, url)
            path = unquote(parts.path)
            assert ".." not in Path(path).parts, (page, url)
            assert (root / path).resolve().is_relative_to(root), (page, url)


def test_paths_out_of_the_audit_folder_are_never_linked_or_read(tmp_path):
    audit_dir = tmp_path / "audit"
    outside = outside_folder(tmp_path)
    gate(audit_dir, make_record("r1", "2026-12-01T10:00:00+00:00", mismatched=1))
    (audit_dir / "escape").symlink_to(outside, target_is_directory=True)  # a link inside, leading out
    plant(
        audit_dir,
        "hostile",
        {
            "remote": "//evil.example/x.png",
            "script": "javascript:alert(1)",
            "passwd": "/etc/passwd",
            "climb": "../../x",
            "linked": str(audit_dir / "escape" / "profile.png"),
            "profile": "../../../outside/x.json",
            "profile_plot": "//evil.example/p.png",
        },
        files={"/etc/passwd": "../../outside/x.json", "javascript:alert(1)": "escape/profile.png"},
    )
    assert status_main(["--html", str(audit_dir)]) == 0
    assert_inside(audit_dir)
    html = (audit_dir / "2026-12-02_m_d_hostile_audit.html").read_text()
    assert "evil.example" not in "".join(urls(html)) and "javascript" not in "".join(urls(html))
    line = re.search(r'<p class="note" id="not-linked">([^<]*)</p>', html).group(1)
    assert line.startswith("Not linked: 5 file(s) the record names resolve outside the audit folder")
    assert "the plot and profile named by the record resolve outside the audit folder; not shown" in html


def test_a_profile_path_that_climbs_out_through_the_audit_folder_is_not_read(tmp_path):
    """The path starts with the audit folder's own text and climbs out: resolved, it is outside."""
    audit_dir = tmp_path / "audit"
    outside_folder(tmp_path)
    gate(audit_dir, make_record("r1", "2026-12-01T10:00:00+00:00"))
    climb = f"{audit_dir}/../outside/x.json"
    plant(audit_dir, "climb", {"profile": climb})
    plant(audit_dir, "inside", {"profile": "sub/../kept.json"})
    write_profile(audit_dir / "p", [{"feature": "action", "dim": 0, "name": "kept-row"}])
    (audit_dir / "kept.json").write_text((audit_dir / "p" / "profile.json").read_text())
    assert status_main(["--html", str(audit_dir)]) == 0
    assert_inside(audit_dir)
    climbed = (audit_dir / "2026-12-02_m_d_climb_audit.html").read_text()
    assert "the profile named by the record resolves outside the audit folder; not shown" in climbed
    assert "kept-row" in (audit_dir / "2026-12-02_m_d_inside_audit.html").read_text()


def test_a_record_the_index_cannot_read_is_one_line_never_a_failed_gate(tmp_path, capsys):
    audit_dir = tmp_path / "audit"
    gate(audit_dir, make_record("r1", "2026-12-01T10:00:00+00:00"))
    for name, change in (("ints", {"stages": [1]}), ("types", {"created": 5, "fingerprints": [2]})):
        data = json.loads(next(audit_dir.glob("*_r1_audit.json")).read_text())
        (audit_dir / f"2026-12-02_m_d_{name}_audit.json").write_text(json.dumps({**data, **change}))
    page = gate(audit_dir, make_record("r3", "2026-12-03T10:00:00+00:00", mismatched=1))
    assert 'class="banner blocked"' in page.read_text()
    index = (audit_dir / INDEX).read_text()
    assert sorted(re.findall(r'data-run="([^"]+)"', index)) == ["r1", "r1", "r3"]  # "types" is r1's copy
    unreadable = index.split("Unreadable records", 1)[1]
    assert unreadable.count("<li>") == 1 and "2026-12-02_m_d_ints_audit.json</code>: skipped:" in unreadable
    assert (
        "Unreadable records (inspect by hand): 2026-12-02_m_d_types_audit.json"
        in (audit_dir / audit.TIMELINE).read_text()
    )
    assert status_main(["--html", str(audit_dir)]) == 0
    assert "4 record page(s) and the index written" in capsys.readouterr().out
    assert "could not be laid out" in (audit_dir / "2026-12-02_m_d_ints_audit.html").read_text()


def _gate_run(tmp_path: Path, audit_dir: Path, artifacts: dict[str, str]) -> RunFolder:
    """A run folder whose one stage left `artifacts`, ready for `run_gate` in this process."""
    cfg = {
        "run_id": "r1",
        "audit_dir": str(audit_dir),
        "gate": {"unverifiable": "block"},
        "model": {"name": "m", "path": None},
        "dataset": {"name": "d", "path": None},
        "training": {"path": None},
        "container": {"kind": "none", "image": None},
    }
    folder = RunFolder.of(tmp_path / "out", "r1")
    folder.write_config(OmegaConf.create(cfg))
    folder.write_plan({"jobs": {"s": {"kind": "stage"}}})
    row = Check(id="s.a", stage="s", category="units", feature="x", verdict="match", severity="hard")
    folder.write_result("s", StageResult.from_checks("s", [row], artifacts=artifacts))
    return folder


def test_a_planted_files_link_is_refused_and_the_gate_writes_its_record(tmp_path, caplog, capsys):
    from pipeline.run.gate import run_gate

    audit_dir, outside = tmp_path / "audit", tmp_path / "outside"
    audit_dir.mkdir()
    outside.mkdir()
    plot = tmp_path / "plot.png"
    plot.write_bytes(PNG)
    folder = _gate_run(tmp_path, audit_dir, {"plot": str(plot)})
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()  # the stem the gate will choose
    planted = audit_dir / f"{today}_m_d_r1_audit_files"
    planted.symlink_to(outside, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="pipeline.record.audit"):
        assert run_gate(folder.root) == 0
    assert list(outside.iterdir()) == [] and folder.gate_file.exists()
    lines = [r.getMessage() for r in caplog.records if r.name == "pipeline.record.audit"]
    assert len(lines) == 1 and f"{planted} is a symlink (to {outside})" in lines[0]
    markdown = next(audit_dir.glob("*_r1_audit.md")).read_text()
    assert f"(not copied: {audit.md_text(str(planted))} is a symlink" in markdown
    assert_inside(audit_dir)


def test_an_index_html_that_is_a_folder_is_named_as_one(tmp_path, capsys):
    from pipeline.run.gate import run_gate

    audit_dir = tmp_path / "audit"
    (audit_dir / INDEX).mkdir(parents=True)
    folder = _gate_run(tmp_path, audit_dir, {})
    assert run_gate(folder.root) == 1
    assert f"writing {audit_dir / INDEX} failed: it is a folder, not a file" in folder.gate_failure()
