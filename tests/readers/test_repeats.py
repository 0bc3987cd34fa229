"""Repeated runs of rows across episodes (readers/repeats.py): the same runs whatever the block sizes,
resting rows never matched, and a bounded table."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.readers.repeats import RepeatScan


def row_hashes(columns: list[np.ndarray]) -> np.ndarray:
    """One 64-bit hash per row of the matrices' float64 bits: what the health kernel's `rowh` gives the
    scan in the stage, computed here so the scan is tested on its own."""
    x = np.concatenate([np.asarray(c, dtype=np.float64) for c in columns], axis=1)
    weights = np.random.default_rng(0).integers(1, 2**63, size=x.shape[1], dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        return x.view(np.uint64) @ weights


def _episodes(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Five episodes of 120 moving rows; episode 3 starts with episode 1's rows 20-99 (80 rows)."""
    x = rng.normal(size=(600, 7))
    x[360:440] = x[140:220]
    ep = np.repeat(np.arange(5), 120)
    return x, ep, np.tile(np.arange(120), 5)


def _scan(x: np.ndarray, ep: np.ndarray, pos: np.ndarray, block: int, **kw: int) -> dict:
    scan = RepeatScan(**kw)
    for lo in range(0, len(x), block):
        scan.observe(
            ep[lo : lo + block],
            pos[lo : lo + block],
            row_hashes([x[lo : lo + block, :4], x[lo : lo + block, 4:]]),
        )
    return scan.facts()


def test_a_repeated_run_is_found_with_its_frames_whatever_the_blocks() -> None:
    x, ep, pos = _episodes(np.random.default_rng(0))
    whole = _scan(x, ep, pos, len(x))
    [run] = whole["runs"]
    assert (run["episode"], run["of"]) == (3, 1)
    assert run["frames"][0] - run["of_frames"][0] == -20  # episode 3 frame f = episode 1 frame f + 20
    assert 40 <= run["rows"] <= 80 and 0 <= run["frames"][0] and run["frames"][1] <= 79
    for block in (7, 50, 119, 121):
        assert _scan(x, ep, pos, block) == whole


def test_rows_at_rest_and_unrelated_episodes_are_not_matched() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(600, 7))
    ep, pos = np.repeat(np.arange(5), 120), np.tile(np.arange(120), 5)
    x[pos < 40] = 0.5  # every episode starts with 40 identical resting rows at the home pose
    assert _scan(x, ep, pos, 64)["runs"] == []


def test_the_table_is_bounded_and_still_finds_a_long_run() -> None:
    x, ep, pos = _episodes(np.random.default_rng(2))
    facts = _scan(x, ep, pos, 100, sample=1, max_kept=64)
    assert facts["sample"] >= 8  # doubled until the table fits
    assert [(r["episode"], r["of"]) for r in facts["runs"]] == [(3, 1)]


def test_the_compiled_scan_finds_what_the_numpy_reference_finds() -> None:
    """The hash table (numba) against the sorted arrays (numpy): the same kept windows in the same order,
    the same groups and runs, through block cuts, a busy stream, table growth and thinning."""
    pytest.importorskip("numba", reason="numba: the compiled scan under test")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(48_000, 7)).round(1)
    ep, pos = np.repeat(np.arange(400), 120), np.tile(np.arange(120), 400)
    x[360:440], x[5000:5100], x[20000:20030] = x[140:220], x[9000:9100], x[30000:30030]  # planted copies
    x[pos < 10] = 0.5  # resting rows
    every, alone = row_hashes([x]), row_hashes([x[:, :3]])
    for kw in ({}, {"max_kept": 500}, {"max_kept": 64, "sample": 2}):
        for block in (7, 4096, 60_000):
            found = []
            for compiled in (False, True):
                scan = RepeatScan(compiled=compiled, **kw)
                scan.log = []
                for lo in range(0, len(x), block):
                    cut = slice(lo, lo + block)
                    scan.observe(ep[cut], pos[cut], every[cut])
                    scan.observe(ep[cut], pos[cut], alone[cut], 1, busy=True)
                log = [np.concatenate([np.asarray(part[i]) for part in scan.log]) for i in range(3)]
                found.append((scan.facts(), scan.groups, log))
            (facts, groups, log), (facts_c, groups_c, log_c) = found
            assert facts_c == facts and groups_c == groups and facts["runs"]
            assert all(np.array_equal(a, b) for a, b in zip(log, log_c, strict=True))
