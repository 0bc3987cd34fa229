"""Time rows: order, gaps and duplicates of timestamps, the fps they imply, frame and global indices.

LeRobot's loader finds a sample's neighbours (`delta_timestamps`, action chunks) by timestamp within each
episode and by the global `index` across the dataset: time that runs backwards inside an episode, or an
fps that is not the one the timestamps were written at, hands the model other frames than it asks for,
with no error. Those rows are hard; dropped frames and repeated timestamps are counted (soft).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.records import Check
from pipeline.stages.contract.health.common import ROWS, listed
from pipeline.stages.contract.rows import Sources


def time_rows(src: Sources, facts: dict[str, Any]) -> list[Check]:
    if "timestamp" not in facts["columns"]:
        message = "no timestamp column in the data: time order, gaps and fps cannot be checked"
        return [ROWS("health.time.order", "timestamp", "unverifiable", message, severity="soft")]
    eps = facts["episodes"]
    return [
        _order(eps),
        _gaps(eps, facts.get("fps"), src.cfg.health.gap_factor),
        _fps(eps, facts.get("fps"), src.cfg.health.fps_tolerance),
        *_indices(facts),
    ]


def _order(eps: list[dict[str, Any]]) -> Check:
    bad = [e for e in eps if e["backwards"]]
    if not bad:
        return ROWS("health.time.order", "timestamp", "match", "timestamps increase within every episode")
    where = {int(e["index"]): int(e["first_backwards"]) for e in bad}
    message = (
        f"timestamps run backwards inside {len(bad)} episode(s) ({listed(list(where))}): "
        f"{sum(int(e['backwards']) for e in bad)} step(s) back; the loader's windows by timestamp "
        "then take other frames than the model asks for"
    )
    return ROWS(
        "health.time.order",
        "timestamp",
        "mismatch",
        message,
        expected="strictly increasing within each episode",
        actual={"episodes": len(bad), "steps_back": sum(int(e["backwards"]) for e in bad)},
        evidence={
            "episodes": list(where),
            "first_backwards_frame": where,
            "frames_per_episode": {int(e["index"]): int(e["backwards"]) for e in bad},
        },
    )


def _gaps(eps: list[dict[str, Any]], fps: float | None, factor: float) -> Check:
    bad = [e for e in eps if e["gaps"] or e["repeated"]]
    threshold = f"a step > {factor} / fps" if fps else "no fps in info.json: gaps not counted"
    if not bad:
        message = f"no dropped frames ({threshold}) and no repeated timestamps"
        return ROWS("health.time.gaps", "timestamp", "match", message, severity="soft")
    gaps, repeated = sum(int(e["gaps"]) for e in bad), sum(int(e["repeated"]) for e in bad)
    message = (
        f"{gaps} dropped-frame gap(s) ({threshold}) and {repeated} repeated timestamp(s) in "
        f"{len(bad)} episode(s): {listed([int(e['index']) for e in bad])}"
    )
    counts = {int(e["index"]): int(e["gaps"]) + int(e["repeated"]) for e in bad}
    return ROWS(
        "health.time.gaps",
        "timestamp",
        "mismatch",
        message,
        severity="soft",
        actual={"gaps": gaps, "repeated": repeated},
        evidence={"episodes": list(counts), "frames_per_episode": counts, "gap_factor": factor},
    )


def _fps(eps: list[dict[str, Any]], fps: float | None, tolerance: float) -> Check:
    rates = {int(e["index"]): e["dt_n"] / e["dt_sum"] for e in eps if e["dt_n"] and e["dt_sum"] > 0}
    implied = list(rates.values())
    if not implied or not fps:
        why = "no fps in meta/info.json" if not fps else "no episode has two increasing timestamps"
        return ROWS(
            "health.time.fps", "fps", "unverifiable", f"fps cannot be compared: {why}", severity="soft"
        )
    median = float(np.median(implied))
    off = [e for e, f in rates.items() if abs(f / fps - 1) > tolerance]
    ok = abs(median / fps - 1) <= tolerance
    message = (
        f"the timestamps imply {median:.4g} fps (median over {len(implied)} episodes) against "
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


def _indices(facts: dict[str, Any]) -> list[Check]:
    out = []
    if "frame_index" in facts["columns"]:
        bad = [e for e in facts["episodes"] if e["frame_bad"]]
        message = (
            f"frame_index is not 0, 1, 2, ... in {len(bad)} episode(s): "
            f"{listed([int(e['index']) for e in bad])}"
            if bad
            else "frame_index counts 0, 1, 2, ... in every episode"
        )
        counts = {int(e["index"]): int(e["frame_bad"]) for e in bad}
        out.append(
            ROWS(
                "health.time.frame_index",
                "frame_index",
                "mismatch" if bad else "match",
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
