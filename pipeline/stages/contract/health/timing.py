"""Time rows: order, gaps and duplicates of timestamps, the fps they imply, frame and global indices.

LeRobot's loader finds a sample's neighbours (`delta_timestamps`, action chunks) by timestamp within each
episode and by the global `index` across the dataset: time that runs backwards inside an episode, or an
fps that is not the one the timestamps were written at, hands the model other frames than it asks for,
with no error. Those rows are hard; dropped frames and repeated timestamps are counted (soft).

A format that stores no per-row time by design (robomimic HDF5, `.npz` episodes without a `timestamp`
array) gives one skipped row saying so; a format that should have one and lacks it is unverifiable. With
`dataset.episodes` the per-episode rows judge the episodes training reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.readers.carries import FPS, TIMESTAMPS, Carries
from pipeline.record.records import Check
from pipeline.stages.contract.health.common import ROWS, column, episode_ids, listed, trained, trained_text
from pipeline.stages.contract.health.grid import grid_rows
from pipeline.stages.contract.rows import Sources


def time_rows(src: Sources, facts: dict[str, Any]) -> list[Check]:
    if "timestamp" not in facts["columns"]:
        carries = src.c.carries
        if TIMESTAMPS not in carries:
            message = carries.skipped(TIMESTAMPS, "time order, gaps and fps")
            evidence = {"format": carries.format, "fps": src.c.claimed.get("fps")}
            return [
                ROWS("health.time.order", "timestamp", "skipped", message, severity="soft", evidence=evidence)
            ]
        message = "no timestamp column in the data: time order, gaps and fps cannot be checked"
        return [ROWS("health.time.order", "timestamp", "unverifiable", message, severity="soft")]
    keep = trained(src, episode_ids(facts))
    return [
        _order(facts, keep, trained_text(src)),
        _gaps(facts, keep, src.cfg.health.gap_factor),
        _fps(facts, keep, src.cfg.health.fps_tolerance, src.c.carries),
        *_indices(facts, keep),
        *grid_rows(src, facts, keep),  # each row's timestamp as the video query LeRobot makes
    ]


def _flagged(facts: dict[str, Any], name: str, keep: np.ndarray) -> dict[int, int]:
    """{episode: count} for the judged episodes where the per-episode count `name` is not 0."""
    ids, counts = episode_ids(facts), column(facts, name)
    return {ids[i]: int(counts[i]) for i in np.flatnonzero((counts != 0) & keep)}


def _order(facts: dict[str, Any], keep: np.ndarray, scope: str) -> Check:
    back = _flagged(facts, "backwards", keep)
    if not back:
        message = f"timestamps increase within every episode{scope}"
        return ROWS("health.time.order", "timestamp", "match", message)
    ids, first = episode_ids(facts), column(facts, "first_backwards")
    where = {e: int(first[ids.index(e)]) for e in back}
    message = (
        f"timestamps run backwards inside {len(back)} episode(s) ({listed(list(back))}): "
        f"{sum(back.values())} step(s) back; the loader's windows by timestamp then take other frames "
        "than the model asks for"
    )
    return ROWS(
        "health.time.order",
        "timestamp",
        "mismatch",
        message,
        expected="strictly increasing within each episode",
        actual={"episodes": len(back), "steps_back": sum(back.values())},
        evidence={"episodes": list(back), "first_backwards_frame": where, "frames_per_episode": back},
    )


def _gaps(facts: dict[str, Any], keep: np.ndarray, factor: float) -> Check:
    gaps, repeated = _flagged(facts, "gaps", keep), _flagged(facts, "repeated", keep)
    threshold = f"a step > {factor} / fps" if facts.get("fps") else "no fps in info.json: gaps not counted"
    if not gaps and not repeated:
        message = f"no dropped frames ({threshold}) and no repeated timestamps"
        return ROWS("health.time.gaps", "timestamp", "match", message, severity="soft")
    counts = {e: gaps.get(e, 0) + repeated.get(e, 0) for e in sorted({*gaps, *repeated})}
    message = (
        f"{sum(gaps.values())} dropped-frame gap(s) ({threshold}) and {sum(repeated.values())} repeated "
        f"timestamp(s) in {len(counts)} episode(s): {listed(list(counts))}"
    )
    return ROWS(
        "health.time.gaps",
        "timestamp",
        "mismatch",
        message,
        severity="soft",
        actual={"gaps": sum(gaps.values()), "repeated": sum(repeated.values())},
        evidence={"episodes": list(counts), "frames_per_episode": counts, "gap_factor": factor},
    )


def _fps(facts: dict[str, Any], keep: np.ndarray, tolerance: float, carries: Carries) -> Check:
    fps, n, total = facts.get("fps"), column(facts, "dt_n"), column(facts, "dt_sum")
    ok_rows = (n > 0) & (total > 0) & keep
    rates = dict(
        zip(
            np.asarray(episode_ids(facts))[ok_rows].tolist(),
            (n[ok_rows] / total[ok_rows]).tolist(),
            strict=True,
        )
    )
    if not fps and FPS not in carries:
        message = carries.skipped(FPS, "the fps the timestamps imply")
        return ROWS("health.time.fps", "fps", "skipped", message, severity="soft")
    if not rates or not fps:
        why = "no fps in meta/info.json" if not fps else "no episode has two increasing timestamps"
        return ROWS(
            "health.time.fps", "fps", "unverifiable", f"fps cannot be compared: {why}", severity="soft"
        )
    median = float(np.median(list(rates.values())))
    off = [e for e, f in rates.items() if abs(f / fps - 1) > tolerance]
    ok = abs(median / fps - 1) <= tolerance
    message = (
        f"the timestamps imply {median:.4g} fps (median over {len(rates)} episodes) against "
        f"info.json's {fps:g} (tolerance {tolerance:.0%})"
        + ("" if ok else ": the loader's windows by timestamp take frames at the wrong spacing")
    )
    return ROWS(
        "health.time.fps",
        "fps",
        "match" if ok else "mismatch",
        message,
        expected=fps,
        actual=round(median, 4),
        evidence={"episodes": [] if ok else off, "tolerance": tolerance, "episodes_off": off[:50]},
    )


def _indices(facts: dict[str, Any], keep: np.ndarray) -> list[Check]:
    out = []
    if "frame_index" in facts["columns"]:
        counts = _flagged(facts, "frame_bad", keep)
        message = (
            f"frame_index is not 0, 1, 2, ... in {len(counts)} episode(s): {listed(list(counts))}"
            if counts
            else "frame_index counts 0, 1, 2, ... in every episode"
        )
        out.append(
            ROWS(
                "health.time.frame_index",
                "frame_index",
                "mismatch" if counts else "match",
                message,
                severity="soft",
                evidence={"episodes": list(counts), "frames_per_episode": counts},
            )
        )
    if "index" in facts["columns"]:
        breaks = int(facts["index_breaks"])
        message = (
            f"the global index breaks {breaks} time(s) (first at data row {facts['first_index_break']}): "
            "LeRobot locates each episode's rows by it"
            if breaks
            else "the global index runs 0, 1, 2, ... over the data files in order"
        )
        out.append(
            ROWS(
                "health.time.index",
                "index",
                "mismatch" if breaks else "match",
                message,
                actual={"breaks": breaks},
                evidence={"first_break_row": facts["first_index_break"]},
            )
        )
    return out
