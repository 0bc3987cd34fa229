"""What one part job left behind (its `part.json`, log, metrics stream, events and report), read back
by the merge job; and why it cannot be compared when it cannot, in words that name the cause."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.record.runfolder import PART_DONE, PART_INPUT_ERROR
from pipeline.stages.determinism import compare
from pipeline.stages.determinism.runner import PART_FILE
from pipeline.trainlog.spec import EVENTS_FILE, REPORT_FILE

KEEP = (
    "seed",
    "argv",
    "env_set",
    "env_unset",
    "conditions",
    "host",
    "slurm_job_id",
    "gpu",
    "versions",
    "returncode",
    "cause",
    "started",
    "ended",
    "log",
)


@dataclass
class Outcome:
    """What one part left behind, and why it cannot be compared if it cannot."""

    part: str
    folder: Path
    record: dict[str, Any]
    stream: compare.Stream | None
    report: dict[str, Any]
    problem: str | None
    input_error: str | None = None  # the part stopped on a bad input (its one line), not a crash

    @property
    def skipped(self) -> bool:
        return bool(self.record.get("skipped"))

    @property
    def threads(self) -> Any:
        return (self.report.get("device") or {}).get("threads")

    def all_events(self) -> list[tuple[str, int]]:
        """(event, step it happened after) in the order trainlog's events.jsonl holds them."""
        found: list[tuple[str, int]] = []
        path = self.folder / "run" / EVENTS_FILE
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        for line in lines:
            try:
                row = json.loads(line)
                found.append((str(row["event"]), int(row["step"])))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def events(self) -> dict[str, int]:
        """Event -> first step it happened after; `lr_change` is also read off a logged `lr`."""
        first: dict[str, int] = {}
        for name, step in self.all_events():
            first.setdefault(name, step)
        if "lr_change" not in first and self.stream is not None:
            lrs = [(s, compare.exact_text(self.stream.rows[s], "lr")) for s in self.stream.steps]
            lrs = [(s, v) for s, v in lrs if v is not None]
            change = next((sa for (sa, a), (_, b) in zip(lrs, lrs[1:], strict=False) if a != b), None)
            if change is not None:
                first["lr_change"] = change  # the new rate was first used on the step after
        return first

    def evidence(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "problem": self.problem,
            **{k: self.record.get(k) for k in KEEP},
            "device": self.report.get("device"),
            "settings": self.report.get("settings"),
            "log_tail": self.record.get("log_tail", "")[-800:] if self.problem else None,
        }


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def failure_verb(outcomes: list[Outcome]) -> str:
    """How the failed runs among `outcomes` ended: "crashed" only when one really did; runs that all
    stopped on a bad input (checked again in the part job) say that, so the fix is the input."""
    failed = [o for o in outcomes if o.problem]
    return "stopped on a bad input" if failed and all(o.input_error for o in failed) else "crashed"


def cause_text(record: dict[str, Any]) -> str:
    """`: torch refused ...` / `: <last exception>` for a crashed run's message; empty when unknown."""
    cause = record.get("cause") or {}
    if cause.get("kind") == "nondeterministic_op":
        return (
            f": torch refused the nondeterministic op {cause['op']} under "
            f"use_deterministic_algorithms(True) ({cause['message'][:160]}...)"
        )
    if cause.get("kind") == "exception":
        return f": {cause['message'][:200]}"
    return ""


def read_outcome(folder: Path, part: str, metrics_file: str) -> Outcome:
    record, run_dir = _read_json(folder / PART_FILE), folder / "run"
    report = _read_json(run_dir / REPORT_FILE)
    stream_path = run_dir / metrics_file
    problem = None
    failed = (_read_json(folder / PART_INPUT_ERROR).get("input_error") or {}).get("message")
    if failed:  # checked first: a stale part.json or done.json of an earlier attempt does not count
        return Outcome(part, folder, record, None, report, f"input error: {failed}", input_error=failed)
    if record.get("skipped"):
        return Outcome(part, folder, record, None, report, None)
    if not (folder / PART_DONE).exists():
        code = record.get("returncode")
        problem = (
            (f"exited {code}" if code not in (None, 0) else "did not finish")
            + cause_text(record)
            + " (no done.json: the part job crashed, timed out or was cancelled)"
        )
    elif not stream_path.exists():
        problem = f"wrote no metrics stream at {stream_path}"
    stream = None
    if problem is None:
        try:
            stream = compare.read_stream(stream_path)
        except InputError as exc:
            problem = str(exc)
        if stream is not None and not stream.rows:
            problem = f"metrics stream {stream_path} is empty"
    return Outcome(part, folder, record, stream, report, problem)
