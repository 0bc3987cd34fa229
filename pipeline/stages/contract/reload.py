"""Train <-> eval reload: what inference reloads must encode the intended stats, keys and masks.

The eval path does not read the training config in memory; it reloads the saved processors (LeRobot:
`policy_preprocessor.json` / `policy_postprocessor.json` + their safetensors state) or the stats file
(openpi, OpenVLA). So the saved artifact is checked against the config it was saved with and against
the training intent, and placeholder buffers (`inf`, NaN, all zeros: stats that were never filled in,
LeRobot #1095/#4047) are a hard stop.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.normalization import ABSENT_MODE, NEEDS, placeholder_problems
from pipeline.record.records import Check, Rows
from pipeline.stages.contract.rows import NAME, Sources

ROWS = Rows(NAME, "reload")


def processor_rows(src: Sources) -> list[Check]:
    """LeRobot: config.json vs the saved pre/post processors (features, norm_map, stats per feature)."""
    if src.a.kind != "lerobot":
        return []
    config = src.a.hints.get("config", {})
    out = []
    for label in ("pre", "post"):
        proc = src.a.hints.get(label)
        if proc is None:
            out.append(
                ROWS(
                    f"reload.processor:{label}",
                    f"policy_{label}processor",
                    "mismatch",
                    f"{src.a.path}: no policy_{label}processor*.json; eval cannot rebuild the "
                    f"{'normalizer' if label == 'pre' else 'unnormalizer'}",
                    expected="saved processor",
                    actual=None,
                )
            )
            continue
        out += _step_rows(src, label, proc, config)
    return out


def _step_rows(src: Sources, label: str, proc: dict[str, Any], config: dict[str, Any]) -> list[Check]:
    """Every normalizing step of one saved pipeline against config.json: LeRobot may split features over
    several normalizer steps (the reward classifier), and a policy may normalize in its own step."""
    steps = proc["normalizers"]
    feature = f"policy_{label}processor"
    want = [k for k in config.get("features", []) if label == "pre" or src.a.features[k].role == "action"]
    modes = config.get("norm_map") or {}
    normalized = [k for k in want if modes.get(src.a.features[k].type, ABSENT_MODE) != ABSENT_MODE]
    if not steps:
        message = f"{proc['path']}: no normalizer step (steps: {proc['steps']})"
        if not normalized:
            message += f"; none is needed: config.json's norm_map {modes} normalizes none of {want}"
        verdict = "mismatch" if normalized else "match"
        return [
            ROWS(f"reload.processor:{label}", feature, verdict, message, expected=modes, actual=proc["steps"])
        ]
    problems = _step_problems(steps, modes, normalized)
    names = [f"{s['registry_name']} (step {s['index']})" for s in steps]
    evidence = {
        "file": proc["path"],
        "steps": [{k: s[k] for k in ("index", "registry_name", "state_file", "eps", "own")} for s in steps],
    }
    out = [
        ROWS(
            f"reload.processor:{label}",
            feature,
            "mismatch" if problems else "match",
            "; ".join(problems)
            or f"{', '.join(names)} encode config.json's features and modes"
            + "".join(
                f"; {s['registry_name']} normalizes {s['own']['mode']} itself" for s in steps if s["own"]
            ),
            expected=modes,
            actual=steps[0]["norm_map"] if len(steps) == 1 else [s["norm_map"] for s in steps],
            evidence=evidence,
        )
    ]
    absent = [s["state_file"] for s in steps if s["stats"] is None]
    if absent:
        message = f"state file(s) {absent} not in {src.a.path}; the reloaded stats cannot be read"
        out.append(
            ROWS(
                f"reload.state:{label}",
                feature,
                "unverifiable",
                message,
                expected=absent,
                actual=None,
                evidence=evidence,
            )
        )
        return out
    out.append(_state_row(src, label, steps, normalized))
    return out


def _step_problems(steps: list[dict[str, Any]], modes: dict[str, str], normalized: list[str]) -> list[str]:
    """A generic step whose modes differ from config.json's for its features, and the normalized
    features no step covers (a policy's own normalizing step takes its modes from its flag instead)."""
    problems = [
        f"{step['registry_name']} (step {step['index']}) norm_map {step['norm_map']} vs config.json {modes}"
        for step in steps
        if step["own"] is None
        and _filled(step["norm_map"], step["features"]) != _filled(modes, step["features"])
    ]
    covered = {k for step in steps for k in step["features"]}
    missing = [k for k in normalized if k not in covered]
    if missing:
        problems.append(f"features missing from the saved steps: {missing}")
    return problems


def _filled(norm_map: dict[str, str], features: dict[str, Any]) -> dict[str, str]:
    """A norm_map as LeRobot's normalizer applies it to these features (an absent type: IDENTITY)."""
    return {f.type: norm_map.get(f.type, ABSENT_MODE) for f in features.values()}


def _state_row(src: Sources, label: str, steps: list[dict[str, Any]], want: list[str]) -> Check:
    problems = {}
    stats = {k: v for step in steps for k, v in step["stats"].items()}
    for key in want:
        ftype = src.a.features[key].type
        step = next((s for s in steps if key in s["features"]), steps[0])
        mode = step["norm_map"].get(ftype, ABSENT_MODE)
        missing = [s for s in NEEDS.get(mode, ()) if s not in stats.get(key, {})]
        if missing:
            problems[key] = f"{mode} needs {missing}: eval passes it through"
    pre = (src.a.hints.get("pre") or {}).get("normalizers") or [{}]
    if label == "post" and pre[0].get("stats"):
        for key, values in stats.items():
            for stat, value in values.items():
                other = pre[0]["stats"].get(key, {}).get(stat)
                if other is not None and (other.shape != value.shape or not np.allclose(other, value)):
                    problems[f"{key}.{stat}"] = "postprocessor stats differ from the preprocessor's"
    files = [s["state_file"] for s in steps]
    return ROWS(
        f"reload.state:{label}",
        f"policy_{label}processor",
        "mismatch" if problems else "match",
        "; ".join(f"{k}: {v}" for k, v in problems.items())
        or f"{', '.join(files)} hold every stat the saved modes need",
        expected="stats per normalized feature",
        actual=sorted(stats),
        evidence={"problems": problems, "keys": {k: sorted(v) for k, v in stats.items()}},
    )


def placeholder_rows(src: Sources) -> list[Check]:
    """inf / NaN / all-zero stats in what A reloads: the stats were never filled in (the shared rule,
    `pipeline.normalization.placeholder_problems`). A std that is zero in some dims only is padding or a
    constant dim: a soft row (a MEAN_STD normalizer divides by eps there)."""
    out = []
    for key, stats in src.a.stats.items():
        feature = src.a.features.get(key)
        if feature is None or feature.role == "other":
            continue
        out.append(_placeholder_row(src, key, stats))
    return out


def _placeholder_row(src: Sources, key: str, stats: dict[str, Any]) -> Check:
    bad = placeholder_problems(stats)
    std = np.asarray(stats.get("std", []), dtype=np.float64).reshape(-1)
    zero_std = np.where(std == 0)[0].tolist() if "std" in stats and "std" not in bad else []
    check = f"reload.placeholders:{key}"
    if bad:
        return ROWS(
            check,
            key,
            "mismatch",
            f"{key}: the stats the base reloads are placeholders ({bad}); normalization at eval is undefined",
            expected="finite, filled stats",
            actual=bad,
            evidence={"source": src.a.hints.get("stats_source", src.a.path)},
        )
    if zero_std:
        return ROWS(
            check,
            key,
            "mismatch",
            f"{key}: base std == 0 in dim(s) {zero_std[:16]} (padding or constant dims; "
            "a MEAN_STD normalizer divides by eps there)",
            severity="soft",
            expected="std > 0",
            actual={"std": zero_std},
            evidence={
                "zero_std_dims": zero_std,
                # A is the only source here (what the base reloads); its numbers per named dim
                "values": {
                    d: {
                        "A": {
                            s: float(np.asarray(stats[s]).reshape(-1)[d])
                            for s in ("mean", "std")
                            if s in stats
                        }
                    }
                    for d in zero_std
                },
            },
        )
    return ROWS(
        check, key, "match", f"{key}: base stats {sorted(stats)} are finite and filled", actual=sorted(stats)
    )


def mask_rows(src: Sources) -> list[Check]:
    """OpenVLA-style masks (which action dims are normalized) vs what the training config declares."""
    a_mask = src.a.hints.get("action_mask")
    b_mask = src.b.hints.get("action_mask")
    if a_mask is None or b_mask is None:
        return []
    verdict = "match" if list(map(bool, a_mask)) == list(map(bool, b_mask)) else "mismatch"
    return [
        ROWS(
            "reload.mask:action",
            "action",
            verdict,
            f"normalization mask A {a_mask} vs training {b_mask}",
            expected=a_mask,
            configured=b_mask,
        )
    ]
