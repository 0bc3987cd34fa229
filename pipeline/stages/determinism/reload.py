"""The train->eval reload round trip on the smoke checkpoint.

A checkpoint can load without error and still be unusable: saved with `save_normalization_stats=false`
and never re-injected, saved with `inf` placeholders that were never filled, a key renamed between
save and load, or stats re-injected from another dataset. Each of those is a separate hard row here,
with the keys and values as evidence.

The reload goes through a loader named in the config (`module:function`), so a team points it at the
same code eval uses. A loader is `load(checkpoint_dir, dataset_dir) -> Reloaded`; `load_demo` is the
one for the embedded demo's policy format.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.records import Check
from pipeline.stages.determinism import lerobot_data
from pipeline.trainlog import INTENT_FILE

STAGE = "determinism"
MODE_STATS = {
    "MEAN_STD": ("mean", "std"),
    "MIN_MAX": ("min", "max"),
    "QUANTILES": ("q01", "q99"),
    "QUANTILE10": ("q10", "q90"),
    "IDENTITY": (),
}


@dataclass
class Reloaded:
    """What a loader hands back: the stats eval will normalize with, and a way to run the policy."""

    stats: dict[str, np.ndarray]  # flat "<feature>.<stat>" after re-injection
    forward: Callable[[Mapping[str, np.ndarray]], Any]  # raw observations (batch) -> raw actions
    input_features: list[str]
    output_feature: str = "action"
    injected: list[str] = field(default_factory=list)  # keys filled from the dataset's metadata
    required: list[str] = field(default_factory=list)  # keys eval's normalizers read (by their modes)


def resolve(spec: str, key: str) -> Callable[..., Any]:
    """`package.module:function` -> the function; anything else is an InputError naming the key."""
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{key}: expected 'module:function', got {spec!r}", field=key)
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{key}: cannot import {spec!r}: {exc}", field=key) from exc
    if not callable(found):
        raise InputError(f"{key}: {spec!r} is not callable", field=key)
    return found


def flatten(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    return {
        f"{feat}.{stat}": np.asarray(v, dtype=np.float32)
        for feat, d in stats.items()
        for stat, v in d.items()
    }


def load_demo(checkpoint: Path, dataset: Path) -> Reloaded:
    """The demo's eval path: `load_pretrained`, then re-inject what the checkpoint lacks from the dataset.

    Like LeRobot's `_inject_stats`, only missing statistics are filled; stats that were saved (even as
    `inf`) are kept, which is exactly why a saved placeholder must be caught.
    """
    from pipeline.demo.policy import ACTION_KEY, load_pretrained

    loaded = load_pretrained(checkpoint)
    source = lerobot_data.stats(dataset)
    injected: list[str] = []
    for feature in [*loaded.spec.input_features, *loaded.spec.output_features]:
        have = loaded.stats.setdefault(feature, {})
        for stat, value in source.get(feature, {}).items():
            if stat not in have:
                have[stat] = value
                injected.append(f"{feature}.{stat}")
    required = [
        f"{feature}.{stat}"
        for feature in [*loaded.spec.input_features, *loaded.spec.output_features]
        for stat in MODE_STATS.get(loaded.mode(feature), ())
    ]
    return Reloaded(
        stats=flatten(loaded.stats),
        forward=loaded.act,
        input_features=list(loaded.spec.input_features),
        output_feature=ACTION_KEY,
        injected=injected,
        required=required,
    )


# ------------------------------------------------------------------------------------------ checks


def _row(feature: str, verdict: str, message: str, **fields: Any) -> Check:
    return Check(
        id=f"{STAGE}.reload.{feature}",
        stage=STAGE,
        category="reload",
        feature=f"reload:{feature}",
        verdict=verdict,
        severity=fields.pop("severity", "hard"),
        message=message,
        **fields,
    )


def saved_norm_keys(checkpoint: Path, key_pattern: str, file_pattern: str) -> dict[str, np.ndarray]:
    """Every normalization value written to the checkpoint's safetensors files, as `<file>:<key>`."""
    from safetensors import safe_open

    key_re, file_re = re.compile(key_pattern), re.compile(file_pattern)
    found: dict[str, np.ndarray] = {}
    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open has no __iter__
                if file_re.search(path.name) or key_re.search(key):
                    found[f"{path.name}:{key}"] = handle.get_tensor(key).float().numpy()
    return found


def _nonfinite(values: Mapping[str, np.ndarray]) -> dict[str, dict[str, int]]:
    return {
        k: {"inf": int(np.isinf(v).sum()), "nan": int(np.isnan(v).sum()), "size": int(v.size)}
        for k, v in values.items()
        if not np.isfinite(v).all()
    }


def saved_rows(saved: Mapping[str, np.ndarray], expect_saved: bool) -> list[Check]:
    rows = []
    if not expect_saved:
        verdict = "mismatch" if saved else "match"
        rows.append(
            _row(
                "stats_not_saved",
                verdict,
                f"{len(saved)} normalization key(s) written by a "
                "save_normalization_stats=false save" + (f": {sorted(saved)[:8]}" if saved else ""),
                expected=0,
                actual=len(saved),
                evidence={"keys": sorted(saved)},
            )
        )
    if saved:
        bad = _nonfinite(saved)
        rows.append(
            _row(
                "saved_stats_finite",
                "mismatch" if bad else "match",
                f"{len(bad)} of {len(saved)} saved normalization key(s) hold inf/NaN placeholders"
                + (f": {sorted(bad)[:8]}" if bad else ""),
                expected="finite",
                actual=bad or "finite",
                evidence={"nonfinite": bad, "keys": sorted(saved)},
            )
        )
    return rows


def populated_row(reloaded: Reloaded) -> Check:
    """Every statistic eval's normalizers read is present and finite after re-injection."""
    bad = _nonfinite(reloaded.stats)
    absent = [k for k in reloaded.required if k not in reloaded.stats]
    problems = [
        f"{len(bad)} of {len(reloaded.stats)} value(s) inf/NaN: {sorted(bad)[:8]}" if bad else "",
        f"missing though the normalization mode needs them: {absent[:8]}" if absent else "",
    ]
    message = "; ".join(p for p in problems if p) or (
        f"all {len(reloaded.stats)} normalization value(s) finite; re-injected {len(reloaded.injected)} "
        "from the dataset"
    )
    return _row(
        "stats_populated",
        "mismatch" if bad or absent else "match",
        f"after reload: {message}",
        expected="every normalization value the modes need, finite",
        actual=bad or absent or "finite",
        evidence={
            "nonfinite": bad,
            "missing": absent,
            "injected": reloaded.injected,
            "keys": sorted(reloaded.stats),
        },
    )


def intent_row(reloaded: Reloaded, intent_path: Path, atol: float) -> Check:
    """Re-injected stats against what training normalized with: same keys, same values."""
    if not intent_path.exists():
        return _row(
            "stats_match_training",
            "unverifiable",
            f"{intent_path} missing: the trainer did not "
            "record its normalization intent (pipeline.trainlog.write_intent)",
            evidence={"path": str(intent_path)},
        )
    from safetensors.numpy import load_file

    intent = {k: v.astype(np.float32) for k, v in load_file(str(intent_path)).items()}
    missing, extra = sorted(set(intent) - set(reloaded.stats)), sorted(set(reloaded.stats) - set(intent))
    differing = {}
    for key in sorted(set(intent) & set(reloaded.stats)):
        a, b = intent[key], reloaded.stats[key]
        if a.shape != b.shape or not np.allclose(a, b, rtol=0.0, atol=atol, equal_nan=False):
            differing[key] = {
                "training": a.tolist(),
                "reloaded": b.tolist(),
                "max_abs": float(np.max(np.abs(a - b))) if a.shape == b.shape else None,
            }
    ok = not (missing or extra or differing)
    parts = [
        f"missing {missing[:6]}" if missing else "",
        f"unexpected {extra[:6]}" if extra else "",
        f"{len(differing)} key(s) with other values: {sorted(differing)[:6]}" if differing else "",
    ]
    message = "; ".join(p for p in parts if p) or f"all {len(intent)} statistic(s) equal training's"
    return _row(
        "stats_match_training",
        "match" if ok else "mismatch",
        message,
        expected=f"{len(intent)} keys as trained",
        actual=f"{len(reloaded.stats)} keys",
        evidence={
            "missing": missing,
            "unexpected": extra,
            "differing": differing,
            "intent": str(intent_path),
        },
    )


def forward_row(reloaded: Reloaded, dataset: Path) -> Check:
    sample = lerobot_data.frames(dataset, reloaded.input_features, limit=1)
    want = (1, lerobot_data.feature_dim(dataset, reloaded.output_feature))
    try:
        out = np.asarray(reloaded.forward(sample), dtype=np.float64)
    except Exception as exc:  # noqa: BLE001 - a failing forward is the finding
        return _row(
            "forward",
            "mismatch",
            f"forward on one dataset sample raised {type(exc).__name__}: {exc}",
            expected=list(want),
            actual=None,
            evidence={"exception": repr(exc)},
        )
    finite = bool(np.isfinite(out).all())
    ok = tuple(out.shape) == want and finite
    return _row(
        "forward",
        "match" if ok else "mismatch",
        f"forward on one sample: shape {tuple(out.shape)} (expected {want}), "
        f"{'finite' if finite else 'NOT finite'}",
        expected={"shape": list(want), "finite": True},
        actual={"shape": list(out.shape), "finite": finite},
        evidence={"output": out.tolist()},
    )


def round_trip(checkpoint: Path, dataset: Path, rcfg: Any) -> list[Check]:
    """All reload rows for one checkpoint; a loader that raises is itself a hard row."""
    if not list(Path(checkpoint).glob("*.safetensors")):
        return [
            _row(
                "checkpoint",
                "error",
                f"{checkpoint}: no *.safetensors checkpoint written by the smoke run",
                evidence={"path": str(checkpoint)},
            )
        ]
    saved = saved_norm_keys(checkpoint, str(rcfg.norm_key_pattern), str(rcfg.norm_file_pattern))
    rows = saved_rows(saved, bool(rcfg.save_normalization_stats))
    loader = resolve(str(rcfg.loader), "stages.determinism.reload.loader")
    try:
        reloaded = loader(Path(checkpoint), Path(dataset))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a renamed key: the loader's message is the evidence
        return [
            *rows,
            _row(
                "load",
                "mismatch",
                f"{rcfg.loader} failed on {checkpoint}: {type(exc).__name__}: {exc}",
                expected="loads",
                actual=type(exc).__name__,
                evidence={"exception": str(exc)[-3000:], "checkpoint": str(checkpoint)},
            ),
        ]
    rows.append(
        _row(
            "load",
            "match",
            f"{rcfg.loader} loaded {checkpoint}",
            evidence={"checkpoint": str(checkpoint), "dataset": str(dataset)},
        )
    )
    intent = Path(checkpoint).parent / INTENT_FILE
    return [
        *rows,
        populated_row(reloaded),
        intent_row(reloaded, intent, float(rcfg.stats_atol)),
        forward_row(reloaded, dataset),
    ]
