"""The train->eval reload round trip on the smoke checkpoint.

A checkpoint can load without error and still be unusable: saved with `save_normalization_stats=false`
and never re-injected, saved with `inf` placeholders that were never filled, a key renamed between
save and load, or stats re-injected from another dataset. Each of those is a separate hard row here,
with the keys and values as evidence.

The reload goes through a loader named in the config (`module:function`), so a team points it at the
same code eval uses. A loader is `load(checkpoint_dir, dataset_dir) -> Reloaded`
(`pipeline.trainlog.Reloaded`); the stage imports none: it is named in config, and unset the round
trip is an `unverifiable` row. Saved and reloaded stats are
judged by the shared placeholder rule (`pipeline.normalization.placeholder_problems`), the same one
the contract stage applies to a base checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import InputError
from pipeline.normalization import nonfinite_counts, placeholder_problems
from pipeline.readers import LeRobotData
from pipeline.readers.base import read_safetensors
from pipeline.readers.frames import FrameReader, processor_view
from pipeline.readers.rename import unnormalized
from pipeline.record.records import Check, Rows
from pipeline.stages.config import resolve_callable as resolve
from pipeline.trainlog.spec import INTENT_FILE, Reloaded

__all__ = ["Reloaded", "resolve", "round_trip"]
STAGE = "determinism"
ROWS = Rows(STAGE, "reload")


def _row(check: str, verdict: str, message: str, **fields: Any) -> Check:
    """One reload row: id `determinism.reload.<check>`, feature `reload:<check>`."""
    return ROWS(f"reload.{check}", f"reload:{check}", verdict, message, **fields)


def saved_norm_keys(checkpoint: Path, key_pattern: str, file_pattern: str) -> dict[str, np.ndarray]:
    """Every normalization value written to the checkpoint's safetensors files, as `<file>:<key>`.

    Read through the validated reader, and only the matching tensors (the weights stay on disk).
    """
    key_re, file_re = re.compile(key_pattern), re.compile(file_pattern)
    found: dict[str, np.ndarray] = {}
    for path in sorted(Path(checkpoint).glob("*.safetensors")):
        whole = bool(file_re.search(path.name))
        tensors = read_safetensors(path, keep=lambda key, whole=whole: whole or bool(key_re.search(key)))
        found.update({f"{path.name}:{key}": v.astype(np.float32) for key, v in tensors.items()})
    return found


def _placeholders(values: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Flat keys (`[<file>:]<feature>.<stat>`) whose values are placeholders by the shared rule
    (`pipeline.normalization.placeholder_problems`), with their inf/NaN counts as evidence."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        stat = key.rpartition(".")[2]
        problem = placeholder_problems({stat: value}).get(stat)
        if problem:
            out[key] = nonfinite_counts(value) or {"problem": problem, "size": int(np.size(value))}
    return out


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
        bad = _placeholders(saved)
        rows.append(
            _row(
                "saved_stats_finite",
                "mismatch" if bad else "match",
                f"{len(bad)} of {len(saved)} saved normalization key(s) hold placeholders "
                "(inf/NaN, all-zero scale)" + (f": {sorted(bad)[:8]}" if bad else ""),
                expected="finite",
                actual=bad or "finite",
                evidence={"nonfinite": bad, "keys": sorted(saved)},
            )
        )
    return rows


def populated_row(reloaded: Reloaded, trained: set[str] | None = None) -> Check:
    """Every statistic eval's normalizers read is present and finite after re-injection. An input whose
    stats are all absent is named with what the loader does with it (`without_stats`) and, from the
    training's intent (`trained`: its keys), whether training normalized it any differently."""
    bad = _placeholders(reloaded.stats)
    absent = [k for k in reloaded.required if k not in reloaded.stats]
    problems = [
        f"{len(bad)} of {len(reloaded.stats)} value(s) placeholders (inf/NaN, all-zero scale): "
        f"{sorted(bad)[:8]}"
        if bad
        else "",
        _absent_said(reloaded, absent, trained) if absent else "",
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
            "renames": reloaded.renames or {},
        },
    )


def _absent_said(reloaded: Reloaded, absent: list[str], trained: set[str] | None) -> str:
    """The missing stats, and for an input with none at all: what eval does with it, whether training
    did the same (the intent's keys), and where a rename left its stats (under the dataset's name)."""
    said = f"missing though the normalization mode needs them: {absent[:8]}"
    features = list(dict.fromkeys(k.rpartition(".")[0] for k in absent))
    bare = [f for f in features if not any(k.startswith(f"{f}.") for k in reloaded.stats)]
    if not bare or not reloaded.without_stats:
        return said
    verb = "has" if len(bare) == 1 else "have"
    said += f"; {', '.join(bare)} {verb} no stats at all: {reloaded.without_stats}"
    if trained is not None:
        same = not any(k.startswith(f"{f}.") for f in bare for k in trained)
        said += (
            ", at training as at inference (training's normalizer had none for them either), so train and "
            "inference agree but the declared normalization mode is never applied to them"
            if same
            else ", though training normalized them (its intent holds their stats): train and inference "
            "differ"
        )

    def has_stats(feature: str) -> bool:
        return any(k.startswith(f"{feature}.") for k in reloaded.stats)

    renamed = unnormalized(reloaded.renames or {}, has_stats, bare)
    held = {f: d for f, d in renamed.items() if has_stats(d)}
    if held:
        said += (
            f"; their stats are held under the dataset's names {sorted(held.values())}, which the rename map "
            "renames to them before the normalizer looks (lerobot-train normalizes with the dataset's stats "
            "keyed as the dataset names them)"
        )
    return said


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
    intent = {k: v.astype(np.float32) for k, v in read_safetensors(intent_path).items()}
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


def first_sample(
    data: LeRobotData, features: list[str], source: Mapping[str, str] | None = None
) -> dict[str, np.ndarray]:
    """The dataset's first row as a batch of one, as the training loader gives it: vector columns as
    float32 [1, D], cameras (video or parquet images) decoded through the frame reader as float 0-1
    [1, 3, H, W] (`processor_view`). Row 0 is its episode's first frame. `source`: sample key ->
    the dataset key it is read from (the rename map's; unnamed keys read themselves)."""
    source = dict(source or {})
    reader = FrameReader(data)
    read = {f: source.get(f, f) for f in features}
    cameras = sorted({d for d in read.values() if d in reader.cameras()})
    vectors = sorted({d for d in read.values() if d not in cameras})
    sample = data.frames(vectors, limit=1, dtype=np.float32) if vectors else {}
    if cameras:
        episode = int(data.frames(["episode_index"], limit=1)["episode_index"][0])
        sample.update({k: processor_view(reader.frames(k, episode, [0])) for k in cameras})
    return {f: sample[read[f]] for f in features}


def fed_keys(reloaded: Reloaded, rename: Mapping[str, str]) -> dict[str, str]:
    """Sample key -> dataset key for each policy input: the dataset key the training's map renames to
    it, handed to `forward` under the name its own rename step (`renames`) turns into the policy's
    (lerobot's reloaded preprocessor renames as training did, so it is fed the dataset's names)."""
    from pipeline.readers.rename import sources

    data, own = sources(rename), sources(reloaded.renames or {})
    return {own.get(f, f): data.get(f, f) for f in reloaded.input_features}


def forward_row(reloaded: Reloaded, dataset: Path, rename: Mapping[str, str] | None = None) -> Check:
    data = LeRobotData(dataset)
    want = (1, data.feature_dim(reloaded.output_feature))
    fed = fed_keys(reloaded, rename or {})
    try:
        sample = first_sample(data, list(fed), fed)
    except InputError as exc:  # e.g. a camera's video missing or undecodable: the forward cannot be fed
        return _row(
            "forward",
            "error",
            f"cannot read one dataset sample to feed the reloaded policy: {exc}",
            expected=list(want),
            actual=None,
            evidence={"exception": str(exc), "inputs": list(reloaded.input_features)},
        )
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
        f"forward on one sample ({', '.join(f'{k} {list(v.shape)}' for k, v in sample.items())}): "
        f"shape {tuple(out.shape)} (expected {want}), {'finite' if finite else 'NOT finite'}",
        expected={"shape": list(want), "finite": True},
        actual={"shape": list(out.shape), "finite": finite},
        evidence={
            "output": out.tolist(),
            "inputs": {k: list(v.shape) for k, v in sample.items()},
            "read_from": {k: v for k, v in fed.items() if k != v},
        },
    )


def round_trip(
    checkpoint: Path,
    dataset: Path,
    rcfg: Any,
    loader_name: str | None = None,
    told: bool = True,
    rename: Mapping[str, str] | None = None,
) -> list[Check]:
    """All reload rows for one checkpoint; a loader that raises is itself a hard row.

    `loader_name`: the loader to use (default `rcfg.loader`). `told`: whether the smoke command was
    handed `save_normalization_stats` (its `{save_normalization_stats}` placeholder); only then does a
    `false` there promise a checkpoint without stats (lerobot-train, for one, always saves them).
    `rename`: the training's rename map (dataset key -> policy key): the forward is fed the dataset
    keys it renames, as training fed them."""
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
    rows = saved_rows(saved, bool(rcfg.save_normalization_stats) or not told)
    name = loader_name or str(rcfg.loader)
    loader = resolve(name, "stages.determinism.reload.loader")
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
                f"{name} failed on {checkpoint}: {type(exc).__name__}: {exc}",
                expected="loads",
                actual=type(exc).__name__,
                evidence={"exception": str(exc)[-3000:], "checkpoint": str(checkpoint)},
            ),
        ]
    rows.append(
        _row(
            "load",
            "match",
            f"{name} loaded {checkpoint}",
            evidence={"checkpoint": str(checkpoint), "dataset": str(dataset)},
        )
    )
    intent = Path(checkpoint).parent / INTENT_FILE
    trained = set(read_safetensors(intent)) if intent.is_file() else None
    return [
        *rows,
        populated_row(reloaded, trained),
        intent_row(reloaded, intent, float(rcfg.stats_atol)),
        forward_row(reloaded, dataset, rename),
    ]
