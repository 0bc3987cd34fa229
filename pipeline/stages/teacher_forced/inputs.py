"""Everything a model declares, fed as LeRobot's training loader feeds it: state, cameras, task text,
past frames.

A model's inputs are its `input_features` (a list of keys, or LeRobot's `{key: PolicyFeature}` whose
`type` says VISUAL / STATE / LANGUAGE) or the configured `inputs`. A key is a camera when its type is
VISUAL or it is named `observation.image*`; `task` (or a LANGUAGE feature) asks for the task text.
`n_obs_steps` (on the model, its `config` or its `policy.config`) > 1 asks for past frames.

What the batch holds, per key in the model's order:
- vectors: float32 [B, D] (or [B, n, D] for `observation.*` keys when n_obs_steps = n > 1);
- cameras: float32 [B, 3, H, W] in 0-1, RGB ([B, n, 3, H, W] when n > 1), the frame reader's
  `processor_view` of exactly the sampled (episode, frame) rows;
- `task`: a list of B strings from meta/tasks (by the row's task_index), as LeRobot hands it.
Past frames before an episode's start repeat its first frame (LeRobot's loader clamps the index).

Frames are decoded once per stage for every camera any model reads, one seek per episode and camera,
and the decode time is kept apart from the models' time.

Under the training's rename map (dataset key -> policy key, `pipeline.readers.rename`) each policy
input is read from the dataset key renamed to it, as lerobot's preprocessor renames before the policy
sees a batch; the batch is keyed by the policy's names.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.readers.frames import FrameReader, processor_view
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.readers.rename import said
from pipeline.record.records import Check, Rows
from pipeline.stages.teacher_forced.compare import sig
from pipeline.stages.teacher_forced.samples import Frames, _ranks

ROWS = Rows("teacher_forced", "diagnostics")
TASK = "task"
TASK_INDEX = "task_index"


@dataclass
class Declared:
    """What one model reads, sorted by kind, in the model's own key order."""

    keys: list[str]
    vectors: list[str]
    cameras: list[str]
    language: bool
    n_obs_steps: int = 1
    shapes: dict[str, Any] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)  # policy key -> dataset key, the renamed ones

    def data_key(self, key: str) -> str:
        """The dataset key `key` is read from (itself unless the rename map renames one to it)."""
        return self.source.get(key, key)


def _kind(spec: Any) -> str:
    """A feature spec's type name: `{"type": "VISUAL"}`, a PolicyFeature (`FeatureType.VISUAL`), or ''."""
    kind = spec.get("type") if isinstance(spec, Mapping) else getattr(spec, "type", None)
    return str(getattr(kind, "name", None) or kind or "").upper()


def _shape(spec: Any) -> Any:
    shape = spec.get("shape") if isinstance(spec, Mapping) else getattr(spec, "shape", None)
    return list(shape) if shape is not None else None


def n_obs_steps(obj: Any) -> int:
    """The model's observation history length: its own attribute, its config's, or its policy's."""
    for holder in (obj, getattr(obj, "config", None), getattr(getattr(obj, "policy", None), "config", None)):
        value = getattr(holder, "n_obs_steps", None) if holder is not None else None
        if isinstance(value, int) and value >= 1:
            return value
    return 1


def declare(obj: Any, keys: Sequence[str], source: Mapping[str, str] | None = None) -> Declared:
    """Sort a model's input keys into vectors, cameras and the task text; `source`: policy key ->
    dataset key for the keys the rename map renames (`pipeline.readers.rename.sources`)."""
    features = getattr(obj, "input_features", None)
    specs = features if isinstance(features, Mapping) else {}
    vectors, cameras, language = [], [], False
    for key in keys:
        kind = _kind(specs.get(key))
        if key == TASK or kind == "LANGUAGE":
            language = True
        elif kind == "VISUAL" or key.startswith("observation.image"):
            cameras.append(key)
        else:
            vectors.append(key)
    shapes = {k: _shape(specs[k]) for k in keys if k in specs}
    renamed = {k: v for k, v in (source or {}).items() if k in keys}
    return Declared(list(keys), vectors, cameras, language, n_obs_steps(obj), shapes, renamed)


def missing(declared: Declared, data: LeRobotData) -> dict[str, str]:
    """Each declared input the dataset cannot supply, with why (empty: the model can be fed)."""
    features = data.features
    cams = set(data.video_keys()) | set(data.image_keys())
    out: dict[str, str] = {}
    source = declared.data_key
    for key in declared.vectors:
        if source(key) not in features:
            out[said(key, declared.source)] = "not a feature of the dataset"
        elif source(key) in cams:
            out[said(key, declared.source)] = "a camera in the dataset, declared as a vector by the model"
    for key in declared.cameras:
        if source(key) not in cams:
            out[said(key, declared.source)] = "no such camera (video or image feature) in the dataset"
    if declared.language and (TASK_INDEX not in features or not data.tasks()):
        out[TASK] = "the dataset has no task_index column or no meta/tasks"
    return out


def shape_differences(declared: Declared, data: LeRobotData) -> dict[str, str]:
    """Cameras whose declared [C, H, W] differs from the dataset's [H, W, C]: fed as decoded (the stage
    does not resize; a policy that resizes inside itself is fine, one that does not will fail or
    see another scale), so the row says so."""
    out: dict[str, str] = {}
    for key in declared.cameras:
        want, spec = declared.shapes.get(key), data.features.get(declared.data_key(key)) or {}
        have = spec.get("shape") if isinstance(spec, Mapping) else None
        if not (isinstance(want, list) and len(want) == 3 and isinstance(have, list) and len(have) == 3):
            continue
        if [int(v) for v in want] != [int(have[2]), int(have[0]), int(have[1])]:
            out[key] = f"declares [C,H,W] {want}, the dataset stores [H,W,C] {have}"
    return out


class Feeds:
    """The sampled rows' inputs for every model: pixels decoded once, views converted once."""

    def __init__(
        self, frames: Frames, rows: np.ndarray, declared: Mapping[str, Declared], max_shift: int = 0
    ) -> None:
        self.frames, self.rows, self.declared = frames, rows, dict(declared)
        self.max_shift = max_shift  # the probes' time shifts: frames +-1..+-max_shift rows away
        self.decode_s: dict[str, float] = {}
        self.failed: dict[str, str] = {}  # camera -> why its frames could not be decoded
        self._pixels: dict[str, np.ndarray] = {}
        self._views: dict[tuple[str, int, int], np.ndarray] = {}
        self.decoded_rows: dict[str, np.ndarray] = {}  # camera -> the sorted rows its pixels hold
        self._tasks: list[str] | None = None

    def past(self, n: int, shift: int = 0) -> np.ndarray:
        """[B, n] rows: the n frames ending at each sample (moved `shift` rows within its episode,
        clamped at its ends), the episode's first repeated before it."""
        episode = self.frames.episode
        order = np.lexsort((self.frames.frame, episode))
        place = np.empty(len(order), np.int64)
        place[order] = np.arange(len(order))
        rank, length = _ranks(episode, self.frames.frame)
        moved = np.clip(rank[self.rows] + shift, 0, length[self.rows] - 1)
        at = place[self.rows] - rank[self.rows] + moved
        back = np.arange(n - 1, -1, -1)[None, :]
        steps = np.minimum(back, moved[:, None])
        return order[at[:, None] - steps]

    def decode(self, data: LeRobotData) -> None:
        """Every camera any model reads, at the sampled rows (and their past rows), once."""
        depth: dict[str, int] = {}  # dataset camera -> the most past frames a model reads of it
        for d in self.declared.values():
            for key in map(d.data_key, d.cameras):
                depth[key] = max(depth.get(key, 1), d.n_obs_steps)
        if not depth:
            return
        reader = FrameReader(data)
        position, _ = _ranks(self.frames.episode, np.arange(len(self.frames)))  # index in file order
        shifts = range(-self.max_shift, self.max_shift + 1)
        for key, n in depth.items():
            needed = np.unique(np.concatenate([self.past(n, k).reshape(-1) for k in shifts]))
            start = time.perf_counter()
            try:
                self._pixels[key] = self._read(reader, key, needed, position)
                self.decoded_rows[key] = needed
            except InputError as exc:
                self.failed[key] = str(exc)
            self.decode_s[key] = time.perf_counter() - start

    def _read(self, reader: FrameReader, key: str, needed: np.ndarray, position: np.ndarray) -> np.ndarray:
        """One `frames` call (one seek) per episode, in the order of `needed`."""
        episodes = self.frames.episode[needed]
        parts: list[np.ndarray] = []
        for episode in np.unique(episodes):
            at = needed[episodes == episode]
            parts.append(reader.frames(key, int(episode), position[at].tolist()))
        shapes = {p.shape[1:] for p in parts}
        if len(shapes) > 1:
            raise InputError(f"{self.frames.root}: camera {key} changes frame size across episodes {shapes}")
        out = np.concatenate(parts)
        grouped = np.concatenate([np.flatnonzero(episodes == e) for e in np.unique(episodes)])
        result = np.empty_like(out)
        result[grouped] = out  # back from episode groups to the order of `needed`
        return result

    def frame_shapes(self) -> dict[str, list[int]]:
        """Each decoded camera's frame shape as decoded, [H, W, C]."""
        return {k: list(v.shape[1:]) for k, v in self._pixels.items()}

    def view(self, key: str, n: int, shift: int = 0) -> np.ndarray:
        """float32 0-1 [B, 3, H, W] (n = 1) or [B, n, 3, H, W], converted once per camera and depth;
        `shift`: the frames that many rows later (earlier if negative) in each sample's episode; `key`
        the dataset's camera."""
        if (key, n, shift) not in self._views:
            rows = self.past(n, shift)
            rows = rows[:, 0] if n == 1 else rows
            view = processor_view(self._pixels[key][np.searchsorted(self.decoded_rows[key], rows)])
            view.flags.writeable = False  # shared by every model and probe: one cannot alter another's
            self._views[(key, n, shift)] = view
        return self._views[(key, n, shift)]

    def shifted(self, name: str) -> dict[str, dict[int, np.ndarray]]:
        """Model `name`'s cameras at every time shift +-1..+-max_shift (the probes' alternatives)."""
        d = self.declared[name]
        shifts = [k for k in range(-self.max_shift, self.max_shift + 1) if k]
        return {key: {k: self.view(d.data_key(key), d.n_obs_steps, k) for k in shifts} for key in d.cameras}

    def tasks(self, data_root: Path) -> list[str]:
        """Each sample's task text (meta/tasks, by task_index)."""
        if self._tasks is None:
            table = LeRobotData(data_root).tasks() or []
            index = self.frames.columns[TASK_INDEX][self.rows].reshape(len(self.rows), -1)[:, 0]
            bad = [int(i) for i in index if not 0 <= int(i) < len(table)]
            if bad:
                where = data_root / "meta"
                raise InputError(f"{where}: task_index {bad[0]} not in meta/tasks ({len(table)} tasks)")
            self._tasks = [table[int(i)] for i in index]
        return self._tasks

    def batch(self, name: str) -> dict[str, Any]:
        """Model `name`'s inputs, in its declared order, keyed by its own names."""
        d = self.declared[name]
        past = self.past(d.n_obs_steps) if d.n_obs_steps > 1 else None
        out: dict[str, Any] = {}
        for key in d.keys:
            if key in d.cameras:
                out[key] = self.view(d.data_key(key), d.n_obs_steps)
            elif key in d.vectors:
                stacked = past is not None and key.startswith("observation.")
                out[key] = self.frames.columns[d.data_key(key)][past if stacked else self.rows]
            else:
                out[key] = list(self.tasks(self.frames.root))
        return out


def feedable(loaded: list, declared: Mapping[str, Any], dataset: Path) -> tuple[list, list[Check]]:
    """Models whose every declared input the dataset supplies; each other one is its `input.<model>` row."""
    data = LeRobotData(dataset)
    keep, rows = [], []
    for spec, model in loaded:
        lacking = missing(declared[spec.name], data)
        if lacking:
            rows.append(input_row(spec.name, lacking, data.root))
            continue
        keep.append((spec, model))
        sizes = shape_differences(declared[spec.name], data)
        if sizes:
            said = "; ".join(f"{k} {why}" for k, why in sizes.items())
            message = f"{spec.name}: {said}; fed as decoded, not resized"
            rows.append(
                ROWS(
                    f"input_shape.{spec.name}",
                    spec.name,
                    "mismatch",
                    message,
                    severity="soft",
                    actual=sorted(sizes),
                    evidence=sizes,
                )
            )
    return keep, rows


def input_row(name: str, lacking: Mapping[str, str], root: Path) -> Check:
    """`teacher_forced.input.<model>`: what the model declares that the dataset cannot supply."""
    said = "; ".join(f"{k}: {why}" for k, why in lacking.items())
    message = f"{name}: declares input(s) the dataset {root} cannot supply ({said}); not evaluated"
    return ROWS(f"input.{name}", name, "mismatch", message, actual=sorted(lacking), evidence=dict(lacking))


def decoded(loaded: list, feeds: Feeds) -> tuple[list, list[Check]]:
    """Models whose cameras decoded; a camera whose video is bad is each reader's input row."""
    keep, rows = [], []
    for spec, model in loaded:
        d = feeds.declared[spec.name]
        failed = {k: feeds.failed.get(d.data_key(k)) for k in d.cameras}
        bad = {said(k, d.source): why for k, why in failed.items() if why is not None}
        if bad:
            rows.append(input_row(spec.name, bad, feeds.frames.root))
        else:
            keep.append((spec, model))
    return keep, rows


def images_row(feeds: Feeds) -> list[Check]:
    """Decode time and sizes, kept apart from the models' inference time."""
    if not feeds.decode_s:
        return []
    total = sum(feeds.decode_s.values())
    frames = {k: int(len(v)) for k, v in feeds.decoded_rows.items()}
    message = (
        f"decoded {sum(frames.values())} frame(s) of {len(feeds.decode_s)} camera(s) in {sig(total, 3)} s "
        "(once for every model, one seek per episode and camera)"
    )
    evidence = {"decode_s": feeds.decode_s, "frames": frames, "shapes": feeds.frame_shapes()}
    return [
        ROWS("inputs.images", "images", "match", message, severity="soft", actual=total, evidence=evidence)
    ]
