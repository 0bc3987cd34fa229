"""The gate record as JUnit XML (`stages.gate.junit=PATH`), so a CI system shows the gate natively.

One `<testsuite>` per stage, one `<testcase>` per check (classname = stage, name = check id):
a blocking row (a hard mismatch, or an unverifiable row the gate blocked on) is a `<failure>`, an error
row an `<error>`, a waived row `<skipped>`; a soft mismatch passes with its message in `<system-out>`.
A gate reason that names no check (e.g. "no stage ran") is a failing testcase of suite `gate`.

The text is data (messages, evidence): ElementTree escapes markup, and characters XML 1.0 cannot hold
(control characters, lone surrogates) are written as `\\xNN` so the file always parses.
"""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from pipeline.record.markdown import reason_check
from pipeline.record.records import Check, GateRecord, StageResult
from pipeline.record.remedy import corrected_argv
from pipeline.storage import atomic_write_bytes

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(value: Any) -> str:
    """Text XML 1.0 can carry: every other character as `\\xNN` (`\\uNNNN`)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text)


def blocked_ids(record: GateRecord) -> set[str]:
    """The checks the gate blocked on (its reasons name them), unverifiable ones included."""
    ids = [c.id for s in record.stages for c in s.checks]
    return {found for r in record.reasons if (found := reason_check(r, ids)) is not None}


def junit_xml(record: GateRecord) -> bytes:
    """The whole document, UTF-8 with an XML declaration."""
    blocked = blocked_ids(record)
    root = ET.Element("testsuites", name=f"hpc-preflight gate {xml_safe(record.run_id)}")
    for result in record.stages:
        root.append(_suite(result, blocked))
    loose = [r for r in record.reasons if reason_check(r, sorted(blocked)) is None]
    if loose:
        suite = ET.SubElement(root, "testsuite", name="gate")
        for n, reason in enumerate(loose):
            case = ET.SubElement(suite, "testcase", classname="gate", name=f"gate.reason{n}")
            ET.SubElement(case, "failure", message=xml_safe(reason)[:1000], type="blocked").text = xml_safe(
                reason
            )
        _count(suite)
    _count(root)
    root.set("gate", record.gate)
    root.set("verdict", record.verdict)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _suite(result: StageResult, blocked: set[str]) -> ET.Element:
    suite = ET.Element("testsuite", name=xml_safe(result.stage))
    props = ET.SubElement(suite, "properties")
    for key in ("status", "host", "slurm_job_id", "reused_from"):
        value = result.status if key == "status" else result.provenance.get(key)
        if value is not None:
            ET.SubElement(props, "property", name=key, value=xml_safe(value))
    argv = corrected_argv([result])
    if argv is not None:  # the line the contract judged with every line remedy applied (never run)
        ET.SubElement(props, "property", name="corrected_line", value=xml_safe(shlex.join(argv)))
    for check in result.checks:
        suite.append(_case(check, check.id in blocked))
    if result.status == "skipped" and not result.checks:  # a CI view shows it skipped, never passed
        case = ET.SubElement(
            suite, "testcase", classname=xml_safe(result.stage), name=f"{result.stage}.skipped"
        )
        reason = xml_safe(result.provenance.get("reason") or "skipped")
        ET.SubElement(case, "skipped", message=reason[:1000])
    _count(suite)
    wall = result.timings.get("span_s", result.timings.get("wall_s"))
    if isinstance(wall, (int, float)):
        suite.set("time", f"{wall:.3f}")
    return suite


def _case(check: Check, blocked: bool) -> ET.Element:
    case = ET.Element("testcase", classname=xml_safe(check.stage), name=xml_safe(check.id))
    message = xml_safe(check.message or check.verdict)[:1000]
    if check.verdict == "error":
        ET.SubElement(case, "error", message=message, type="error").text = _details(check)
    elif check.blocking or blocked:
        ET.SubElement(case, "failure", message=message, type=check.verdict).text = _details(check)
    elif check.verdict in ("waived", "skipped"):
        ET.SubElement(case, "skipped", message=f"{check.verdict}: {message}")
    elif check.verdict != "match":
        ET.SubElement(case, "system-out").text = f"{check.verdict} ({check.severity}): " + _details(check)
    return case


def _details(check: Check) -> str:
    """The row's A/B/C values, message and evidence, as a reader of the CI log wants them."""
    body = {
        "feature": check.feature,
        "category": check.category,
        "severity": check.severity,
        "expected (A)": check.expected,
        "configured (B)": check.configured,
        "actual (C)": check.actual,
        **({"deployed (D)": check.deployed} if check.deployed is not None else {}),
        "message": check.message,
        "evidence": check.evidence,
        **({"remedy": check.remedy} if check.remedy else {}),
    }
    return xml_safe(json.dumps(body, indent=1, default=str)[:8000])


def _count(element: ET.Element) -> None:
    """tests / failures / errors / skipped of a suite (or of all suites, on the root)."""
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        element.set(key, str(sum(1 for c in cases if c.find(tag) is not None)))


def write_junit(path: Path, record: GateRecord, mode: int | None = None) -> Path:
    """Atomically (temp file, fsync, rename): a CI step never reads half a report."""
    return atomic_write_bytes(Path(path), junit_xml(record), mode)
