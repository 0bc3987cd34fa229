"""The gate record as JUnit XML: one testcase per check, failures for what blocks, skipped for waivers,
errors for error rows; data cannot break the XML."""

import xml.etree.ElementTree as ET

from pipeline.record.junit import junit_xml, write_junit, xml_safe
from pipeline.record.records import Check, GateRecord, StageResult


def check(id_: str, stage: str, verdict: str, severity: str = "hard", message: str = "") -> Check:
    return Check(
        id=id_,
        stage=stage,
        category="units",
        feature="f",
        verdict=verdict,
        severity=severity,
        message=message,
    )


def record(reasons: tuple[str, ...], *stages: StageResult) -> GateRecord:
    return GateRecord(
        run_id="r1",
        created="2026-12-02T10:00:00+00:00",
        verdict="mismatch",
        gate="blocked" if reasons else "clear",
        reasons=reasons,
        stages=stages,
        sources={},
    )


def test_one_testcase_per_check_with_failures_errors_and_skips(tmp_path):
    a = StageResult.from_checks(
        "a",
        [
            check("a.ok", "a", "match"),
            check("a.bad", "a", "mismatch", message="swapped"),
            check("a.soft", "a", "mismatch", "soft", "drift"),
            check("a.w", "a", "waived", message="known"),
        ],
        timings={"wall_s": 1.5},
    )
    b = StageResult.from_checks(
        "b", [check("b.crash", "b", "error", message="boom"), check("b.u", "b", "unverifiable", message="?")]
    )
    reasons = ("a.bad: swapped", "b.crash: boom", "b.u: ?", "no stage ran: nothing was verified")
    root = ET.fromstring(junit_xml(record(reasons, a, b)))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert [c.get("classname") for c in cases.values()] == ["a"] * 4 + ["b"] * 2 + ["gate"]
    assert cases["a.ok"].find("*") is None
    assert cases["a.bad"].find("failure").get("message") == "swapped"
    assert "drift" in cases["a.soft"].find("system-out").text and cases["a.soft"].find("failure") is None
    assert cases["a.w"].find("skipped") is not None
    assert cases["b.crash"].find("error").get("message") == "boom"
    assert cases["b.u"].find("failure") is not None  # the gate blocked on it (it is a reason)
    assert cases["gate.reason0"].find("failure").get("message") == "no stage ran: nothing was verified"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "7",
        "3",
        "1",
        "1",
    )
    suite_a = root.find("testsuite[@name='a']")
    assert suite_a.get("time") == "1.500" and suite_a.get("failures") == "1"


def test_unverifiable_that_only_warns_passes():
    b = StageResult.from_checks("b", [check("b.u", "b", "unverifiable", message="?")])
    root = ET.fromstring(junit_xml(record((), b)))
    case = next(root.iter("testcase"))
    assert case.find("failure") is None and "unverifiable" in case.find("system-out").text


def test_hostile_text_stays_well_formed_xml(tmp_path):
    hostile = "]]></failure><x a='1'>\x00\x1b\ud800 & <script>\u2028"
    stage = StageResult.from_checks(
        hostile, [check(f"s.{hostile}", hostile, "mismatch", message=hostile)], provenance={"host": hostile}
    )
    path = write_junit(tmp_path / "out" / "gate.xml", record((f"s.{hostile}: {hostile}",), stage))
    root = ET.parse(path).getroot()
    case = next(root.iter("testcase"))
    assert case.get("name") == xml_safe(f"s.{hostile}") and "\\x00" in case.get("name")
    assert case.find("failure").get("message").startswith("]]></failure><x a='1'>")
    assert not list(path.parent.glob(".*.tmp"))


def test_a_skipped_row_is_a_skipped_testcase_and_blocks_nothing():
    """A row a launch could not run for want of a source (a dataset alone: no base to compare with)."""
    from pipeline.record.records import derive_status

    rows = [check("c.ok", "c", "match"), check("c.inputs", "c", "skipped", "soft", "set model.path")]
    assert derive_status(rows) == "pass"
    root = ET.fromstring(junit_xml(record((), StageResult.from_checks("c", rows))))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["c.inputs"].find("skipped").get("message") == "skipped: set model.path"
    assert cases["c.inputs"].find("failure") is None and root.get("failures") == "0"
