"""Remedies and the corrected training line where people look: the page (under each row, and the line with
its copy button), the markdown record and JUnit, each with a hostile flag value that must show as itself.
Records made in code and written by the audit writer, as a gate writes them; one browser test clicks
the copy button."""

from __future__ import annotations

import dataclasses
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pipeline.record import Rows, StageResult, audit
from pipeline.record.html import page_path, write_html
from pipeline.record.junit import junit_xml
from pipeline.record.remedy import CORRECTED
from tests.record.html_support import console_problems, make_record, missing_browser, start_browser

HOSTILE = '</pre><img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
TYPED = ["lerobot-train", "--policy.path=acme/base", "--dataset.repo_id=acme/data"]
FIXED = [*TYPED, f'--rename_map={{"{HOSTILE}": "observation.images.front"}}']


def remedied_record():
    """make_record's blocked record, its first mismatch with a line remedy carrying the hostile value,
    and the contract's corrected-line row."""
    record = make_record("r1", "2026-12-03T10:00:00+00:00", mismatched=2, command=TYPED)
    contract = record.stages[1]
    remedy = {"kind": "line", "summary": "set the map", "set": {"rename_map": FIXED[-1].split("=", 1)[1]}}
    checks = list(contract.checks)
    checks[0] = dataclasses.replace(checks[0], remedy=remedy)
    checks[1] = dataclasses.replace(checks[1], remedy={"kind": "data", "summary": f"edit {HOSTILE}"})
    evidence = {
        "argv": FIXED,
        "typed": TYPED,
        "cleared": [checks[0].id],
        "remaining": [{"id": checks[1].id, "remedy": checks[1].remedy}],
    }
    row = Rows("contract", "diagnostics")(
        "training.corrected", "training", "mismatch", "1 remains", severity="soft", evidence=evidence
    )
    stages = (record.stages[0], StageResult.from_checks("contract", [*checks, row]))
    return dataclasses.replace(record, stages=stages)


def written(folder: Path) -> tuple[Path, Path]:
    markdown = audit.write_record(folder, remedied_record())
    write_html(folder, markdown)
    return markdown, page_path(markdown)


def test_the_page_shows_each_remedy_and_the_line_escaped(tmp_path: Path) -> None:
    markdown, page = written(tmp_path)
    html = page.read_text()
    assert "<img src=x" not in html and "<script>window.pwned" not in html
    assert "&lt;/pre&gt;&lt;img src=x" in html
    assert html.count('<p class="remedy">') == 2 and 'id="copy-line"' in html
    line = html.split('<pre id="corrected-line">', 1)[1].split("</pre>", 1)[0]
    assert "&lt;script&gt;" in line and "with this line: 1 row(s) cleared, 1 remain" in html
    text = markdown.read_text()
    assert "## Corrected training line" in text and "**Remedy** (line)" in text
    section = text.split("## Corrected training line", 1)[1].split("## Next", 1)[0]
    assert f"```bash\n{shlex.join(FIXED)}\n```" in section  # fenced: shown as typed, never markup
    assert "edit \\</pre\\>\\<img src=x" in section  # a remedy's text escaped as data


def test_junit_names_the_corrected_line_and_each_remedy(tmp_path: Path) -> None:
    root = ET.fromstring(junit_xml(remedied_record()))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["corrected_line"] == shlex.join(FIXED)
    failure = next(root.iter("failure"))
    assert '"remedy"' in (failure.text or "") and "rename_map" in (failure.text or "")
    assert any(c.get("name") == CORRECTED for c in root.iter("testcase"))


@pytest.mark.browser
@pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))
def test_the_copy_button_copies_the_line_as_typed_and_nothing_runs(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    _, page = written(tmp_path / "audit_logs")
    driver = start_browser(tmp_path / "profile")
    try:
        driver.get(page.as_uri())
        shown = driver.find_element(By.ID, "corrected-line").get_attribute("textContent")
        assert shown == shlex.join(FIXED)
        driver.find_element(By.ID, "copy-line").click()
        said = driver.find_element(By.ID, "copy-said")
        driver.implicitly_wait(0)
        for _ in range(50):
            if said.text:
                break
            driver.execute_script("return 1")
        assert said.text in ("copied", "copy refused: select the line")
        assert driver.execute_script("return window.pwned") is None
        assert console_problems(driver) == []
    finally:
        driver.quit()
