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

from pipeline.normalization import NEEDS, placeholder_problems
from pipeline.records import Check, Rows
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
    steps = proc["normalizers"]
    feature = f"policy_{label}processor"
    if not steps:
        return [
            ROWS(
                f"reload.processor:{label}",
                feature,
                "mismatch",
                f"{proc['path']}: no normalizer step (steps: {proc['steps']})",
                expected="a normalizer step",
                actual=proc["steps"],
            )
        ]
    step = steps[0]
    want = [k for k in config.get("features", []) if label == "pre" or src.a.features[k].role == "action"]
    problems = []
    if step["norm_map"] != config.get("norm_map"):
        problems.append(f"norm_map {step['norm_map']} vs config.json {config.get('norm_map')}")
    missing = [k for k in want if k not in step["features"]]
    if missing:
        problems.append(f"features missing from the saved step: {missing}")
    evidence = {
        "file": proc["path"],
        "step": step["index"],
        "registry_name": step["registry_name"],
        "state_file": step["state_file"],
        "eps": step["eps"],
    }
    out = [
        ROWS(
            f"reload.processor:{label}",
            feature,
            "mismatch" if problems else "match",
            "; ".join(problems)
            or f"{step['registry_name']} (step {step['index']}) encodes config.json's features and norm_map",
            expected=config.get("norm_map"),
            actual=step["norm_map"],
            evidence=evidence,
        )
    ]
    if step["stats"] is None:
        out.append(
            ROWS(
                f"reload.state:{label}",
                feature,
                "unverifiable",
                f"state file {step['state_file']} is not in {src.a.path}; the reloaded stats cannot be read",
                expected=step["state_file"],
                actual=None,
                evidence=evidence,
            )
        )
        return out
    out.append(_state_row(src, label, step, want))
    return out


def _state_row(src: Sources, label: str, step: dict[str, Any], want: list[str]) -> Check:
    problems = {}
    for key in want:
        feature = src.a.features[key]
        mode = step["norm_map"].get(feature.type, "IDENTITY")
        have = step["stats"].get(key, {})
        missing = [s for s in NEEDS.get(mode, ()) if s not in have]
        if missing:
            problems[key] = f"{mode} needs {missing}: eval passes it through"
    pre = (src.a.hints.get("pre") or {}).get("normalizers") or [{}]
    if label == "post" and pre[0].get("stats"):
        for key, stats in step["stats"].items():
            for stat, value in stats.items():
                other = pre[0]["stats"].get(key, {}).get(stat)
                if other is not None and (other.shape != value.shape or not np.allclose(other, value)):
                    problems[f"{key}.{stat}"] = "postprocessor stats differ from the preprocessor's"
    return ROWS(
        f"reload.state:{label}",
        f"policy_{label}processor",
        "mismatch" if problems else "match",
        "; ".join(f"{k}: {v}" for k, v in problems.items())
        or f"{step['state_file']} holds every stat the saved norm_map needs",
        expected="stats per normalized feature",
        actual=sorted(step["stats"]),
        evidence={"problems": problems, "keys": {k: sorted(v) for k, v in step["stats"].items()}},
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
