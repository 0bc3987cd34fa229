"""The record's HTML page and the history's index as files: what they show, what they never show, and
`preflight-status --html`. Records made in code and written by the audit writer, as a gate writes them;
the browser's view of the same pages is test_html_browser.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.record import audit, history
from pipeline.record.html import INDEX, page_path, rebuild_html, write_html
from pipeline.record.html import index as index_module
from pipeline.run.status import main as status_main
from tests.record.html_support import PNG, make_record, write_profile

KEY = b"team-secret-key-0123456789"


def gate(audit_dir: Path, record, key: bytes | None = None) -> Path:
    """The gate's two calls: the audit record, then its page and the index."""
    markdown = audit.write_record(audit_dir, record, key=key)
    write_html(audit_dir, markdown, key=key)
    return page_path(markdown)


def visible(html: str) -> str:
    """The page's text outside its own style and script."""
    return re.sub(r"<(style|script)\b.*?</\1>", "", html, flags=re.S)


def test_a_page_beside_each_record_and_an_index_listing_them(tmp_path):
    first = gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00"))
    second = gate(tmp_path, make_record("r2", "2026-12-03T10:00:00+00:00", mismatched=3))
    assert first.name.endswith("_audit.html") and first.with_suffix(".md").is_file()
    page = second.read_text()
    assert 'class="banner blocked"' in page and page.count('<details class="finding') == 3
    assert "How to fix:</b> Resolve contract.layout.dim:observation.state.0, or waive it" in page
    assert page.count('<tr class="row') == 13  # every row in the filtered table
    index = (tmp_path / INDEX).read_text()
    hrefs = re.findall(r'<a href="([^"]+_audit\.html)">', index)
    assert hrefs == [second.name, first.name]  # newest first, each page linked
    assert "<details" not in index and len(index) < 20_000  # linked, never inlined


def test_the_diff_names_the_changed_input_and_the_rows_that_moved(tmp_path):
    gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00"))
    gate(tmp_path, make_record("other", "2026-12-02T10:00:00+00:00", dataset="another_set", mismatched=1))
    page = gate(
        tmp_path,
        make_record("r3", "2026-12-03T10:00:00+00:00", mismatched=3, dataset_print="sha256:" + "e" * 64),
    ).read_text()
    assert 'id="previous-link" href="2026-12-01_act_so101_so101_pick_r1_audit.html"' in page
    headline = re.search(r'<p class="headline">(.*?)</p>', page).group(1)
    assert headline.startswith("blocked now, clear on 2026-12-01 (run r1): dataset changed (sha256:ddd")
    assert "3 row(s) went from match to mismatch" in headline
    assert page.count('<span class="badge v-mismatch">mismatch</span></td></tr>') >= 3


def test_a_training_command_is_its_own_lineage(tmp_path):
    command = ["lerobot-train", "--policy.type=act"]
    gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00"))
    page = gate(tmp_path, make_record("r2", "2026-12-02T10:00:00+00:00", command=command)).read_text()
    assert 'id="previous-link"' not in page  # same model and dataset, but r1 had no command
    later = gate(tmp_path, make_record("r3", "2026-12-03T10:00:00+00:00", command=command)).read_text()
    assert 'href="2026-12-02_act_so101_so101_pick_r2_audit.html"' in later
    assert "Previous record of the same training command" in later


def test_an_untrusted_record_is_marked_and_never_the_previous(tmp_path):
    gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00"))
    twin = next(tmp_path.glob("*_r1_audit.json"))
    data = json.loads(twin.read_text())
    data["gate"] = "clear"
    data["reasons"] = ["edited"]
    twin.write_text(json.dumps(data))  # edited after it was written: its digest no longer matches
    page = gate(tmp_path, make_record("r2", "2026-12-02T10:00:00+00:00", mismatched=1)).read_text()
    assert 'id="previous-link"' not in page
    index = (tmp_path / INDEX).read_text()
    row = next(r for r in index.split("<tr ") if 'data-run="r1"' in r)
    assert "untrusted-row" in row and "not trusted: edited after it was written" in row


def test_payloads_in_names_tasks_and_features_are_text(tmp_path):
    script, img = "<script>alert(1)</script>", '"><img src=x onerror=alert(2)>'
    record = make_record(
        "r1", "2026-12-01T10:00:00+00:00", mismatched=2, feature=script, task=img, model=img, dataset=script
    )
    page = gate(tmp_path, record).read_text()
    for html in (page, (tmp_path / INDEX).read_text()):
        shown = visible(html)
        assert "<script>alert" not in shown and "<img src=x" not in shown and "onerror=alert(2)>" not in shown
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
        assert "\\u003cscript\\u003e" in html or "&lt;img" in shown  # JSON for the script: escaped too


def test_the_hmac_key_never_reaches_a_page(tmp_path):
    page = gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00", mismatched=1), key=KEY)
    for path in (page, tmp_path / INDEX):
        assert KEY.decode() not in path.read_text()
    assert history.verify(tmp_path, KEY)[0].problem is None


def profile(tmp_path: Path, rows: list[dict]) -> dict[str, str]:
    return write_profile(tmp_path / "run", rows)


def test_the_dataset_profile_shows_where_the_contract_left_one(tmp_path):
    rows = [
        {"feature": "observation.state", "dim": 0, "name": "shoulder", "kind": "continuous", "min": -1.5,
         "max": 1.25, "at_limits": 0.0, "held_longest": 3, "step_p50": 0.01, "step_p99": 0.2},
        {"feature": "action", "dim": 6, "name": "gripper", "kind": "discrete", "levels": [0, 1],
         "extra": "x"},
    ]  # fmt: skip
    audit_dir = tmp_path / "audit"
    page = gate(audit_dir, make_record("r1", "2026-12-01T10:00:00+00:00", artifacts=profile(tmp_path, rows)))
    html = page.read_text()
    section = html.split('<section id="profile">', 1)[1].split("</section>", 1)[0]
    heads = re.findall(r"<th>([^<]*)</th>", section)
    assert heads[:3] == ["feature", "dim", "name"] and heads[-1] == "extra" and "levels" in heads
    assert "shoulder" in section and "[0, 1]" in section and "21 episode(s)" in section
    plot = re.search(r'<img src="([^"]+)" alt="dataset profile plot"', section).group(1)
    assert (audit_dir / plot).read_bytes() == PNG  # the copy beside the record, linked relatively
    plain = gate(tmp_path / "plain", make_record("r2", "2026-12-01T10:00:00+00:00")).read_text()
    assert 'id="profile"' not in plain


def test_a_profile_that_is_not_one_is_a_line_not_a_failed_page(tmp_path):
    artifacts = profile(tmp_path, [])
    del artifacts["profile_plot"]  # a profile without its plot
    Path(artifacts["profile"]).write_text(json.dumps({"schema": "other/9", "rows": []}))
    html = gate(tmp_path / "audit", make_record("r1", "2026-12-01T10:00:00+00:00", artifacts=artifacts))
    assert (
        "schema is &#39;other/9&#39;, expected &#39;preflight.profile/1&#39;; not shown" in html.read_text()
    )


def test_a_fourth_source_gets_its_column_and_its_row_in_the_sources(tmp_path):
    """A twin whose rows carry `deployed` (D) and whose sources name it: shown as every other source."""
    gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00", mismatched=1))
    twin = next(tmp_path.glob("*_audit.json"))
    data = json.loads(twin.read_text())
    data["stages"][1]["checks"][0]["deployed"] = "[7] from the robot"
    data["sources"]["deployed"] = {"kind": "robot", "command": ["lerobot-record", "--robot.type=so101"]}
    twin.write_text(json.dumps(data))
    rebuild_html(tmp_path)
    html = page_path(twin.with_suffix(".md")).read_text()
    assert "<th>deployed (D)</th>" in html and "[7] from the robot" in html
    assert "<th>deployed</th>" in html and "lerobot-record --robot.type=so101" in html
    clean = gate(tmp_path / "clean", make_record("r2", "2026-12-01T10:00:00+00:00")).read_text()
    assert "deployed (D)" not in clean


def test_the_index_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(index_module, "MAX_ROWS", 3)
    for day in range(1, 6):
        gate(tmp_path, make_record(f"r{day}", f"2026-12-0{day}T10:00:00+00:00"))
    index = (tmp_path / INDEX).read_text()
    assert re.findall(r'data-run="(r\d)"', index) == ["r5", "r4", "r3"]
    assert "2 older record(s) not listed" in index


def test_preflight_status_html_renders_every_page_again(tmp_path, capsys):
    for day in (1, 2):  # records written before pages existed
        markdown = audit.write_record(tmp_path, make_record(f"r{day}", f"2026-12-0{day}T10:00:00+00:00"))
    assert not page_path(markdown).exists()
    page = gate(tmp_path, make_record("r3", "2026-12-03T10:00:00+00:00"))
    assert f'id="previous-link" href="{markdown.name}"' in page.read_text()  # no page yet: its markdown
    assert status_main(["--html", str(tmp_path)]) == 0
    assert f"{tmp_path / INDEX}: 3 record page(s) and the index written" in capsys.readouterr().out
    assert len(list(tmp_path.glob("*_audit.html"))) == 3
    assert f'id="previous-link" href="{page_path(markdown).name}"' in page.read_text()
    assert status_main(["--html", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("status: ") and "not a folder" in err and "\n" not in err.strip()


def test_a_fifo_and_a_device_link_in_the_history_are_named_never_read(tmp_path):
    """Read as the history reads its files: a FIFO named like a twin would block a plain open forever."""
    gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00"))
    os.mkfifo(tmp_path / "2026-12-03_m_d_fifo_audit.json")
    (tmp_path / "2026-12-03_m_d_zero_audit.json").symlink_to("/dev/zero")
    script = f"from pipeline.record.html import rebuild_html; print(rebuild_html({str(tmp_path)!r})[0])"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    unreadable = (tmp_path / INDEX).read_text().split("Unreadable records", 1)[1]
    assert "fifo_audit.json</code>: unreadable: is a FIFO" in unreadable
    assert "zero_audit.json</code>: unreadable: a symlink to /dev/zero" in unreadable


def test_a_record_the_renderer_cannot_lay_out_gets_a_page_saying_so(tmp_path, monkeypatch):
    from pipeline.record.html import write

    def broken(*args):
        raise TypeError("a shape this renderer does not know")

    monkeypatch.setattr(write, "page_context", broken)
    page = gate(tmp_path, make_record("r1", "2026-12-01T10:00:00+00:00")).read_text()
    assert "could not be laid out as a page (TypeError: a shape this renderer does not know)" in page
    assert f'href="{page_path(next(tmp_path.glob("*_audit.md"))).stem}.md"' in page
    assert 'data-run="r1"' in (tmp_path / INDEX).read_text()


def test_many_changed_inputs_are_named_not_spelled_out():
    from pipeline.record.html.diff import headline

    names = ["stages.tf.models[0].path", "model", "dataset", "training", "cache", "release", "config"]
    inputs = [{"input": n, "before": "sha256:" + "1" * 64, "now": "sha256:" + "2" * 64} for n in names]
    now, then = {"gate": "blocked"}, {"gate": "clear", "created": "2026-12-01T10:00:00", "run_id": "r1"}
    text = headline(now, then, inputs, [])
    assert text == (
        "blocked now, clear on 2026-12-01 (run r1): 6 inputs changed (cache, dataset, model, release, "
        "training, and 1 more), and no row changed its verdict."
    )
    assert "same inputs, other software (config)" in headline(now, then, inputs[-1:], [])
