"""Which base camera each dataset camera's frames fit, and in which channel order, decided jointly.

Why jointly: judged one at a time, two faults hide each other. In `demo=faulty` the front camera was
recorded BGR and then the two keys were exchanged: the key `front` holds the wrist's RGB frames and
`wrist` the front's BGR frames. Against the base's stats of its own key neither camera fits clearly
better reversed, and exchanged they fit only half better, so per-camera rows pass both faults. Every
hypothesis (an assignment of dataset keys to the base's camera keys, times each camera's channel order)
is scored instead, and the best one is compared with the data as named.

A camera's signature is its per-channel mean and, where both sides have it, its per-channel std, in
0-1 (LeRobot's image stats are per channel, shape (3, 1, 1)). The distance is their L1 difference.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

ORDERS = ("RGB", "BGR")
MAX_PERMUTED = 5  # cameras; beyond this only single exchanges are tried (5! = 120 assignments)


@dataclass(frozen=True)
class Signature:
    mean: np.ndarray  # (3,) in 0-1
    std: np.ndarray | None = None

    def distance(self, ref: Signature, order: str) -> float:
        flip = slice(None, None, -1) if order == "BGR" else slice(None)
        d = float(np.abs(self.mean[flip] - ref.mean).sum())
        if self.std is not None and ref.std is not None:
            d += float(np.abs(self.std[flip] - ref.std).sum())
        return d


@dataclass(frozen=True)
class Fit:
    """The best hypothesis against the data as named, and every distance it was chosen from."""

    assignment: dict[str, str]  # dataset key -> the base key whose stats its frames fit
    order: dict[str, str]  # dataset key -> "RGB" or "BGR" in the best hypothesis
    declared: float  # distance as named, RGB
    best: float
    decisive: bool  # the best differs from the data as named and fits clearly better
    distances: dict[str, dict[str, dict[str, float]]]  # dataset key -> base key -> order -> distance
    runner_up: float | None = None  # the best cost of any other assignment (None: no other was tried)

    def exchanged(self) -> list[str]:
        return [k for k, v in self.assignment.items() if k != v]

    def reversed(self) -> list[str]:
        return [k for k, v in self.order.items() if v == "BGR"]


def fit(
    decoded: dict[str, Signature],
    base: dict[str, Signature],
    swap_ratio: float,
    reversed_ratio: float,
    min_distance: float,
) -> Fit | None:
    """None when fewer than one camera has both decoded frames and base stats."""
    keys = [k for k in decoded if k in base]
    if not keys:
        return None
    table = {k: {j: {o: decoded[k].distance(base[j], o) for o in ORDERS} for j in keys} for k in keys}
    declared = sum(table[k][k]["RGB"] for k in keys)
    scored = []
    for targets in _assignments(keys):
        assignment = dict(zip(keys, targets, strict=True))
        order = {k: min(ORDERS, key=lambda o, k=k: table[k][assignment[k]][o]) for k in keys}
        scored.append((sum(table[k][assignment[k]][order[k]] for k in keys), assignment, order))
    cost, assignment, order = scored[0]  # as named first: an equal cost later does not replace it
    for candidate in scored[1:]:
        if candidate[0] < cost - 1e-12:
            cost, assignment, order = candidate
    others = [s[0] for s in scored if s[1] != assignment]
    runner_up = round(min(others), 4) if others else None
    moved = any(k != v for k, v in assignment.items())
    ratio = swap_ratio if moved else reversed_ratio
    changed = moved or any(o == "BGR" for o in order.values())
    decisive = changed and declared > min_distance and cost < ratio * declared
    if not decisive:
        assignment, order = {k: k for k in keys}, {k: "RGB" for k in keys}
    rounded = {
        k: {j: {o: round(d, 4) for o, d in v.items()} for j, v in row.items()} for k, row in table.items()
    }
    return Fit(assignment, order, round(declared, 4), round(cost, 4), decisive, rounded, runner_up)


def match_unnamed(
    decoded: dict[str, Signature], base: dict[str, Signature], min_distance: float
) -> dict[str, object] | None:
    """Dataset cameras no base camera is named after, against base cameras no dataset key provides:
    which assignment (in either channel order) fits best, and the best cost of any other, so that a
    rename map is offered only where one assignment clearly beats the rest. None where either side is
    empty, the sides differ in count, or the base's stats cannot tell two of its cameras apart."""
    spare = sorted(decoded)
    wanted = sorted(base)
    if (
        not spare
        or len(spare) != len(wanted)
        or len(spare) > MAX_PERMUTED
        or ties(base, wanted, min_distance)
    ):
        return None
    costs = []
    for targets in itertools.permutations(wanted):
        pairs = dict(zip(spare, targets, strict=True))
        costs.append(
            (sum(min(decoded[k].distance(base[j], o) for o in ORDERS) for k, j in pairs.items()), pairs)
        )
    costs.sort(key=lambda c: c[0])
    runner = round(costs[1][0], 4) if len(costs) > 1 else None
    return {"assignment": costs[0][1], "best": round(costs[0][0], 4), "runner_up": runner}


def ties(base: dict[str, Signature], keys: list[str], min_distance: float) -> list[tuple[str, str]]:
    """Pairs of these cameras whose reference stats lie within `min_distance` of each other: no fit can
    tell which of the two a camera's frames belong to (LeRobot's `use_imagenet_stats` gives every camera
    ImageNet's mean and std)."""
    have = [k for k in keys if k in base]
    return [
        (x, y) for x, y in itertools.combinations(have, 2) if base[x].distance(base[y], "RGB") <= min_distance
    ]


def _assignments(keys: list[str]) -> list[tuple[str, ...]]:
    if len(keys) <= MAX_PERMUTED:
        return list(itertools.permutations(keys))
    swaps = [tuple(keys)]
    for i, j in itertools.combinations(range(len(keys)), 2):
        t = list(keys)
        t[i], t[j] = t[j], t[i]
        swaps.append(tuple(t))
    return swaps
