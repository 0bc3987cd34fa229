"""The faulty demo's launch as the record's tests read it: the golden markdown (test_record_golden.py) and
its HTML page in a browser (test_html_browser.py). The launch itself is tests/conftest.py's session
fixture `faulty_full`, which the stage tests that read the faulty demo's rows share; every module reading
it carries `xdist_group(GROUP)`, so under `-n 2 --dist loadgroup` one worker runs them all and the launch
is made once."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.record import history
from pipeline.record.records import GateRecord
from tests.conftest import FAULTY_FULL_GROUP, FAULTY_WAIVED, Launched

GROUP = FAULTY_FULL_GROUP
WAIVED = FAULTY_WAIVED


@dataclass
class Faulty:
    cwd: Path
    proc: subprocess.CompletedProcess[str]
    markdown: Path
    record: GateRecord


@pytest.fixture(scope="session")
def faulty(faulty_full: Launched) -> Faulty:
    """The one faulty launch with its markdown record and the record read back from its JSON twin."""
    cwd, proc = faulty_full.cwd, faulty_full.proc
    markdown = next((cwd / "audit_logs").glob("*_audit.md"), None)
    assert markdown is not None, proc.stdout + proc.stderr
    return Faulty(cwd, proc, markdown, history.twin_record(markdown.with_suffix(".json")))
