"""Minimum-cost assignment for permutation detection (scipy is not a dependency).

Exact for the sizes that matter: the Hungarian algorithm (O(n^3), Jonker-Volgenant style potentials)
handles a few hundred dims in milliseconds; `greedy` is the fallback for very wide features.
"""

from __future__ import annotations

import numpy as np

EXACT_LIMIT = 512


def hungarian(cost: np.ndarray) -> np.ndarray:
    """`assign[i]` = column matched to row i, minimizing the total cost (square matrix)."""
    cost = np.asarray(cost, dtype=np.float64)
    n = cost.shape[0]
    u, v = np.zeros(n + 1), np.zeros(n + 1)
    p = np.zeros(n + 1, dtype=np.int64)  # p[j]: row matched to column j (1-based, 0 = none)
    way = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        p[0] = i
        j0 = 0
        minv = np.full(n + 1, np.inf)
        used = np.zeros(n + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = p[j0]
            cur = cost[i0 - 1, :] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            candidates = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(candidates)) + 1
            delta = candidates[j1 - 1]
            u[p[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    assign = np.zeros(n, dtype=np.int64)
    for j in range(1, n + 1):
        assign[p[j] - 1] = j - 1
    return assign


def greedy(cost: np.ndarray) -> np.ndarray:
    """Cheapest remaining pair first; not optimal, but O(n^2 log n) for very wide features."""
    n = cost.shape[0]
    order = np.argsort(cost, axis=None, kind="stable")
    assign = np.full(n, -1, dtype=np.int64)
    taken = np.zeros(n, dtype=bool)
    for flat in order:
        i, j = divmod(int(flat), n)
        if assign[i] < 0 and not taken[j]:
            assign[i], taken[j] = j, True
    return assign


def assign(cost: np.ndarray) -> np.ndarray:
    return hungarian(cost) if cost.shape[0] <= EXACT_LIMIT else greedy(cost)
