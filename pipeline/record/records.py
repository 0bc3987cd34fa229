"""The three records every stage and the gate exchange: `Check`, `StageResult`, `GateRecord`.

They are frozen so a result cannot be edited after a stage wrote it; the gate builds new records
(e.g. a waived copy of a check) instead. JSON is the only on-disk form (nothing is pickled), and
`pipeline/schemas/gate_record.schema.json` publishes the shape for other tools.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import RecordError

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "gate_record.schema.json"

CATEGORIES = (
    "normalization",
    "layout",
    "encoding",
    "units",
    "reload",
    "cache",
    "diagnostics",
    "determinism",
    "container",
    "storage",
    "health",
)
# skipped: a check a launch without that source could not run (the row names the keys that would run it)
VERDICTS = ("match", "mismatch", "unverifiable", "waived", "error", "skipped")
SEVERITIES = ("hard", "soft")
STAGE_STATUSES = ("pass", "fail", "warn", "unverifiable", "error", "skipped")
GATE_VERDICTS = ("pass", "mismatch", "unverifiable")
GATES = ("clear", "blocked")
# line: flags to set or drop on the user's lerobot-train line; data: a change to the dataset's files (the
# gate never makes it); undecided: the evidence does not decide the mend, and says what would
REMEDY_KINDS = ("line", "data", "undecided")


def _require(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise RecordError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")


def jsonable(value: Any) -> Any:
    """Coerce numpy scalars/arrays, paths and tuples into plain JSON values (evidence is free-form)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return jsonable(value.tolist())
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


@dataclass(frozen=True)
class Check:
    """One reconciliation row: what A expects, what B configures, what C holds, what D (where the trained
    policy will run) provides, and the verdict. `deployed` is left out of the JSON where a row has no D,
    and `remedy` (what would mend the row: flags on the training line, or a change to the data; see
    `pipeline.stages.contract.remedies`) where it has none, so records written before either existed
    read, and write, byte for byte as they did."""

    id: str
    stage: str
    category: str
    feature: str
    verdict: str
    severity: str = "hard"
    expected: Any = None
    configured: Any = None
    actual: Any = None
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    deployed: Any = None
    remedy: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _require(self.category, CATEGORIES, f"check {self.id}: category")
        if self.remedy is not None:
            _require(str(self.remedy.get("kind")), REMEDY_KINDS, f"check {self.id}: remedy kind")
        _require(self.verdict, VERDICTS, f"check {self.id}: verdict")
        _require(self.severity, SEVERITIES, f"check {self.id}: severity")

    @property
    def blocking(self) -> bool:
        return self.verdict == "error" or (self.verdict == "mismatch" and self.severity == "hard")

    def to_dict(self) -> dict[str, Any]:
        data = jsonable(dataclasses.asdict(self))
        if self.deployed is None:
            del data["deployed"]
        if self.remedy is None:
            del data["remedy"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(**_known_fields(cls, data, "check"))


@dataclass(frozen=True)
class Rows:
    """The one way a stage builds its rows: `rows = Rows("contract", "normalization")`, then
    `rows("mode", feature, verdict, message, expected=..., evidence=...)` gives the check
    `contract.mode`. A check decides its verdict and evidence first, then makes this one call."""

    stage: str
    category: str = "container"

    def __call__(
        self,
        check_id: str,
        feature: str,
        verdict: str,
        message: str = "",
        *,
        category: str | None = None,
        severity: str = "hard",
        expected: Any = None,
        configured: Any = None,
        actual: Any = None,
        evidence: Mapping[str, Any] | None = None,
        deployed: Any = None,
    ) -> Check:
        return Check(
            id=f"{self.stage}.{check_id}",
            stage=self.stage,
            category=category or self.category,
            feature=feature,
            verdict=verdict,
            severity=severity,
            expected=expected,
            configured=configured,
            actual=actual,
            message=message,
            evidence=dict(evidence or {}),
            deployed=deployed,
        )

    def judge(self, check_id: str, feature: str, ok: bool | None, message: str, **fields: Any) -> Check:
        """`ok` True -> match, False -> mismatch, None -> unverifiable (could not be decided)."""
        verdict = "unverifiable" if ok is None else ("match" if ok else "mismatch")
        return self(check_id, feature, verdict, message, **fields)


def derive_status(checks: Iterable[Check]) -> str:
    """A stage's status is its worst check: error > fail (hard mismatch) > unverifiable > warn > pass."""
    checks = list(checks)
    if any(c.verdict == "error" for c in checks):
        return "error"
    if any(c.verdict == "mismatch" and c.severity == "hard" for c in checks):
        return "fail"
    if any(c.verdict == "unverifiable" for c in checks):
        return "unverifiable"
    if any(c.verdict == "mismatch" for c in checks):
        return "warn"
    return "pass"


@dataclass(frozen=True)
class StageResult:
    """Everything one stage job found, plus where and from what it ran (so a rerun can be skipped)."""

    stage: str
    status: str
    checks: tuple[Check, ...] = ()
    artifacts: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)
    physical_checks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(self.status, STAGE_STATUSES, f"stage {self.stage}: status")

    @classmethod
    def from_checks(cls, stage: str, checks: Iterable[Check], **kwargs: Any) -> StageResult:
        checks = tuple(checks)
        return cls(stage=stage, status=derive_status(checks), checks=checks, **kwargs)

    def with_checks(self, checks: Iterable[Check]) -> StageResult:
        """The same result with other checks (e.g. waived ones) and the status they imply."""
        checks = tuple(checks)
        return dataclasses.replace(self, checks=checks, status=derive_status(checks))

    def to_dict(self) -> dict[str, Any]:
        data = jsonable(dataclasses.asdict(self))
        data["checks"] = [c.to_dict() for c in self.checks]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageResult:
        fields = _known_fields(cls, data, "stage result")
        fields["checks"] = tuple(Check.from_dict(c) for c in fields.get("checks", ()))
        fields["physical_checks"] = tuple(fields.get("physical_checks", ()))
        return cls(**fields)


@dataclass(frozen=True)
class GateRecord:
    """The merged decision: `gate` is what `afterok` chains read (through the gate job's exit code)."""

    run_id: str
    created: str
    verdict: str
    gate: str
    reasons: tuple[str, ...]
    stages: tuple[StageResult, ...]
    sources: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, str]] = field(default_factory=dict)
    waivers: tuple[dict[str, Any], ...] = ()
    history: tuple[str, ...] = ()  # audit-history entries this launch could not trust, one line each
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        _require(self.verdict, GATE_VERDICTS, "gate record: verdict")
        _require(self.gate, GATES, "gate record: gate")
        if self.schema_version != SCHEMA_VERSION:
            raise RecordError(f"gate record: schema_version {self.schema_version} is not {SCHEMA_VERSION}")

    @property
    def exit_code(self) -> int:
        return 0 if self.gate == "clear" else 3

    def to_dict(self) -> dict[str, Any]:
        data = jsonable(dataclasses.asdict(self))
        data["stages"] = [s.to_dict() for s in self.stages]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateRecord:
        fields = _known_fields(cls, data, "gate record")
        fields["stages"] = tuple(StageResult.from_dict(s) for s in fields.get("stages", ()))
        fields["reasons"] = tuple(fields.get("reasons", ()))
        fields["waivers"] = tuple(fields.get("waivers", ()))
        fields["history"] = tuple(str(line) for line in fields.get("history", ()))
        return cls(**fields)


@dataclass(frozen=True)
class PartDone:
    """A part job's last write (`parts/<stage>/<part>/done.json`): it ran to its end, and when."""

    part: str
    started: float
    finished: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartDone:
        fields = _known_fields(cls, data, "part done")
        return cls(
            part=str(fields["part"]),
            started=float(fields["started"]),
            finished=float(fields["finished"]),
            provenance=dict(fields.get("provenance") or {}),
        )


def _known_fields(cls: type, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise RecordError(f"{what}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise RecordError(f"{what}: unknown field(s) {sorted(unknown)}")
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    missing = required - set(data)
    if missing:
        raise RecordError(f"{what}: missing field(s) {sorted(missing)}")
    return dict(data)


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
