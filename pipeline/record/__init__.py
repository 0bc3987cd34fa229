"""The record and its history: check rows and the gate record (`records`), the run folder that owns
every path of a run, the audit writers (markdown, text, JUnit), the audit history and what makes reuse
sound (fingerprints, the hash cache, integrity), and waivers.

A plugin stage needs only `Check`, `Rows`, `StageResult` (and `pipeline.stages.register`)."""

from pipeline.record.records import Check, GateRecord, RecordError, Rows, StageResult

__all__ = ["Check", "GateRecord", "RecordError", "Rows", "StageResult"]
