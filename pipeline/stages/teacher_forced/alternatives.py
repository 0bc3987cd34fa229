"""The likely alternative readings of a dataset that the counterfactual probes try (probes.py).

Cameras: one camera's channels reversed (BGR), every camera x255 or /255, two cameras exchanged; each
camera rotated 180 degrees, flipped left-right or up-down, grey, and its frames shifted +-1..+-L rows in
time within their episode (issue 34).
Vectors: the contract stage's suspects (a permutation, a sign, a unit) are not reachable from this
stage (it runs beside the contract stage, not after it), so the likely ones are generated here from
the model's declared vector inputs and the dataset's action:
- each vector input (e.g. observation.state, D dims): every pair of dims exchanged, each dim's sign
  flipped, each dim x180/pi and xpi/180 (degrees vs radians);
- the targets (the dataset's action): each dim xpi/180 and x180/pi (the dataset recorded it in other
  units than the model predicts) and its sign flipped.
An input alternative changes what the model is fed (one forward pass of the samples); a target
alternative changes only what its predictions are scored against (no forward pass). Dims are named
from the dataset's info.json where it has names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

DEG = 180.0 / np.pi
Batch = dict[str, Any]


@dataclass(frozen=True)
class Alternative:
    """One alternative reading: its row-id part, its wording, and what it transforms (the model's
    batch, or the targets (N, H, D)). `control`: what it must fit better than to be kept. A dim
    xpi/180 is almost that dim zeroed, so it "fits better" whenever the model ignores the dim or
    predicts ~0 for it (a weak or blind dim, an out-of-range input); only beating the zeroed dim
    says that the values are radians. A dim x180/pi pushes the input far out of range, which can move a
    barely trained model's outputs nearer the targets whatever the values say (a 50-step ACT: 10 %);
    only beating the same magnitudes moved to other samples says that the values, in place, fit better.
    `dims`: the action dims a target alternative changes, the only ones where it and its control
    differ, so the only ones they are compared on (empty: an input alternative, whose predictions may
    change in every dim)."""

    part: str
    wording: str
    kind: str  # camera | vector | target
    inputs: Callable[[Batch], Batch] | None = None
    target: Callable[[np.ndarray], np.ndarray] | None = None
    control: Alternative | None = None
    dims: tuple[int, ...] = ()


def _channels_reversed(key: str) -> Callable[[Batch], Batch]:
    return lambda b: {**b, key: np.ascontiguousarray(np.flip(b[key], axis=-3))}


def _scaled(keys: list[str], factor: float) -> Callable[[Batch], Batch]:
    return lambda b: {**b, **{k: (b[k] * np.float32(factor)).astype(np.float32) for k in keys}}


def _exchanged(a: str, b: str) -> Callable[[Batch], Batch]:
    return lambda batch: {**batch, a: batch[b], b: batch[a]}


def _flipped(key: str, axes: tuple[int, ...]) -> Callable[[Batch], Batch]:
    return lambda b: {**b, key: np.ascontiguousarray(np.flip(b[key], axis=axes))}


def _grey(key: str) -> Callable[[Batch], Batch]:
    def apply(b: Batch) -> Batch:
        mean = np.asarray(b[key]).mean(axis=-3, keepdims=True, dtype=np.float32)
        return {**b, key: np.ascontiguousarray(np.repeat(mean, 3, axis=-3))}

    return apply


def _shifted(
    key: str, k: int, declared: Mapping[str, Any], shifted: Mapping[str, Mapping[int, Any]]
) -> Callable[[Batch], Batch]:
    """The frames `key` holds now, k rows later: where it holds a camera's frames as declared (itself, or
    another camera's after an exchange was kept) they are that camera's shifted frames; where an earlier
    kept step transformed them (channels, scale, view) no shifted copy exists and nothing changes."""

    def apply(b: Batch) -> Batch:
        source = next((c for c, v in declared.items() if b[key] is v), None)
        return b if source is None else {**b, key: shifted[source][k]}

    return apply


def views(keys: Sequence[str]) -> Iterator[Alternative]:
    """What per-channel stats cannot see ([..., C, H, W]): a camera mounted upside down or mirrored
    (LeRobot's camera configs carry a `rotation` for this), or grey where the model saw colour."""
    for key in keys:
        yield Alternative(f"rotated180:{key}", f"{key} rotated 180 degrees", "view", _flipped(key, (-2, -1)))
        yield Alternative(f"flipped_lr:{key}", f"{key} flipped left-right", "view", _flipped(key, (-1,)))
        yield Alternative(f"flipped_ud:{key}", f"{key} flipped up-down", "view", _flipped(key, (-2,)))
        yield Alternative(f"grey:{key}", f"{key} in grey (three equal channels)", "view", _grey(key))


def shifts(
    shifted: Mapping[str, Mapping[int, np.ndarray]], batch: Mapping[str, Any]
) -> Iterator[Alternative]:
    """A camera recorded late or early: its frames from k rows later (or earlier) in the same episode,
    clamped at the episode's ends. A model that fits frames k later better says the camera lags k."""
    declared = {key: batch[key] for key in shifted}
    for key, by_shift in shifted.items():
        for k in sorted(by_shift, key=lambda k: (abs(k), k)):
            wording = f"{key}'s frames {abs(k)} row(s) {'later' if k > 0 else 'earlier'}"
            if k > 0:
                wording += f" (the camera lags the state by {k} frame(s))"
            else:
                wording += f" (the camera leads the state by {-k} frame(s))"
            yield Alternative(f"shifted:{key}[{k:+d}]", wording, "time", _shifted(key, k, declared, shifted))


def cameras(keys: Sequence[str], batch: Mapping[str, Any]) -> Iterator[Alternative]:
    """Every alternative reading of the model's cameras (pairs of unequal shape cannot be exchanged)."""
    for key in keys:
        yield Alternative(f"bgr:{key}", f"{key}'s channels reversed (BGR)", "camera", _channels_reversed(key))
    if keys:
        wording = "the images x255 (0-255 instead of 0-1)"
        yield Alternative("scaled:x255", wording, "camera", _scaled(list(keys), 255.0))
        yield Alternative("scaled:div255", "the images /255", "camera", _scaled(list(keys), 1 / 255.0))
    for a, b in combinations(keys, 2):
        if np.shape(batch[a]) == np.shape(batch[b]):
            yield Alternative(f"exchanged:{a}|{b}", f"{a} and {b} exchanged", "camera", _exchanged(a, b))


def _label(names: Sequence[str] | None, d: int) -> str:
    """`3 wrist_1.pos` (with the dataset's name) or `3`."""
    return f"{d} {names[d]}" if names and d < len(names) and names[d] else str(d)


def _said(names: Sequence[str] | None, d: int) -> str:
    """`3 (wrist_1.pos)` or `3`, for sentences."""
    return f"{d} ({names[d]})" if names and d < len(names) and names[d] else str(d)


def _dims_exchanged(key: str, i: int, j: int) -> Callable[[Batch], Batch]:
    def apply(b: Batch) -> Batch:
        out = np.array(b[key], copy=True)
        out[..., [i, j]] = out[..., [j, i]]
        return {**b, key: out}

    return apply


def _dim_scaled(key: str, d: int, factor: float) -> Callable[[Batch], Batch]:
    def apply(b: Batch) -> Batch:
        out = np.array(b[key], copy=True)
        out[..., d] = out[..., d] * factor
        return {**b, key: out}

    return apply


def _elsewhere(make: Callable[[Batch], Batch], key: str, dims: Sequence[int]) -> Callable[[Batch], Batch]:
    """`make`, then `dims` of the input handed to other samples (rolled by half the batch): the same
    values with none of this sample's information, the control an input alternative must beat."""

    def apply(b: Batch) -> Batch:
        out = make(b)
        values = np.array(out[key], copy=True)
        values[..., list(dims)] = np.roll(values[..., list(dims)], len(values) // 2, axis=0)
        return {**out, key: values}

    return apply


def _controlled(
    part: str, wording: str, make: Callable[[Batch], Batch], key: str, dims: Sequence[int]
) -> Alternative:
    """An input alternative whose control is itself with `dims` of the input moved to other samples."""
    control = Alternative(
        f"elsewhere.{part}",
        f"{wording}, the values moved to other samples",
        "vector",
        _elsewhere(make, key, dims),
    )
    return Alternative(part, wording, "vector", make, control=control)


def _target_scaled(d: int, factor: float) -> Callable[[np.ndarray], np.ndarray]:
    def apply(truth: np.ndarray) -> np.ndarray:
        out = np.array(truth, copy=True)
        out[..., d] = out[..., d] * factor
        return out

    return apply


def vectors(key: str, dims: int, names: Sequence[str] | None) -> Iterator[Alternative]:
    """One vector input's alternatives: pairs exchanged, then signs, then units, each against a control
    it must beat by the margin. Exchanges and signs: themselves with the whole input moved to other
    samples, so the same values per dim, none of them this sample's: a model that reads the input gains
    from the fix only with the sample's own values (demo=faulty's exchanged state dims, -99.8 %), one that
    barely reads it (a 50-step ACT, 10 % nearer with two state dims exchanged) gains as much without.
    Moving only the changed dims kept their means, where demo=faulty's fix lies, and lost it. Units:
    xpi/180 the dim zeroed, x180/pi itself with the dim's values moved to other samples."""
    every = tuple(range(dims))
    for i, j in combinations(every, 2):
        part = f"exchanged:{key}[{_label(names, i)} <-> {_label(names, j)}]"
        wording = f"{key} dims {_said(names, i)} and {_said(names, j)} exchanged"
        yield _controlled(part, wording, _dims_exchanged(key, i, j), key, every)
    for d in every:
        wording = f"{key} dim {_said(names, d)} sign-flipped"
        yield _controlled(f"sign:{key}[{_label(names, d)}]", wording, _dim_scaled(key, d, -1.0), key, every)
    for d in range(dims):
        at = f"{key}[{_label(names, d)}]"
        said = f"{key} dim {_said(names, d)}"
        yield _controlled(
            f"x180/pi:{at}", f"{said} x180/pi (in degrees)", _dim_scaled(key, d, DEG), key, (d,)
        )
        zeroed = Alternative(f"zeroed:{at}", f"{said} zeroed", "vector", _dim_scaled(key, d, 0.0))
        to_radians = _dim_scaled(key, d, 1 / DEG)
        yield Alternative(f"xpi/180:{at}", f"{said} xpi/180 (in radians)", "vector", to_radians, None, zeroed)


def targets(key: str, dims: int, names: Sequence[str] | None) -> Iterator[Alternative]:
    """The targets' alternatives: each action dim recorded in other units, or with its sign flipped."""
    for d in range(dims):
        at, said = f"{key}[{_label(names, d)}]", f"the targets' {key} dim {_said(names, d)}"
        yield Alternative(
            f"target.xpi/180:{at}",
            f"{said} xpi/180 (the dataset recorded degrees, the model predicts radians)",
            "target",
            target=_target_scaled(d, 1 / DEG),
            control=Alternative(
                f"target.zeroed:{at}", f"{said} zeroed", "target", target=_target_scaled(d, 0.0), dims=(d,)
            ),
            dims=(d,),
        )
        yield Alternative(
            f"target.x180/pi:{at}",
            f"{said} x180/pi (the dataset recorded radians, the model predicts degrees)",
            "target",
            target=_target_scaled(d, DEG),
        )
        yield Alternative(
            f"target.sign:{at}", f"{said} sign-flipped", "target", target=_target_scaled(d, -1.0)
        )


def generate(
    camera_keys: Sequence[str],
    vector_keys: Sequence[str],
    batch: Mapping[str, Any],
    names: Mapping[str, Sequence[str] | None],
    action_key: str,
    action_dims: int,
    shifted: Mapping[str, Mapping[int, np.ndarray]] | None = None,
) -> list[Alternative]:
    """Every alternative, cheapest and likeliest first: cameras (their channels, scale and keys, then
    their orientation and time), the targets (no forward pass), then each vector input's (a cap on
    their number drops the last)."""
    out = list(cameras(camera_keys, batch)) + list(views(camera_keys)) + list(shifts(shifted or {}, batch))
    out += targets(action_key, action_dims, names.get(action_key))
    for key in vector_keys:
        value = batch.get(key)
        if isinstance(value, np.ndarray) and value.ndim >= 2 and np.issubdtype(value.dtype, np.floating):
            out += vectors(key, int(value.shape[-1]), names.get(key))
    return out
