"""The repeat scan's two loops, compiled (numba, cached): each block's window hashes, and the table of
window hashes seen so far as an open-addressing hash table.

Why: in numpy the window hashes were W passes over the block plus a mask, a cumulative sum and their
temporaries, and the table two sorted arrays, searched (`searchsorted`) and rebuilt (`np.insert`, a copy
of the whole table) per block: together a third of the health pass at 7 M rows. Compiled, a window costs
its W multiply-adds and one probe. The results are the numpy path's (`readers/repeats.py`, kept as the
reference and the fallback): the same kept windows in the same order, and for each the place its hash
was first seen, so the same matches in the same arrival order.

The table: `keys` (the window hash) and `places` (episode * 2^32 + frame where it was first seen), a
power-of-two number of slots, linear probing from the hash's high bits (the kept hashes share their low
bits: they are the sampled ones), EMPTY in `places` for a free slot. It grows (doubles) before it is
GROW full; thinning (the scan's `sample` doubling) rebuilds it from the entries that stay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

EMPTY = np.iinfo(np.int64).min  # a free slot's place (a real one would be episode -2^31, frame 0)
GROW = 0.7  # the load past which the table doubles
_FIB = 0x9E3779B97F4A7C15  # Fibonacci hashing: the slot is the top bits of key x this
_COMPILED: dict[str, Callable[..., Any]] = {}


def _windows_loop(h, e, p, fresh, mix, salt, powers, busy, mask, out_h, out_e, out_p):  # type: ignore[no-untyped-def]
    """Mix the block's row hashes (h[fresh:]; h[:fresh] are the carried, already mixed rows), then
    write each kept window's (hash, episode, first frame) to out_*; returns how many."""
    window = powers.shape[0]
    last = window - 1
    s31 = np.uint64(31)
    for i in range(fresh, h.shape[0]):
        v = h[i]
        h[i] = (v ^ (v >> s31)) * mix
    m = h.shape[0] - last
    need = (last + 1) // 2 if busy else 1
    changes = 0
    for t in range(1, min(last + 1, h.shape[0])):
        changes += int(h[t] != h[t - 1])
    kept = 0
    for i in range(m):
        if i > 0:
            changes += int(h[i + last] != h[i + last - 1]) - int(h[i] != h[i - 1])
        if changes < need or e[i] != e[i + last] or p[i + last] - p[i] != last:
            continue
        wh = salt
        for k in range(window):
            wh += h[i + k] * powers[k]
        if (wh & mask) == 0:
            out_h[kept], out_e[kept], out_p[kept] = wh, e[i], p[i]
            kept += 1
    return kept


def _probe(table, key, shift):  # type: ignore[no-untyped-def]
    """The slot holding `key` (int64 bits of the hash), else the free slot where it goes."""
    last = np.uint64(table.shape[0] - 1)
    slot = (np.uint64(key) * np.uint64(_FIB)) >> np.uint64(shift)
    while table[slot, 1] != EMPTY and table[slot, 0] != key:
        slot = (slot + np.uint64(1)) & last
    return slot


def _see_loop(keys, places, start, table, shift, count, limit, hit_place, hit_lead):  # type: ignore[no-untyped-def]
    """From keys[start]: look each key up, inserting it (with its place) where new; a key whose first
    place is another episode's is a hit (its place and that first place, in arrival order). Stops
    before the table would pass `limit` entries; returns (next key, entries, hits written)."""
    hits = 0
    for j in range(start, keys.shape[0]):
        if count >= limit:
            return j, count, hits
        key, place = keys[j], places[j]
        slot = _probe(table, key, shift)
        if table[slot, 1] == EMPTY:
            table[slot, 0], table[slot, 1] = key, place
            count += 1
        lead = table[slot, 1]
        if (lead >> 32) != (place >> 32):
            hit_place[hits], hit_lead[hits] = place, lead
            hits += 1
    return keys.shape[0], count, hits


def _move_loop(old, table, shift, mask):  # type: ignore[no-untyped-def]
    """Every entry of `old` whose hash has no bit of `mask` set, into the empty `table`; returns how
    many (their keys are distinct: each goes to a free slot)."""
    count = 0
    for i in range(old.shape[0]):
        key = old[i, 0]
        if old[i, 1] != EMPTY and (np.uint64(key) & mask) == 0:
            slot = _probe(table, key, shift)
            table[slot, 0], table[slot, 1] = key, old[i, 1]
            count += 1
    return count


def _kept_loop(table, mask, out):  # type: ignore[no-untyped-def]
    """The entries of `table` whose hash has no bit of `mask` set, copied to the front of `out`, in
    slot order; returns how many."""
    n = 0
    for i in range(table.shape[0]):
        if table[i, 1] != EMPTY and (np.uint64(table[i, 0]) & mask) == 0:
            out[n, 0], out[n, 1] = table[i, 0], table[i, 1]
            n += 1
    return n


def _compiled(name: str) -> Callable[..., Any]:
    if name not in _COMPILED:
        import numba

        try:
            jit = numba.njit(cache=True, nogil=True)
            probe = jit(_probe)
        except RuntimeError:  # read-only install and home: compiled on every launch, not cached
            jit = numba.njit(nogil=True)
            probe = jit(_probe)
        globals()["_probe"] = probe  # the loops call the compiled probe (numba resolves it as a global)
        loops = {"windows": _windows_loop, "see": _see_loop, "move": _move_loop, "kept": _kept_loop}
        _COMPILED.update({k: jit(loop) for k, loop in loops.items()})
    return _COMPILED[name]


def windows(
    carry: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: np.ndarray,
    ep: np.ndarray,
    pos: np.ndarray,
    mix: np.uint64,
    salt: np.uint64,
    powers: np.ndarray,
    busy: bool,
    every: int,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(the kept windows' hashes, episodes, frames), and the new carry (the last window - 1 rows)."""
    h = np.concatenate([carry[0], np.asarray(rows, np.uint64)])
    e = np.concatenate([carry[1], np.asarray(ep, np.int64)])
    p = np.concatenate([carry[2], np.asarray(pos, np.int64)])
    last = len(powers) - 1
    m = max(len(h) - last, 0)
    out = np.empty(m, np.uint64), np.empty(m, np.int64), np.empty(m, np.int64)
    kept = _compiled("windows")(h, e, p, len(carry[0]), mix, salt, powers, busy, np.uint64(every - 1), *out)
    tail = (h[len(h) - last :].copy(), e[len(e) - last :].copy(), p[len(p) - last :].copy())
    return (out[0][:kept], out[1][:kept], out[2][:kept]), tail


class HashTable:
    """Window hash -> the place it was first seen, open addressing (see the module's docstring): one
    [slots, 2] int64 array (the hash's bits, the place), so that a probe touches one cache line."""

    def __init__(self, slots: int = 1 << 16):
        self.table = _empty(slots)
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def see(self, keys: np.ndarray, places: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Insert the new keys in order; returns the hits (place, first place), in arrival order."""
        keys = np.asarray(keys, np.uint64).view(np.int64)
        places = np.asarray(places, np.int64)
        hit_place, hit_lead = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
        done, hits, loop = 0, 0, _compiled("see")
        while done < len(keys):
            limit = int(GROW * len(self.table))
            if self.count >= limit:
                self._move(2 * len(self.table), 1)
                continue
            done, self.count, found = loop(
                keys, places, done, self.table, _shift(self.table), self.count, limit,
                hit_place[hits:], hit_lead[hits:],
            )  # fmt: skip
            hits += found
        return hit_place[:hits], hit_lead[:hits]

    def thin(self, sample: int) -> None:
        """Keep only the entries whose hash is 0 modulo `sample` (a power of two), in the same table:
        the kept entries copied out, the table emptied and they put back (a fresh table of the same
        size cost ~0.2 s a thinning at 8 M slots, its pages faulted in and zeroed by the kernel)."""
        kept = np.empty((self.count, 2), np.int64)
        kept = kept[: _compiled("kept")(self.table, np.uint64(sample - 1), kept)]
        self.table[:, 1] = EMPTY
        self.count = _compiled("move")(kept, self.table, _shift(self.table), np.uint64(0))

    def _move(self, slots: int, sample: int) -> None:
        """Into a new table of `slots`: the entries whose hash is 0 modulo `sample`."""
        old, self.table = self.table, _empty(slots)
        self.count = _compiled("move")(old, self.table, _shift(self.table), np.uint64(sample - 1))


def slots_for(rows: int | None, max_kept: int) -> int:
    """The table's first size for a scan expected to see `rows` rows: room for as many windows as it
    may keep (a window per row, the busy streams' few more, never past `max_kept`) below GROW, so that a
    large dataset does not pay the tables it would outgrow (each a fresh allocation: ~0.45 s of page
    faults at 7 M rows); unknown or small, 2^16 slots, grown as needed."""
    wanted = min(int(rows or 0) * 5 // 4, max_kept)
    slots = 1 << 16
    while wanted >= GROW * slots:
        slots *= 2
    return slots


def _empty(slots: int) -> np.ndarray:
    table = np.zeros((slots, 2), np.int64)
    table[:, 1] = EMPTY
    return table


def _shift(table: np.ndarray) -> int:
    """The right shift that leaves log2(slots) top bits of the 64-bit product."""
    return 64 - (len(table).bit_length() - 1)
