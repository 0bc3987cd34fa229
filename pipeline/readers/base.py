"""The common shape every reader returns, and the safe ways they open files.

Each reader turns one format into a `Contract`: features in their declared order (key, role, shape,
names, dtype), the normalization mode per feature type, and per-feature stats. The contract stage only
reconciles `Contract`s, so a new format is one new reader, not a change to the reconciliation.

Every open goes through the helpers here: JSON/YAML with safe loaders, safetensors with the header
validated against the file size before the library maps it, numpy with `allow_pickle=False`, and paths
from manifests resolved inside their root. Bad input raises `InputError` naming file, field and what was
expected; the stage turns it into an `error` row and the gate still writes its record.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.normalization import ROLE_OF_TYPE, ROLES, TYPE_OF_ROLE  # noqa: F401  (re-exported)
from pipeline.readers.carries import Carries
from pipeline.storage.files import (
    MAX_JSONL_BYTES,
    load_yaml,
    parse_json,
    read_json,  # noqa: F401  (re-exported: it lived here)
    read_text,
    regular_file,
    utf8_name,
)

# Keys that mean "the robot state" or "the action" across ecosystems (LeRobot, openpi, OpenVLA, robomimic).
STATE_ALIASES = (
    "observation.state",
    "state",
    "states",
    "obs_state",
    "proprio",
    "qpos",
    "robot_state",
    "observation/state",
    "observations",
    "obs/robot0_proprio-state",
)
ACTION_ALIASES = ("action", "actions")
ENV_ALIASES = ("observation.environment_state", "environment_state", "env_state")
MAX_HEADER = 100 * 2**20


@dataclass
class Feature:
    """One feature as a source sees it; `None` means the source does not say."""

    key: str
    role: str
    shape: tuple[int, ...] | None = None
    names: list[str] | None = None
    dtype: str | None = None

    @property
    def type(self) -> str:
        return TYPE_OF_ROLE.get(self.role, "OTHER")

    @property
    def dim(self) -> int | None:
        if self.shape is None or self.role == "image":
            return None
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass
class Contract:
    """What one source (A base checkpoint, B training config, C dataset) says about the data contract."""

    source: str
    kind: str
    path: str
    features: dict[str, Feature] = field(default_factory=dict)
    norm_map: dict[str, str] = field(default_factory=dict)
    stats: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    inferred: bool = False
    hints: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def mode(self, feature: Feature) -> str | None:
        return self.norm_map.get(feature.type)

    def by_role(self, role: str) -> list[Feature]:
        return [f for f in self.features.values() if f.role == role]


@dataclass
class DatasetContract(Contract):
    """(C) plus what only the data can say: recomputed stats, row counts, images, dynamics samples."""

    recomputed: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    rows: int = 0
    episodes: int = 0
    claimed: dict[str, Any] = field(default_factory=dict)
    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    dynamics: dict[str, np.ndarray] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    shipped_ranks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)  # `readers.health.HealthScan.facts()`
    carries: Carries = field(default_factory=Carries)  # what the format holds by design (`readers.carries`)


def role_of(key: str, shape: tuple[int, ...] | None = None, dtype: str | None = None) -> str:
    """Guess a feature's role from its key (and image-like shape/dtype), the way LeRobot types features."""
    low = key.lower()
    if (
        dtype in ("video", "image")
        or "image" in low
        or "rgb" in low
        or (shape is not None and len(shape) == 3)
    ):
        return "image"
    if low in ACTION_ALIASES or low.endswith((".action", "/actions", "/action")):
        return "action"
    if low in ENV_ALIASES or "environment_state" in low:
        return "env"
    if low in STATE_ALIASES or low.endswith((".state", "/state", "_state")) or "proprio" in low:
        return "state"
    return "other"


def read_jsonl(path: Path, what: str = "JSON lines") -> list[Any]:
    """JSON lines; each non-empty line parsed on its own so an error names its line."""
    lines = read_text(path, what, MAX_JSONL_BYTES).splitlines()
    return [parse_json(line, path, what, f"line {n}") for n, line in enumerate(lines, 1) if line.strip()]


def read_yaml(path: Path, what: str = "YAML") -> Any:
    """YAML through the bounded safe loader (no bombs, no deep nesting, dates as strings)."""
    return load_yaml(path, what)


def require(mapping: Any, key: str, path: Path, expected: str, where: str = "") -> Any:
    """`mapping[key]`, or an InputError naming the file, the dotted field and what was expected."""
    dotted = f"{where}.{key}" if where else key
    if not isinstance(mapping, dict):
        raise InputError(
            f"{path}: field '{where or '<root>'}' must be an object containing '{key}' "
            f"({expected}); got {type(mapping).__name__}",
            path=path,
            field=where or key,
        )
    if key not in mapping:
        raise InputError(f"{path}: missing field '{dotted}' (expected {expected})", path=path, field=dotted)
    return mapping[key]


def typed_features(raw: Any, path: Path, where: str) -> dict[str, Feature]:
    """LeRobot's `{key: {type: STATE|ACTION|VISUAL|ENV, shape: [...]}}` (config.json, processors, B)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: field '{where}' must be an object of features", path=path, field=where)
    out = {}
    for key, spec in raw.items():
        ftype = require(spec, "type", path, "STATE | ACTION | VISUAL | ENV", f"{where}.{key}")
        shape = require(spec, "shape", path, "a list of ints", f"{where}.{key}")
        role = ROLE_OF_TYPE.get(str(ftype), "other")
        out[key] = Feature(key, role, declared_shape(shape, path, f"{where}.{key}.shape"), spec.get("names"))
    return out


def dims_of(shape: Any) -> tuple[int, ...]:
    """A declared shape as non-negative ints (6, 6.0 and "6" are 6); ValueError for "six", -1, 2.5, {}."""
    if not isinstance(shape, (list, tuple)):
        raise ValueError(f"expected a list of ints, got {type(shape).__name__}")
    out = []
    for s in shape:
        ok = isinstance(s, int) or (isinstance(s, float) and s.is_integer()) or str(s).isdigit()
        if isinstance(s, bool) or not ok or int(s) < 0:
            raise ValueError(f"{s!r} is not a non-negative integer")
        out.append(int(s))
    return tuple(out)


def declared_shape(shape: Any, path: Path, where: str) -> tuple[int, ...]:
    """`dims_of` for a field of `path`: anything but non-negative ints is an InputError naming it."""
    try:
        return dims_of(shape)
    except ValueError as exc:
        raise InputError(
            f"{path}: field '{where}' must be a list of non-negative ints; got {shape!r} ({exc})",
            path=path,
            field=where,
        ) from exc


def norm_map_of(raw: Any, path: Path, where: str) -> dict[str, str]:
    """A `{feature type: mode}` mapping, upper-cased; anything else names the field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise InputError(
            f"{path}: field '{where}' must map feature types to modes (e.g. STATE: QUANTILES)",
            path=path,
            field=where,
        )
    return {str(k).upper(): str(v).upper() for k, v in raw.items()}


def inside(root: Path, relative: str | Path, what: str = "path") -> Path:
    """Resolve a manifest-supplied path and refuse one that escapes `root` (.., absolute, symlinks)."""
    utf8_name(root, relative, what)
    try:
        root = Path(root).resolve()
        candidate = (root / relative).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise InputError(
            f"{root}: {what} '{relative}' cannot be resolved: {exc}", path=root, field=what
        ) from exc
    if candidate != root and root not in candidate.parents:
        raise InputError(
            f"{root}: {what} '{relative}' resolves to {candidate}, outside the dataset root",
            path=root,
            field=what,
        )
    return candidate


_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": None,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


def safetensors_header(path: Path) -> dict[str, Any]:
    """Parse and validate a safetensors header ourselves before any library maps the file."""
    path = Path(path)
    size = regular_file(path, "safetensors").st_size
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise InputError(
                    f"{path}: {size} bytes, too short for a safetensors header length "
                    "(expected an 8-byte little-endian length)",
                    path=path,
                    field="header",
                )
            (length,) = struct.unpack("<Q", head)
            if length > size - 8 or length > MAX_HEADER:
                raise InputError(
                    f"{path}: header length {length} is larger than the file allows "
                    f"({size - 8} bytes after the length); truncated or not safetensors",
                    path=path,
                    field="header",
                )
            raw = handle.read(length)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found (expected safetensors)", path=path) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(
            f"{path}: safetensors header is not valid JSON: {type(exc).__name__}: {exc}",
            path=path,
            field="header",
        ) from exc
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header must be a JSON object", path=path, field="header")
    _check_offsets(path, header, size - 8 - length)
    return header


def _check_offsets(path: Path, header: dict[str, Any], body: int) -> None:
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(v) for v in info["data_offsets"])
            dtype, shape = info["dtype"], [int(s) for s in info["shape"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{path}: tensor '{name}' has no valid dtype/shape/data_offsets", path=path, field=name
            ) from exc
        if any(s < 0 for s in shape):
            raise InputError(
                f"{path}: tensor '{name}' has a negative dimension in shape {shape}",
                path=path,
                field=f"{name}.shape",
            )
        if not 0 <= start <= end <= body:
            raise InputError(
                f"{path}: tensor '{name}' data_offsets [{start}, {end}] exceed the "
                f"{body}-byte data section (file truncated?)",
                path=path,
                field=name,
            )
        np_dtype = _DTYPES.get(dtype, "?")
        if np_dtype == "?":
            raise InputError(f"{path}: tensor '{name}' has unknown dtype {dtype!r}", path=path, field=name)
        itemsize = 2 if np_dtype is None else np.dtype(np_dtype).itemsize
        if (end - start) != int(np.prod(shape, dtype=np.int64)) * itemsize:
            raise InputError(
                f"{path}: tensor '{name}' shape {shape} {dtype} does not fit its {end - start} bytes",
                path=path,
                field=name,
            )


def read_safetensors(path: Path, keep: Callable[[str], bool] | None = None) -> dict[str, np.ndarray]:
    """Tensors as numpy arrays (bf16 widened to float32 by hand); the header is validated first.

    `keep(name)` selects tensors by name before any data is read, so picking the normalization
    buffers out of a multi-GB `model.safetensors` reads only those bytes.
    """
    path = Path(path)
    header = safetensors_header(path)
    out: dict[str, np.ndarray] = {}
    with path.open("rb") as handle:
        (hlen,) = struct.unpack("<Q", handle.read(8))
        base = 8 + hlen
        for name, info in header.items():
            if name == "__metadata__" or (keep is not None and not keep(name)):
                continue
            start, end = info["data_offsets"]
            handle.seek(base + start)
            raw = handle.read(end - start)
            out[name] = _decode(raw, info["dtype"], info["shape"])
    return out


def _decode(raw: bytes, dtype: str, shape: list[int]) -> np.ndarray:
    if dtype == "BF16":
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<")).reshape(shape).copy()


def as_vector(value: Any, path: Path, field_name: str) -> np.ndarray:
    """A stats entry as a float64 array; non-numeric content is an InputError naming the field."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{path}: field '{field_name}' must be a number or list of numbers", path=path, field=field_name
        ) from exc
    return arr


def stats_block(raw: Any, path: Path, where: str) -> dict[str, np.ndarray]:
    """{stat: array} from a JSON object of lists (LeRobot stats.json, openpi, OpenVLA entries)."""
    if not isinstance(raw, dict):
        raise InputError(
            f"{path}: field '{where}' must be an object of stats (mean, std, ...); got {type(raw).__name__}",
            path=path,
            field=where,
        )
    out = {}
    for stat, value in raw.items():
        if isinstance(value, (list, int, float)):
            out[str(stat)] = as_vector(value, path, f"{where}.{stat}")
    return out


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"
