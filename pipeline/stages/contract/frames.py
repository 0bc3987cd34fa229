"""Rows read from the decoded camera frames (issue 22): video health, channel order, scale, swapped
cameras, stale image stats (which dataset key provides each of the base's cameras: `inputs.py`).

The stats files alone cannot tell a BGR camera or two exchanged cameras: here a few frames of a few
episodes per camera are decoded (`pipeline.readers.frames`, one seek per episode) and their per-channel
means, in 0-1 as LeRobot's loader yields them, are set against the dataset's `meta/stats.json` and the
base checkpoint's image stats. Every row carries the episodes and frames it used.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import FrameTimeError, InputError
from pipeline.normalization import IMAGENET_STATS
from pipeline.readers.carries import FRAMES
from pipeline.readers.frames import FrameReader, probe
from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.camera_fit import Fit, Signature, fit, match_unnamed, ties
from pipeline.stages.contract.image_stats import grey_row, stale_row
from pipeline.stages.contract.rows import NAME, Sources
from pipeline.stages.contract.spans import cap_note
from pipeline.stages.contract.spans import spans as video_spans

ROWS = Rows(NAME, "encoding")
LAYOUT = Rows(NAME, "layout")


def frame_rows(src: Sources) -> list[Check]:
    """Every frame row; one `frames.unavailable` row when the input has cameras but no frames here."""
    a_cams = [k for k, f in src.a.features.items() if f.role == "image"]
    reader = frames_here(src)
    if reader is None:
        if not a_cams and not src.c.images:
            return []
        cams = FrameReader(LeRobotData(src.c.path)).cameras() if src.c.kind.startswith("lerobot") else []
        return [_unavailable(src, cams)]
    cams = reader.cameras()
    cfg = src.cfg.frames
    out: list[Check] = []
    decoded: dict[str, Signature] = {}
    for key in cams:
        rows, sample = _sample(src, reader, key)
        out += rows
        if sample is not None:
            pixels = sample.reshape(-1, 3) / 255.0
            decoded[key] = Signature(pixels.mean(axis=0), pixels.std(axis=0))
            used = rows[0].evidence.get("episodes_frames", {})
            out += _scale_row(src, key) + stale_row(src, key, sample, used) + grey_row(src, key, sample)
    base = _signatures(src.a.stats)
    as_fed = _renamed(src, decoded)  # the base's stats judge the frames its inputs get, after the map
    generic = _generic_base(base, list(as_fed), cfg.min_distance)
    found = None if generic else fit(as_fed, base, cfg.swap_ratio, cfg.reversed_ratio, cfg.min_distance)
    swaps = _swap_rows(found) if not generic else _own_swap_rows(src, decoded, *generic)
    out += _channel_rows(src, decoded, found) + swaps  # which key provides a camera: inputs.camera_rows
    wanted = {k: base[k] for k in a_cams if k in base and k not in as_fed}
    spare = {k: v for k, v in as_fed.items() if k not in src.a.features}
    src.camera_match = match_unnamed(spare, wanted, cfg.min_distance)  # for a rename map (remedies)
    return [informational(src, row) for row in out]


def _renamed(src: Sources, decoded: dict[str, Signature]) -> dict[str, Signature]:
    """Each camera's frames under the policy key B's rename map sends them to (LeRobot renames before
    the normalizer); as named where the map sends two cameras to one key, which no fit can judge."""
    rename = src.b.hints.get("rename_map") or {}
    keys = [rename.get(k, k) for k in decoded]
    if len(set(keys)) < len(keys):
        return decoded
    fed = dict(zip(keys, decoded.values(), strict=True))
    order = [k for k in decoded if k in fed] + [k for k in fed if k not in decoded]  # rows keep their ids
    return {k: fed[k] for k in order}


def _policy_key(src: Sources, key: str) -> str:
    return (src.b.hints.get("rename_map") or {}).get(key, key)


def frames_here(src: Sources) -> FrameReader | None:
    """The dataset's frame reader where its frames are here to decode; None for a stats-only input or
    absent videos (LeRobot lets a user skip downloading them), which `frames.unavailable` reports once."""
    if not src.c.kind.startswith("lerobot"):
        return None
    reader = FrameReader(LeRobotData(src.c.path))
    root = Path(src.c.path)
    no_videos = not reader.data.image_keys() and not (root / "videos").is_dir()
    if not reader.cameras() or no_videos or not (root / "data").is_dir():
        return None
    return reader


def _unavailable(src: Sources, cams: list[str]) -> Check:
    """No frames here: unverifiable for the cameras the model reads; where it reads none of them (a
    state-only policy on a dataset whose videos were never downloaded) nothing it reads is missing. A
    format that keeps its camera frames in no form these rows decode is skipped, saying so."""
    if FRAMES not in src.c.carries:
        keys = [k for k, f in src.c.features.items() if f.role == "image"]
        message = src.c.carries.skipped(FRAMES, f"the frame rows ({', '.join(keys) or 'no camera'})")
        evidence = {"format": src.c.carries.format, "dataset_cameras": keys}
        return LAYOUT("frames.unavailable", "images", "skipped", message, severity="soft", evidence=evidence)
    why = f"{src.c.kind} input at {src.c.path} holds no decodable frames (stats only)"
    read = src.model_cameras()
    if read is None or read:
        return LAYOUT("frames.unavailable", "images", "unverifiable", why, severity="soft")
    keys = cams or [k for k, f in src.c.features.items() if f.role == "image"]
    message = f"{why}; the model reads none of these cameras ({keys}): nothing it reads is missing"
    evidence = {"informational": True, "model_cameras": [], "dataset_cameras": keys}
    return LAYOUT("frames.unavailable", "images", "match", message, severity="soft", evidence=evidence)


def informational(src: Sources, row: Check) -> Check:
    """A row about cameras the model does not read decides nothing for it: soft, and said so."""
    keys = str(row.feature).split("|")
    if row.feature == "images" or any(src.reads_camera(k) for k in keys):
        return row
    message = f"{row.message} (the model does not read {' or '.join(keys)}: informational)"
    return replace(row, severity="soft", message=message, evidence={**row.evidence, "informational": True})


def _generic_base(
    base: dict[str, Signature], keys: list[str], min_distance: float
) -> tuple[str, list[str]] | None:
    """Why the base's image stats cannot place these cameras (and which), or None where they can: the
    same stats for two cameras tie every assignment, and ImageNet's (LeRobot's `use_imagenet_stats`)
    describe no camera of this dataset, in either channel order."""
    imagenet = Signature(np.array(IMAGENET_STATS["mean"]), np.array(IMAGENET_STATS["std"]))
    generic = [k for k in keys if k in base and base[k].distance(imagenet, "RGB") <= 1e-3]
    if generic:
        return f"the base's image stats for {', '.join(generic)} are ImageNet's (use_imagenet_stats)", generic
    tied = ties(base, keys, min_distance)
    if not tied:
        return None
    named = list(dict.fromkeys(k for pair in tied for k in pair))
    return f"the base's image stats do not tell {', '.join(f'{x} and {y}' for x, y in tied)} apart", named


def _own_swap_rows(src: Sources, decoded: dict[str, Signature], why: str, keys: list[str]) -> list[Check]:
    """The base's image stats do not tell these cameras apart, so every assignment fits them alike. The
    dataset's own meta/stats.json per camera, computed from its frames, still does: frames moved after
    the stats were written no longer fit their key's. Where those tie too, the probes decide."""
    cfg = src.cfg.frames
    own_stats = _signatures(src.c.stats)
    own = fit(decoded, own_stats, cfg.swap_ratio, cfg.reversed_ratio, cfg.min_distance)
    own_tied = ties(own_stats, list(decoded), cfg.min_distance)
    if len(decoded) > 1 and (own is None or own_tied):
        message = (
            f"{why}: they do not tell the cameras apart, nor do the dataset's own meta/stats.json per "
            "camera; the probes decide"
        )
        evidence = {"base_generic": keys, "dataset_tied": own_tied}
        feature = "|".join(decoded)
        return [
            LAYOUT("frames.swapped", feature, "unverifiable", message, severity="soft", evidence=evidence)
        ]
    rows = _swap_rows(own, "the dataset's own meta/stats.json per camera")
    return [
        replace(r, message=f"{why}; {r.message}", evidence={**r.evidence, "base_generic": keys}) for r in rows
    ]


def _episodes(reader: FrameReader, count: int) -> list[int]:
    eps = reader.data.episodes()
    index = [0] if eps is None or eps.index.size == 0 else eps.index.tolist()
    pick = np.unique(np.linspace(0, len(index) - 1, min(count, len(index))).round().astype(int))
    return [int(index[i]) for i in pick]


def _sample(src: Sources, reader: FrameReader, key: str) -> tuple[list[Check], np.ndarray | None]:
    """Decode `per_episode` frames of the sampled episodes; one health row (or one error row) per camera."""
    cfg = src.cfg.frames
    used: dict[int, list[int]] = {}
    frames: list[np.ndarray] = []
    facts: dict[str, Any] = {}
    try:
        for ep in _episodes(reader, cfg.episodes):
            n = reader.timestamps(ep).size
            idx = sorted({*np.linspace(0, n - 1, min(cfg.per_episode, n)).round().astype(int).tolist()})
            if key in reader.data.video_keys():
                facts = probe(reader.data.video_location(key, ep)[0], f"camera {key}, episode {ep}")
            frames.append(reader.frames(key, ep, idx))
            used[ep] = idx
    except FrameTimeError as exc:  # the data's timestamps miss the video's frames: a fault, not an error
        message = f"{key}: {exc}; the loader's query misses the same way (health.time.video_grid names them)"
        return [ROWS("frames.health:" + key, key, "mismatch", message, evidence={"decoded": used})], None
    except InputError as exc:
        return [ROWS("frames.health:" + key, key, "error", str(exc), evidence={"decoded": used})], None
    sample = np.concatenate(frames)
    problems = _health_problems(src, reader, key, sample, facts)
    spans: dict[str, Any] = {}
    notes: list[str] = []
    if key in reader.data.video_keys():
        spans = video_spans(reader, key, src.cfg.frames.span_files)
        problems += spans.pop("problems")
        notes += [cap_note(spans)] if spans.get("capped") else []
    evidence = {
        "episodes_frames": used,
        "video": facts,
        "frame_shape": list(sample.shape[1:]),
        "spans": spans,
    }
    message = f"{key}: " + ("; ".join(problems) if problems else "sampled frames decode, fps and shape agree")
    message += "".join(f"; {note}" for note in notes)
    row = ROWS("frames.health:" + key, key, "mismatch" if problems else "match", message, evidence=evidence)
    return [row], sample


def _health_problems(
    src: Sources, reader: FrameReader, key: str, sample: np.ndarray, facts: dict[str, Any]
) -> list[str]:
    problems = []
    fps = reader.data.info.get("fps")
    if facts.get("fps") and fps and abs(facts["fps"] - float(fps)) > src.cfg.frames.fps_tolerance:
        problems.append(f"video fps {facts['fps']:g} != info.json fps {fps}")
    shape = (reader.data.features.get(key) or {}).get("shape")
    hwc = list(sample.shape[1:])
    if isinstance(shape, list) and sorted(shape) != sorted(hwc):
        problems.append(f"decoded frames {hwc} (HWC) != info.json shape {shape}")
    a = src.a.features.get(key)
    if a is not None and a.shape and sorted(a.shape) != sorted(hwc):
        problems.append(
            f"decoded frames {hwc} != base input_features shape {list(a.shape)} (no resize named)"
        )
    return problems


def _signatures(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, Signature]:
    """Per-channel mean (and std) of every camera with 3-channel stats, in 0-1."""
    out = {}
    for key, block in stats.items():
        mean = np.asarray(block.get("mean", []), np.float64).reshape(-1)
        if mean.size != 3:
            continue
        scale = 255.0 if mean.max() > 1.5 else 1.0
        std = np.asarray(block.get("std", []), np.float64).reshape(-1)
        out[key] = Signature(mean / scale, std / scale if std.size == 3 else None)
    return out


def _channel_rows(src: Sources, decoded: dict[str, Signature], found: Fit | None) -> list[Check]:
    """Per camera: the channel order the base's stats (joint fit) and the dataset's own stats say."""
    own = _signatures(src.c.stats)
    out = []
    for key, sig in decoded.items():
        evidence: dict[str, Any] = {"decoded_mean_rgb": sig.mean.round(4).tolist()}
        flipped = []
        if key in own:  # the dataset's own stats: computed from frames in the other order?
            same, rev = (sig.distance(own[key], o) for o in ("RGB", "BGR"))
            mean = own[key].mean.round(4).tolist()
            evidence["dataset"] = {"mean": mean, "as_is": round(same, 4), "reversed": round(rev, 4)}
            cfg = src.cfg.frames
            if rev < cfg.reversed_ratio * same and same > cfg.min_distance:
                flipped.append("meta/stats.json")
        fed = _policy_key(src, key)
        fed = fed if found is not None and fed in found.order else key
        if found is not None and fed in found.order:
            match = found.assignment[fed]
            evidence["base"] = {"fits": match, "order": found.order[fed], "distances": found.distances[fed]}
            if fed != key:
                evidence["base"]["fed_as"] = fed
            if found.order[fed] == "BGR":
                flipped.append(f"the base's {match} stats")
        if len(evidence) == 1:
            continue
        text = (
            f"fit {' and '.join(flipped)} clearly better reversed: frames look BGR"
            if flipped
            else "fit in RGB order"
        )
        out.append(
            ROWS(
                "frames.channels:" + key,
                key,
                "mismatch" if flipped else "match",
                f"{key}: decoded channel means {text}",
                expected="RGB",
                actual="BGR" if flipped else "RGB",
                evidence=evidence,
            )
        )
    return out


def _scale_row(src: Sources, key: str) -> list[Check]:
    """The loader yields 0-1 float from video; the base normalizes with its image stats' range."""
    stats = src.a.stats.get(key) or {}
    a = src.a.features.get(key)
    mode = src.a.mode(a) if a is not None else None
    if "max" not in stats:
        return []
    expected = "0-255" if float(np.max(stats["max"])) > 1.5 else "0-1"
    ok = expected == "0-1"
    message = f"{key}: loader yields 0-1 float frames, base image stats span {expected} (mode {mode})"
    return [
        ROWS(
            "frames.scale:" + key,
            key,
            "match" if ok else "mismatch",
            message,
            expected=expected,
            actual="0-1",
            evidence={"base_max": float(np.max(stats["max"])), "normalization": mode},
        )
    ]


def _swap_rows(found: Fit | None, against: str = "the base's stats") -> list[Check]:
    """Each pair of cameras: exchanged when, in the best joint fit, each holds the frames the base (or,
    where it cannot tell, the dataset's own stats) knows under the other's key."""
    if found is None:
        return []
    keys = list(found.assignment)
    out = []
    evidence = {
        "as_named": found.declared,
        "best": found.best,
        "runner_up": found.runner_up,
        "assignment": found.assignment,
    }
    for i, x in enumerate(keys):
        for y in keys[i + 1 :]:
            bad = found.assignment[x] == y or found.assignment[y] == x
            exchanged = f"frames fit {against} exchanged ({found.best:.3g} against {found.declared:.3g})"
            message = f"{x} and {y}: " + (exchanged if bad else f"fit {against} as named")
            out.append(
                LAYOUT(
                    f"frames.swapped:{x}|{y}",
                    f"{x}|{y}",
                    "mismatch" if bad else "match",
                    message,
                    evidence={**evidence, "order": found.order},
                )
            )
    return out
