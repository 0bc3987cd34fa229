"""The faulty demo's launch, shared by the tests that read its record: the golden markdown
(test_record_golden.py) and its HTML page in a browser (test_html_browser.py). One launch per session;
both modules carry the same `xdist_group` mark, so under `-n 2 --dist loadgroup` one worker runs both
and the launch is not made twice."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.record import history
from pipeline.record.records import GateRecord
from tests.conftest import launch

GROUP = "faulty_demo"  # the xdist group of the modules that read the launch
WAIVED = "contract.units.scale:action"
WAIVERS = f"""waivers:
  - check: "{WAIVED}"
    justification: the golden record shows a waived row
    who: tests
    date: 2026-12-01
"""


@dataclass
class Faulty:
    cwd: Path
    proc: subprocess.CompletedProcess[str]
    markdown: Path
    record: GateRecord


@pytest.fixture(scope="session")
def faulty() -> Iterator[Faulty]:
    """`launcher=local stage=full demo=faulty`, render_cache skipped (the slowest stage), made to show
    every kind of row: the planted faults (mismatch), a waiver for one of them (waived), `require_quota`
    on a node without a quota tool (unverifiable), a stage that crashes (error), and the rows that
    match. Its folder has a fixed-length name under /tmp, so cells that cut a path at a fixed width cut
    it at the same place in every run."""
    cwd = (
        Path("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()) / f"pf-golden-{secrets.token_hex(4)}"
    )
    cwd.mkdir()  # no `_` in the name: the markdown would show it escaped
    try:
        (cwd / "configs").mkdir()
        (cwd / "configs" / "waivers.yaml").write_text(WAIVERS)
        proc = launch(
            cwd,
            "launcher=local",
            "stage=full",
            "demo=faulty",
            "skip=[render_cache]",
            "plugins=[preflight_crash_stage]",
            "stages.checkpoint_storage.require_quota=true",
            "gate.junit=reports/gate.xml",
        )
        markdown = next((cwd / "audit_logs").glob("*_audit.md"), None)
        assert markdown is not None, proc.stdout + proc.stderr
        record = history.twin_record(markdown.with_suffix(".json"))
        yield Faulty(cwd, proc, markdown, record)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
