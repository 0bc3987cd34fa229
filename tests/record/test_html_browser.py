"""The pages in a real browser (headless Chromium, the system's, through Selenium): the faulty demo's page,
a clear launch's page and the index; a finding clicked open, the table filtered, the index sorted, the
diff link followed; over file:// and behind `python -m http.server`. Every test ends with a console
without warnings or errors and no request that leaves the machine (Chrome's own network events).

The faulty demo's launch is the session's (tests/conftest.py `faulty`), copied, with an earlier clear
record of the same model and dataset added through the audit writer, so its page has a previous record.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.record import audit
from pipeline.record.html import INDEX, page_path, rebuild_html
from tests.conftest import FAULTY_FULL_GROUP as GROUP
from tests.record.html_support import console_problems, missing_browser, requested_urls, start_browser

WHY = missing_browser()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.xdist_group(GROUP),
    pytest.mark.skipif(WHY is not None, reason=str(WHY)),
]
SCREENSHOT = Path(__file__).parents[2] / "docs" / "audit_page.png"
# the browser's own pages (its new-tab page, loaded at start) are chrome:// and never leave the machine
INTERNAL = ("chrome:", "chrome-untrusted:", "about:")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = start_browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def quiet(driver: Any, allowed: tuple[str, ...] = ("file:", "data:")) -> list[str]:
    """Assert a clean console and only local requests since the last check; returns the URLs."""
    urls = [u for u in requested_urls(driver) if not u.startswith(INTERNAL)]
    assert urls and all(u.startswith(allowed) for u in urls), urls
    assert console_problems(driver) == []
    return urls


def earlier_clear(record: Any) -> Any:
    """The same model and dataset three days earlier, clear, on another dataset digest."""
    created = dt.datetime.fromisoformat(record.created) - dt.timedelta(days=3)
    stages = []
    for result in record.stages:
        checks = [dataclasses.replace(c, verdict="match") for c in result.checks]
        prints = {k: ("sha256:" + "0" * 64 if k == "dataset" else v) for k, v in result.fingerprints.items()}
        stages.append(dataclasses.replace(result.with_checks(checks), fingerprints=prints))
    return dataclasses.replace(
        record,
        run_id="tuesday",
        created=created.isoformat(timespec="seconds"),
        verdict="pass",
        gate="clear",
        reasons=(),
        stages=tuple(stages),
        fingerprints={s.stage: s.fingerprints for s in stages},
        waivers=(),
    )


@pytest.fixture(scope="module")
def history(faulty: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("history") / "audit_logs"
    shutil.copytree(faulty.cwd / "audit_logs", folder)
    tuesday = audit.write_record(folder, earlier_clear(faulty.record))
    rebuild_html(folder)
    return {"dir": folder, "faulty": page_path(folder / faulty.markdown.name), "tuesday": page_path(tuesday)}


def test_the_gate_wrote_the_page_and_the_index(faulty):
    audit_dir = faulty.markdown.parent
    assert page_path(faulty.markdown).is_file() and (audit_dir / INDEX).is_file()
    index = (audit_dir / INDEX).read_text()
    assert f'<a href="{page_path(faulty.markdown).name}">{faulty.record.run_id}</a>' in index
    assert 'class="banner blocked"' in page_path(faulty.markdown).read_text()


def test_a_finding_unfolds_and_the_table_filters(browser, history):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(history["faulty"].as_uri())
    first = browser.find_element(By.CSS_SELECTOR, "details.finding")
    assert (
        first.get_attribute("open") is None and not first.find_element(By.CSS_SELECTOR, ".fix").is_displayed()
    )
    first.find_element(By.TAG_NAME, "summary").click()
    assert (
        first.get_attribute("open") is not None and first.find_element(By.CSS_SELECTOR, ".fix").is_displayed()
    )
    reason = browser.find_elements(By.CSS_SELECTOR, "a.reason")[1]
    target = reason.get_attribute("href").rsplit("#", 1)[1]
    reason.click()  # a reason names its finding: the link opens it
    assert browser.find_element(By.ID, target).get_attribute("open") is not None
    rows = browser.find_elements(By.CSS_SELECTOR, "#rows tr.row")
    Select(browser.find_element(By.ID, "f-verdict")).select_by_value("mismatch")
    shown = [r for r in rows if r.is_displayed()]
    assert 0 < len(shown) < len(rows) and {r.get_attribute("data-verdict") for r in shown} == {"mismatch"}
    assert browser.find_element(By.ID, "f-count").text == f"{len(shown)} shown"
    Select(browser.find_element(By.ID, "f-verdict")).select_by_value("")
    browser.find_element(By.ID, "f-feature").send_keys("observation.images.front")
    shown = [r for r in rows if r.is_displayed()]
    assert shown and all(
        "observation.images.front" in r.get_attribute("data-feature") + r.get_attribute("data-check")
        for r in shown
    )
    fold = next(r for r in shown if r.find_elements(By.CSS_SELECTOR, "button.fold"))
    fold.find_element(By.CSS_SELECTOR, "button.fold").click()  # a matching row's evidence unfolds in place
    assert fold.find_element(By.XPATH, "following-sibling::tr[1]").is_displayed()
    loaded = browser.execute_script(
        "return Array.from(document.images).map(i => i.complete && i.naturalWidth)"
    )
    assert len(loaded) >= 4 and all(loaded), loaded  # the record's plots, from the copies beside it
    quiet(browser)
    screenshot(browser)


def screenshot(browser: Any) -> None:
    """The README's picture of a blocked page, taken here (`PREFLIGHT_UPDATE_SCREENSHOT=1` writes it)."""
    if not os.environ.get("PREFLIGHT_UPDATE_SCREENSHOT"):
        return
    from PIL import Image

    browser.execute_script(
        "window.scrollTo(0, 0); document.querySelectorAll('details.finding')[0].open = true"
    )
    shot = SCREENSHOT.with_suffix(".full.png")
    browser.save_screenshot(str(shot))
    Image.open(shot).convert("RGB").quantize(colors=64).save(SCREENSHOT, optimize=True)
    shot.unlink()


def test_the_index_sorts_filters_and_the_diff_link_leads_to_the_earlier_run(browser, history):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get((history["dir"] / INDEX).as_uri())
    rows = "Array.from(document.querySelectorAll('#history tr.record'))"
    runs = functools.partial(
        browser.execute_script, f"return {rows}.filter(r => !r.hidden).map(r => r.dataset.run)"
    )
    faulty_run = runs()[0]
    assert runs() == [faulty_run, "tuesday"]  # newest first
    browser.find_element(By.CSS_SELECTOR, "th[data-key=created] button").click()
    assert runs() == ["tuesday", faulty_run]
    browser.find_element(By.CSS_SELECTOR, "th[data-key=created] button").click()
    assert runs() == [faulty_run, "tuesday"]
    Select(browser.find_element(By.ID, "i-verdict")).select_by_value("pass")
    assert runs() == ["tuesday"]
    Select(browser.find_element(By.ID, "i-verdict")).select_by_value("")
    browser.find_element(By.LINK_TEXT, faulty_run).click()
    assert browser.current_url == history["faulty"].as_uri()
    headline = browser.find_element(By.CSS_SELECTOR, "#diff .headline").text
    assert headline.startswith("blocked now, clear on ") and "dataset changed (sha256:000" in headline
    assert "row(s) went from match to mismatch" in headline
    browser.find_element(By.ID, "previous-link").click()
    assert browser.current_url == history["tuesday"].as_uri()
    assert browser.find_element(By.CSS_SELECTOR, "header.banner.clear #run-id").text == "tuesday"
    quiet(browser)


def test_a_clear_launch_page(browser, piped_container_check):
    from selenium.webdriver.common.by import By

    page = next((piped_container_check.cwd / "audit_logs").glob("*_audit.html"))
    browser.get(page.as_uri())
    assert browser.find_element(By.CSS_SELECTOR, "header.banner .gate").text == "CLEAR"
    assert browser.find_elements(By.CSS_SELECTOR, "#rows tr.row")
    browser.find_element(By.LINK_TEXT, "history").click()
    assert browser.current_url.endswith("/audit_logs/index.html")
    quiet(browser)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def images_loaded(browser: Any) -> list[Any]:
    return browser.execute_script("return Array.from(document.images).map(i => i.complete && i.naturalWidth)")


def test_the_pages_behind_python_http_server(browser, history):
    from selenium.webdriver.common.by import By

    handler = functools.partial(_Quiet, directory=str(history["dir"]))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    try:
        browser.get(base + INDEX)
        browser.find_element(By.CSS_SELECTOR, "tr.record a").click()  # the newest: the faulty page
        assert browser.current_url == base + history["faulty"].name
        loaded = images_loaded(browser)
        assert len(loaded) >= 4 and all(loaded), loaded
        browser.find_element(By.ID, "previous-link").click()
        assert browser.current_url == base + history["tuesday"].name
        quiet(browser, allowed=(base, "data:"))
    finally:
        server.shutdown()
        server.server_close()


SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '"><img src=x onerror="document.documentElement.dataset.pwned = 2">'
CLOSE = "</script><script>window.__pwned = 3</script>"  # aimed at the JSON the index's script reads


def test_script_payloads_in_a_task_and_a_feature_show_as_text_and_never_run(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.record.html_support import make_record, write_profile

    artifacts = write_profile(tmp_path / "run", [{"feature": IMG, "dim": 0, "name": SCRIPT, "kind": CLOSE}])
    record = make_record(
        "x1", "2026-12-01T10:00:00+00:00", mismatched=2, feature=SCRIPT, task=IMG, model=CLOSE, dataset=IMG,
        artifacts=artifacts,
    )  # fmt: skip
    audit_dir = tmp_path / "audit_logs"
    markdown = audit.write_record(audit_dir, record)
    rebuild_html(audit_dir)
    for url in (page_path(markdown).as_uri(), (audit_dir / INDEX).as_uri()):
        browser.get(url)
        marks = browser.execute_script("return [window.__pwned, document.documentElement.dataset.pwned]")
        assert marks == [None, None], url
        assert (
            not browser.find_elements(By.CSS_SELECTOR, "img[src=x]")
            and len(browser.find_elements(By.TAG_NAME, "script")) == 2
        )
        text = browser.find_element(By.TAG_NAME, "body").text
        assert "<script>window.__pwned = 1</script>" in text or CLOSE in text, url
        quiet(browser)
    options = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#i-model option")]
    assert options == ["all", CLOSE]  # the index's filter, built from its JSON: the name as text
    browser.get(page_path(markdown).as_uri())
    browser.find_element(By.CSS_SELECTOR, "details.finding summary").click()
    assert IMG in browser.find_element(By.CSS_SELECTOR, "details.finding .msg").text
    assert SCRIPT in browser.find_element(By.CSS_SELECTOR, "#profile-table").text
    quiet(browser)
