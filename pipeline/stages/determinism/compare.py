"""Compare metrics streams bit for bit and say where and by how much two runs first diverge.

Values are compared through their `float.hex()` forms, so "identical" means identical bits, not six
equal printed decimals. A divergence is reported with the absolute and relative difference and the
distance in ULPs of the dtype the value was computed in (a 1-ULP float32 difference is reduction
order; thousands of ULPs at step 1 is different data).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import InputError

METRICS = ("loss", "grad_norm")
DIGEST = "param_digest"
BATCH = "batch_digest"  # trainlog's digest of the step's input batch: "the data differ"
_FORMATS = {"float16": ("<e", "<H", 15), "float32": ("<f", "<I", 31), "float64": ("<d", "<Q", 63)}


@dataclass
class Stream:
    """One run's metrics stream, keyed by step."""

    path: Path
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def steps(self) -> list[int]:
        return sorted(self.rows)


def read_stream(path: Path) -> Stream:
    """Parse a JSON-lines stream; a malformed line is bad input named by file and line."""
    stream = Stream(Path(path))
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(
                f"{path}:{number}: expected a JSON object with an integer 'step' "
                f"({type(exc).__name__}: {exc})",
                path=path,
                field="step",
            ) from exc
        stream.rows[step] = row
    return stream


def exact_text(row: dict[str, Any], key: str) -> str | None:
    """The bit-exact form of a metric: its hex string, or the repr of a plain JSON number."""
    hexes = row.get("hex") or {}
    if key in hexes:
        return str(hexes[key])
    value = row.get(key)
    return None if value is None else float(value).hex() if isinstance(value, (int, float)) else str(value)


def from_text(text: str) -> float:
    return float(text) if text in ("nan", "inf", "-inf") else float.fromhex(text)


def ulp_distance(a: float, b: float, dtype: str = "float64") -> int | None:
    """How many representable values of `dtype` lie between a and b (None for nan/inf)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    if dtype == "bfloat16":
        return abs(_ordered(a, "float32") - _ordered(b, "float32")) >> 16
    return abs(
        _ordered(a, dtype if dtype in _FORMATS else "float64")
        - _ordered(b, dtype if dtype in _FORMATS else "float64")
    )


def _ordered(value: float, dtype: str) -> int:
    float_fmt, int_fmt, sign_bit = _FORMATS[dtype]
    bits = struct.unpack(int_fmt, struct.pack(float_fmt, value))[0]
    magnitude = bits & ((1 << sign_bit) - 1)
    return -magnitude if bits >> sign_bit else magnitude


def difference(
    key: str,
    step: int,
    a_row: dict[str, Any] | None,
    b_row: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """None when both runs hold the same bits for `key` at `step`; otherwise the evidence."""
    a_text = None if a_row is None else exact_text(a_row, key)
    b_text = None if b_row is None else exact_text(b_row, key)
    if a_text == b_text:
        return None
    found: dict[str, Any] = {"metric": key, "step": step, "a": a_text, "b": b_text}
    if a_text is None or b_text is None:
        return {**found, "kind": "missing in " + ("a" if a_text is None else "b")}
    if key.endswith("_digest"):
        return {**found, "kind": "digest"}
    a, b = from_text(a_text), from_text(b_text)
    dtype = str(((a_row or {}).get("dtype") or {}).get(key, "float64"))
    delta = abs(a - b) if math.isfinite(a) and math.isfinite(b) else None
    scale = max(abs(a), abs(b)) if delta is not None else 0.0
    return {
        **found,
        "kind": "value",
        "a_value": a,
        "b_value": b,
        "dtype": dtype,
        "abs": delta,
        "rel": None if delta is None or scale == 0 else delta / scale,
        "ulp": ulp_distance(a, b, dtype),
    }


def first_divergence(a: Stream, b: Stream, key: str) -> dict[str, Any] | None:
    """The first step at which `key` differs; a step present in only one stream counts as divergence.

    A digest is written only on chosen steps, so a step where neither run has the key is skipped.
    """
    for step in sorted(set(a.rows) | set(b.rows)):
        a_row, b_row = a.rows.get(step), b.rows.get(step)
        if a_row is not None and b_row is not None and key not in a_row and key not in b_row:
            continue
        found = difference(key, step, a_row, b_row)
        if found is not None:
            return found
    return None


def divergences(a: Stream, b: Stream, keys: Iterable[str] = (*METRICS, DIGEST)) -> dict[str, Any]:
    """Per metric: its first divergence (or None), for the keys either stream actually records."""
    present = {k for s in (a, b) for row in s.rows.values() for k in (*row, *(row.get("hex") or {}))}
    return {key: first_divergence(a, b, key) for key in keys if key in present}


def earliest(found: dict[str, Any]) -> dict[str, Any] | None:
    hits = [d for d in found.values() if d is not None]
    return min(hits, key=lambda d: d["step"]) if hits else None


def describe(hit: dict[str, Any]) -> str:
    """One line for the gate's reasons: step, metric, and the size of the difference."""
    if hit["kind"] == "value":
        ulp = "n/a" if hit["ulp"] is None else f"{hit['ulp']} ULP ({hit['dtype']})"
        rel = "n/a" if hit["rel"] is None else f"{hit['rel']:.3g}"
        size = "n/a" if hit["abs"] is None else f"{hit['abs']:.3g}"
        return (
            f"first divergent step {hit['step']}: {hit['metric']} {hit['a_value']!r} vs "
            f"{hit['b_value']!r} (abs {size}, rel {rel}, {ulp})"
        )
    if hit["kind"] == "digest":
        what = "parameter digest" if hit["metric"] == DIGEST else f"{hit['metric']} (the input batch differs)"
        return f"first divergent step {hit['step']}: {what} {hit['a']} vs {hit['b']}"
    return f"first divergent step {hit['step']}: {hit['metric']} {hit['kind']}"
