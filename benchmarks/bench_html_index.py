"""The history's index.html over many records: how big it is, how long it takes to build, and how long the
browser (headless system Chromium) takes to load it, as a ratio to a static page of the same size loaded
the same number of times in the same browser (the index's own cost: its rows, style and script).
Prints one JSON line.

    python benchmarks/bench_html_index.py [--records 500] [--loads 7]

Also times `preflight-status --html` (every page and the index rendered again), and a launch's update
of the index (a gate's `write_html` after its record: the index from each record's kept summary, only
the new twin read) against the page and index made from every twin, as a gate made them before the
summaries were kept, interleaved in the same run, each after the gate's own record write. The records are JSON
twins written as the gate writes them (sealed and chained), without their markdown: the index is built
from the twins alone. Timings on a shared machine are noisy; the load average is
printed beside them, and the ratio is the number to compare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from pipeline.record import audit, history
from pipeline.record.audit import LOCK, record_stem
from pipeline.record.html import INDEX, page_path, rebuild_html, write_html
from pipeline.record.html.entries import entries, previous
from pipeline.record.html.write import render_page, write_index
from pipeline.storage import atomic_write_json, atomic_write_text, file_lock
from tests.record.html_support import make_record, missing_browser, start_browser

MODELS = ("act_so101", "smolvla_libero", "pi05_droid", "diffusion_pusht")
DATASETS = ("so101_pick", "libero_10", "droid_100", "pusht")


def write_twins(audit_dir: Path, count: int) -> None:
    """`count` records over a year of gates, a quarter of them blocked, chained as the gate chains them."""
    previous = None
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(count):
        created = (start + dt.timedelta(hours=17 * i)).isoformat(timespec="seconds")
        record = make_record(
            f"run-{i:05d}",
            created,
            model=MODELS[i % len(MODELS)],
            dataset=DATASETS[(i // 3) % len(DATASETS)],
            mismatched=2 if i % 4 == 0 else 0,
            command=["lerobot-train", "--policy.type=act", f"--steps={1000 * (i % 7)}"] if i % 2 else None,
        )
        twin = history.seal({**record.to_dict(), history.FILES: {}}, previous, None)
        atomic_write_json(audit_dir / f"{record_stem(record)}.json", twin)
        previous = twin[history.INTEGRITY]["digest"]


def whole_update(audit_dir: Path, markdown: Path) -> None:
    """A gate's page and index as they were made before the summaries were kept: every twin read."""
    with file_lock(audit_dir / LOCK):
        found = entries(audit_dir)
        current = next(e for e in found if e.path == markdown.with_suffix(".json"))
        atomic_write_text(page_path(markdown), render_page(current, previous(found, current), audit_dir))
        write_index(audit_dir, found=found)


def launch_update(audit_dir: Path, count: int, rounds: int = 3) -> dict[str, float]:
    """A gate's page and index update, from the kept summaries against every twin read (as before),
    each after its own record write (which verifies the history, as in a gate job), interleaved over
    `rounds` launches after one of each that compiles the templates; medians."""
    times: dict[str, list[float]] = {"whole": [], "update": []}
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=17 * count)
    for i in range(2 * (rounds + 1)):
        created = (start + dt.timedelta(hours=17 * i)).isoformat(timespec="seconds")
        markdown = audit.write_record(audit_dir, make_record(f"run-launch-{i}", created))
        way = "whole" if i % 2 == 0 else "update"
        started = time.perf_counter()
        whole_update(audit_dir, markdown) if way == "whole" else write_html(audit_dir, markdown)
        if i >= 2:
            times[way].append(time.perf_counter() - started)
    whole_s, update_s = statistics.median(times["whole"]), statistics.median(times["update"])
    return {
        "launch_index_whole_s": round(whole_s, 3),
        "launch_index_update_s": round(update_s, 3),
        "launch_update_speedup": round(whole_s / update_s, 1),
    }


def load_ms(driver, url: str) -> float:
    """From navigation start to the end of the load event (the index's script has run by then)."""
    driver.get(url)
    return driver.execute_script(
        "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime"
    )


def sort_ms(driver) -> float:
    return driver.execute_script(
        "const t = performance.now(); document.querySelector('th[data-key=model] button').click();"
        " return performance.now() - t"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--loads", type=int, default=7)
    args = parser.parse_args()
    why = missing_browser()
    with tempfile.TemporaryDirectory(prefix="bench-html-") as tmp:
        audit_dir = Path(tmp) / "audit_logs"
        audit_dir.mkdir()
        write_twins(audit_dir, args.records)
        started = time.perf_counter()
        index = write_index(audit_dir)
        build_s = time.perf_counter() - started
        size = index.stat().st_size
        started = time.perf_counter()
        pages, _ = rebuild_html(audit_dir)  # `preflight-status --html`: every page, then the index
        rebuild_s = time.perf_counter() - started
        baseline = Path(tmp) / "baseline.html"  # the same bytes, a page with nothing to lay out or run
        head = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>b</title></head><body><pre>"
        baseline.write_text(head + "x" * (size - len(head) - 20) + "</pre></body></html>")
        result = {
            "records": args.records,
            "index_bytes": size,
            "bytes_per_record": round(size / args.records),
            "build_s": round(build_s, 3),
            "rebuild_all_pages_s": round(rebuild_s, 3),
            "pages": pages,
            **launch_update(audit_dir, args.records),
        }
        if why is None:
            driver = start_browser(Path(tmp) / "profile")
            try:
                load_ms(driver, baseline.as_uri())  # the first load warms the browser up
                index_ms = [load_ms(driver, (audit_dir / INDEX).as_uri()) for _ in range(args.loads)]
                sorting = sort_ms(driver)
                base_ms = [load_ms(driver, baseline.as_uri()) for _ in range(args.loads)]
            finally:
                driver.quit()
            result.update(
                index_load_ms=round(statistics.median(index_ms), 1),
                baseline_load_ms=round(statistics.median(base_ms), 1),
                ratio=round(statistics.median(index_ms) / statistics.median(base_ms), 2),
                sort_ms=round(sorting, 1),
            )
        else:
            result["browser"] = why
        result["loadavg_1min"] = round(os.getloadavg()[0], 2)
        result["cpus"] = os.cpu_count()
        print(json.dumps(result))


if __name__ == "__main__":
    main()
