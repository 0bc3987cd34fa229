"""What the page tests and the index benchmark share: small gate records made in code (written through
the audit writer, as a gate writes them) and a headless Chromium that downloads nothing.

The browser is the system's (Debian's `chromium` and `chromium-driver`, scripts/install_system.sh),
driven by Selenium through `/usr/bin/chromedriver` so Selenium Manager never looks for another; the
flags keep it off the network (no background fetches, updates, sync or QUIC) and its profile is fresh.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any

from pipeline.record import Rows, StageResult
from pipeline.record.records import GateRecord

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,1400",
)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} not installed (scripts/install_system.sh installs chromium and chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the selenium package is not installed (pip install -e '.[test]')"
    return None


def start_browser(profile: Path | None = None) -> Any:
    """A headless Chromium with its console and network events logged (read with `get_log`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile or tempfile.mkdtemp(prefix='pf-chromium-')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def requested_urls(driver: Any) -> list[str]:
    """Every URL the browser asked for since the last call (Chrome's network events)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def console_problems(driver: Any) -> list[str]:
    """Console lines at warning level or worse since the last call (a CSP violation is one)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def make_record(
    run_id: str,
    created: str,
    *,
    model: str = "act_so101",
    dataset: str = "so101_pick",
    mismatched: int = 0,
    feature: str = "observation.state",
    task: str = "pick the cube",
    dataset_print: str = "sha256:" + "d" * 64,
    artifacts: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> GateRecord:
    """A record of two stages: `mismatched` of its twelve contract rows mismatch (hard), the rest match."""
    rows = Rows("contract", "layout")
    checks = [
        rows.judge(
            f"layout.dim:{feature}.{i}",
            f"{feature}.{i}" if i else feature,
            i >= mismatched,
            f"dim {i} of {feature}; task {task!r}",
            expected=6,
            configured=6,
            actual=6 if i >= mismatched else 7,
            evidence={"task": task, "index": i, "feature": feature},
        )
        for i in range(12)
    ]
    unit = Rows("container_check", "container")("python", "python", "match", "3.11", actual="3.11")
    prints = {"model": "sha256:" + "a" * 64, "dataset": dataset_print, "config": "sha256:" + "c" * 64}
    stages = (
        StageResult.from_checks("container_check", [unit], fingerprints={"config": prints["config"]}),
        StageResult.from_checks("contract", checks, fingerprints=prints, artifacts=artifacts or {}),
    )
    blocking = [f"{c.id}: {c.message}" for s in stages for c in s.checks if c.blocking]
    return GateRecord(
        run_id=run_id,
        created=created,
        verdict="mismatch" if blocking else "pass",
        gate="blocked" if blocking else "clear",
        reasons=tuple(blocking),
        stages=stages,
        sources={
            "model": {"name": model, "path": f"/data/{model}"},
            "training": {"path": "/data/train.yaml", **({"command": command} if command else {})},
            "dataset": {"name": dataset, "path": f"/data/{dataset}"},
            "container": {"kind": "none", "image": None},
            "executor": "local",
            "variant": None,
        },
        fingerprints={s.stage: s.fingerprints for s in stages},
    )


# a 1x1 PNG: the profile's plot in records made here
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def write_profile(folder: Path, rows: list[dict[str, Any]]) -> dict[str, str]:
    """A dataset profile as the contract stage leaves it (JSON + plot): the artifacts naming them."""
    folder.mkdir(parents=True, exist_ok=True)
    body = {"schema": "preflight.profile/1", "dataset": "so101_pick", "episodes": 21, "rows": rows}
    (folder / "profile.json").write_text(json.dumps(body))
    (folder / "profile.png").write_bytes(PNG)
    return {"profile": str(folder / "profile.json"), "profile_plot": str(folder / "profile.png")}
