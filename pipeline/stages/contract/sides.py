"""What the contract judges when a source is missing: no base (a training config that builds its policy
fresh, LeRobot's `--policy.type=act`), or a dataset alone (a freshly recorded dataset checked before
anyone trains on it).

The checks then run on stand-ins that say only what is known: the policy a training config builds (its
declared features, its normalization mapping and its window fields), or the dataset's own vector
features with no mode and no window. A check that needs a source not given is not run; one `skipped`
row names those checks and the keys that would run them, so the record never passes what it did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from pipeline.readers.base import Contract, DatasetContract
from pipeline.record.records import Check, Rows

NAME = "contract"
ROWS = Rows(NAME, "diagnostics")
# what a check reads, as `PER_PAIR` / `GLOBAL` in the stage declare it
NEEDS_BASE, NEEDS_TRAINING, DATASET_ONLY = "A", "B", "C"


def sides(a: Contract) -> str:
    """The sources behind A: the base ("ABC"), a fresh policy from B ("BC") or the dataset alone ("C")."""
    return {"fresh": "BC", "dataset": "C"}.get(str(a.hints.get("standin")), "ABC")


def fresh_policy(b: Contract, c: DatasetContract) -> Contract:
    """The policy a training config with no base builds: its declared features (or, where it declares
    none, the dataset's after the rename map, as LeRobot builds them), its mode and its window."""
    lerobot = b.kind == "lerobot_train_config"
    a = Contract("A", "lerobot" if lerobot and b.features else "fresh", b.path)
    if b.features:
        a.features = {k: replace(f, dtype=None) for k, f in b.features.items()}
    else:
        rename = b.hints.get("rename_map") or {}
        a.features = {
            rename.get(k, k): replace(f, key=rename.get(k, k), dtype=None)
            for k, f in c.features.items()
            if f.role != "other"
        }
    a.norm_map = dict(b.norm_map)
    a.hints = {
        "standin": "fresh",
        "fresh": True,
        "policy_type": b.hints.get("policy_type"),
        "window": dict(b.hints.get("window") or {}),
        **({"delta_indices": b.hints["delta_indices"]} if "delta_indices" in b.hints else {}),
    }
    return a


def dataset_alone(c: DatasetContract) -> tuple[Contract, Contract]:
    """Stand-ins for A and B when only a dataset was given: its own vector features, no mode, no window
    (so no check can compare the data with anything but itself)."""
    a = Contract("A", "dataset", c.path, hints={"standin": "dataset"})
    a.features = {
        k: replace(f, dtype=None) for k, f in c.features.items() if f.role not in ("image", "other")
    }
    return a, Contract("B", "none", "", hints={"standin": "dataset"})


# the row ids a check function writes, where its name does not say them
IDS = {
    "inputs.camera": "layout.key (cameras)",
    "layout.image": "layout.images",
    "encoding.image": "encoding.image_scale",
    "conventions.convention": "units.sign, units.offset",
    "relation.relation": "units.action_relation",
}


def family(check: Callable[..., list[Check]]) -> str:
    """`normalization.mode` for `normalization.mode_rows`: the check ids a function writes."""
    module = check.__module__.rsplit(".", 1)[-1]
    name = f"{module}.{check.__name__.removesuffix('_rows')}"
    return IDS.get(name, name)


def skipped_row(
    a: Contract,
    b: Contract,
    left_out: dict[str, Iterable[Callable[..., list[Check]]]],
    windowed: Iterable[str] = (),
) -> Check:
    """One row naming the checks not run and what would run them (never a pass: verdict `skipped`);
    `windowed`: rows left out because they judge the data against the policy's window."""
    need_base = sorted({family(f) for f in left_out.get(NEEDS_BASE, ())})
    need_training = sorted({family(f) for f in left_out.get(NEEDS_TRAINING, ())} | set(windowed))
    parts = []
    if need_base:
        base = b.hints.get("pretrained_path")
        fresh = (
            f" (training config {b.path} names the base {base}, not given as model.path)"
            if base
            else f" (training config {b.path} builds a fresh {a.hints.get('policy_type')} policy)"
        )
        why = fresh if a.hints.get("fresh") else ""
        parts.append(f"no base checkpoint{why}: {', '.join(need_base)} need one; set model.path")
    if need_training:
        parts.append(
            f"no training config: {', '.join(need_training)} need the policy's features, normalization "
            "mapping and window; set training.path (or model.path with its training config)"
        )
    keys = ["model.path"] * bool(need_base) + ["training.path"] * bool(need_training)
    return ROWS(
        "inputs",
        " ".join(keys),
        "skipped",
        "; ".join(parts),
        severity="soft",
        evidence={"needs_model": need_base, "needs_training": need_training, "set": keys},
    )


def unmet(cfg: Any) -> tuple[str, ...]:
    """At launch: a base without its training config is refused, since which mode and features it trains
    with is what the contract judges (a dataset alone, or a training config alone with its dataset, is a
    check). Here, not in the stage's code, so a launch asks it without importing the stage."""
    given = {name: bool((cfg.get(name) or {}).get("path")) for name in ("model", "training")}
    return ("training.path",) if given["model"] and not given["training"] else ()
