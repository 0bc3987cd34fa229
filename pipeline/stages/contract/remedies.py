"""What would mend each blocking row, read from the evidence the row already holds (`Check.remedy`).

A row that blocks says what is wrong; the same evidence often says what would be right: the camera
assignment the frames fit, the order of dims that matches the base, the episodes that are broken, the
mode the base was built with. Two kinds of mend: flags on the user's own lerobot-train line (`line`:
`--rename_map`, `--dataset.episodes`, the base's `--policy.normalization_mapping`), and a change to the
dataset's files where no flag can do it (`data`: which file, dims, episodes, and lerobot 0.4.4's own
command where it has one: `lerobot-edit-dataset --operation.type=delete_episodes`, the quantile stats
script). The gate writes no dataset and runs no command.

Never a wrong remedy: a mend is offered only where the evidence decides it by the rule the row itself
was judged by (the frames' best camera assignment beats every other by the stage's `swap_ratio`; a
permutation's partner beats the next candidate by `permutation.min_gain`); otherwise the remedy is
`undecided` and says what would decide it. A remedy never hides a row: the row keeps its verdict.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.readers import lerobot_command
from pipeline.readers.lerobot_command import LeRobotCommand
from pipeline.record.records import Check
from pipeline.stages.contract import data_remedies
from pipeline.stages.contract.data_remedies import data, undecided
from pipeline.stages.contract.rows import Sources

EDIT_DATASET = "lerobot-edit-dataset"  # lerobot 0.4.4's console script (lerobot.scripts.lerobot_edit_dataset)
MAX_LEFT_OUT = 0.5  # a line that leaves out more than this share of the episodes is no mend, a new dataset


@dataclass(frozen=True)
class Plan:
    """The flags every line remedy of one reconciliation agrees on, computed once from all its rows:
    several rows mend the same flag (two camera rows one `--rename_map`, every broken episode one
    `--dataset.episodes`), so each row's remedy names the flag's whole corrected value."""

    src: Sources
    command: LeRobotCommand | None
    checks: tuple[Check, ...]

    @property
    def where(self) -> str:
        return "on the lerobot-train line" if self.command is not None else "in the training config"


def attach(checks: Sequence[Check], src: Sources, argv: Sequence[str] = ()) -> list[Check]:
    """Every hard mismatch with a remedy where its kind has one; other rows as they are."""
    command = lerobot_command.parse(list(argv)) if argv else None
    plan = Plan(src, command, tuple(checks))
    out = []
    for check in checks:
        remedy = remedy_for(check, plan) if _hard(check) and check.remedy is None else None
        out.append(replace(check, remedy=remedy) if remedy else check)
    return out


def _hard(check: Check) -> bool:
    return check.verdict == "mismatch" and check.severity == "hard"


def remedy_for(check: Check, plan: Plan) -> dict[str, Any] | None:
    kind = check.id.removeprefix("contract.").split(":", 1)[0]
    build = BUILDERS.get(kind)
    if build is None and kind.startswith("health."):
        build = _episodes
    return build(check, plan) if build is not None else None


def line(summary: str, set_: dict[str, str] | None = None, drop: Sequence[str] = (), **extra: Any) -> dict:
    out: dict[str, Any] = {"kind": "line", "summary": summary}
    if set_:
        out["set"] = dict(set_)
    if drop:
        out["drop"] = list(drop)
    return {**out, **{k: v for k, v in extra.items() if v is not None}}


def flag_text(key: str, value: str) -> str:
    return f"--{key}={value}"


# ---- line remedies --------------------------------------------------------------------------------


def _mode(check: Check, plan: Plan) -> dict[str, Any] | None:
    """B's mode contradicts the base's: the base's own mapping for every contradicted type."""
    contradicted = {
        c.feature: str(c.expected) for c in plan.checks if c.id.startswith("contract.normalization.mode:")
        and _hard(c) and c.expected
    }  # fmt: skip
    if check.feature not in contradicted:
        return None
    key = "policy.normalization_mapping"
    typed = _typed_dict(plan.command, key)
    base = dict(plan.src.a.norm_map)
    if typed is not None:
        fixed = {**typed, **{t: m for t, m in contradicted.items() if t in typed}}
        if all(base.get(t) == m for t, m in fixed.items()):
            why = f"drop --{key} {plan.where}: it overrides the base's modes {contradicted}"
            return line(why, drop=[key])
    else:
        fixed = {**{t: m for t, m in plan.src.b.norm_map.items()}, **contradicted}
    value = json.dumps(fixed, sort_keys=True)
    return line(f"set {flag_text(key, value)} {plan.where}: the base's own modes", {key: value})


def _typed_dict(command: LeRobotCommand | None, key: str) -> dict[str, Any] | None:
    raw = command.flags.get(key) if command is not None else None
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = lerobot_command._scalar(raw)
    return value if isinstance(value, dict) else None


def rename_fixes(plan: Plan) -> tuple[dict[str, str], list[str]]:
    """The dataset key -> policy key entries the evidence decides, and for each undecided camera row
    why. Frames swapped: the best joint assignment, kept only where it beats every other assignment by
    the frames' own `swap_ratio`; a vector key found under another name by its role: that name."""
    current = dict(plan.src.b.hints.get("rename_map") or {})
    fixes: dict[str, str] = {}
    doubts: list[str] = []
    ratio = plan.src.cfg.frames.swap_ratio
    for check in plan.checks:
        if not _hard(check):
            continue
        if check.id.startswith("contract.frames.swapped:"):
            ev = check.evidence
            best, runner = ev.get("best"), ev.get("runner_up")
            if best is None or runner is None or not best < ratio * runner:
                doubts.append(f"{check.feature}: best fit {best} against {runner} for the next assignment")
                continue
            fed = {current.get(k, k): k for k in plan.src.c.features}  # policy key -> dataset key
            for policy_key, fits in (ev.get("assignment") or {}).items():
                if fits != policy_key and policy_key in fed:
                    fixes[fed[policy_key]] = fits
        elif check.id.startswith("contract.layout.key:") and check.evidence.get("matched_by") == "role":
            fixes[str(check.actual)] = check.feature
    fixes.update(_unnamed_fixes(plan, current, ratio))
    return fixes, doubts


def _unnamed_fixes(plan: Plan, current: dict[str, str], ratio: float) -> dict[str, str]:
    """Cameras named after no base camera, where their frames decide which base camera each is: the best
    assignment beats every other by the frames' `swap_ratio` (one camera left over is no evidence)."""
    match = plan.src.camera_match or {}
    best, runner = match.get("best"), match.get("runner_up")
    if best is None or runner is None or not best < ratio * runner:
        return {}
    fed = {current.get(k, k): k for k in plan.src.c.features}
    return {fed.get(k, k): str(v) for k, v in (match.get("assignment") or {}).items()}


def _rename(check: Check, plan: Plan) -> dict[str, Any] | None:
    fixes, doubts = rename_fixes(plan)
    mine = check.feature.split("|") + [str(check.actual)]
    if not fixes or not any(k in mine or v in mine for k, v in fixes.items()):
        if check.id.startswith("contract.frames.swapped:"):
            return undecided(
                "no --rename_map offered: the frames do not decide which camera is which",
                "; ".join(doubts) + f" (a map is offered where the best beats the next by "
                f"x{plan.src.cfg.frames.swap_ratio}); a teacher_forced camera probe, or the base's own "
                "stats for each camera, decides it",
            )
        return None
    current = dict(plan.src.b.hints.get("rename_map") or {})
    merged = {k: v for k, v in {**current, **fixes}.items() if k != v}
    value = json.dumps(merged, sort_keys=True)
    named = ", ".join(f"{k} -> {v}" for k, v in sorted(fixes.items()))
    return line(f"set {flag_text('rename_map', value)} {plan.where} ({named})", {"rename_map": value})


def _camera_key(check: Check, plan: Plan) -> dict[str, Any] | None:
    """A base camera no dataset key provides: which dataset camera is it? Only the frames decide."""
    if check.evidence.get("matched_by") == "role":
        return _rename(check, plan)
    if check.evidence.get("matched_by") != "missing" or "dataset_cameras" not in check.evidence:
        return None
    fixes, _ = rename_fixes(plan)
    if check.feature in fixes.values():
        return _rename(check, plan)
    cams = check.evidence.get("dataset_cameras") or []
    match = plan.src.camera_match
    said = (
        f"the best assignment of the unnamed cameras costs {match.get('best')} against "
        f"{match.get('runner_up')} for the next (a map is offered where it beats the next by "
        f"x{plan.src.cfg.frames.swap_ratio})"
        if match
        else "no frames were fitted to the base's image stats for it (none, one camera left over, or "
        "stats that do not tell the base's cameras apart)"
    )
    return undecided(
        f"no --rename_map offered: nothing here decides which of the dataset's cameras {cams} shows the "
        f"base's {check.feature}",
        f"{said}; the base's own image stats for each camera, or a teacher_forced camera probe with the "
        "map, decides it",
    )


def _episodes(check: Check, plan: Plan) -> dict[str, Any] | None:
    """Broken episodes named by a health row: `--dataset.episodes` without every broken one, and lerobot's
    own `delete_episodes` as the data mend."""
    mine = sorted({int(e) for e in check.evidence.get("episodes") or []})
    if not mine:
        return None
    every = _all_episodes(plan)
    broken = set(episode_rows_broken(plan))
    kept = [e for e in every if e not in broken]
    delete = _delete_command(plan, mine)
    if not kept or len(broken) > MAX_LEFT_OUT * len(every):
        return data(
            f"{len(broken)} of {len(every)} episodes are broken: re-record or delete them "
            f"({EDIT_DATASET} writes a new dataset)",
            episodes=mine,
            command=delete,
        )
    value = json.dumps(kept)
    summary = (
        f"set {flag_text('dataset.episodes', _short(kept))} {plan.where}: every episode but "
        f"{sorted(broken)} (the data stays as it is; or delete episode(s) {mine} with {EDIT_DATASET})"
    )
    return line(summary, {"dataset.episodes": value}, episodes=mine, command=delete)


def episode_rows_broken(plan: Plan) -> list[int]:
    rows = [c for c in plan.checks if _hard(c) and c.id.startswith("contract.health.")]
    return sorted({int(e) for c in rows for e in c.evidence.get("episodes") or []})


def _all_episodes(plan: Plan) -> list[int]:
    trained = plan.src.trained_episodes
    if trained is not None:
        return sorted(int(e) for e in trained)
    followed = (plan.src.c.health.get("episodes") or {}).get("index")
    if followed is not None and len(followed):
        return sorted({int(e) for e in followed})
    return list(range(int(plan.src.c.claimed.get("total_episodes") or plan.src.c.episodes or 0)))


def _short(values: list[int]) -> str:
    text = json.dumps(values)
    return text if len(text) <= 60 else text[:40] + f"... ({len(values)} episodes)]"


def _delete_command(plan: Plan, episodes: list[int]) -> list[str]:
    """lerobot 0.4.4's `lerobot-edit-dataset`, pointed at this folder through `HF_LEROBOT_HOME`: its
    `--root` is the dataset folder where it loads but the parent of `<repo_id>` where it writes, so with
    a `--root` the edited copy lands inside the original. Without one it loads and writes
    `$HF_LEROBOT_HOME/<repo_id>`: the folder's own `<parent>/<name>` under its grandparent is this folder.
    It moves the original to `<folder>_old` and writes the edited dataset in its place."""
    folder = Path(str(plan.src.c.path)).absolute()
    return [
        "env",
        f"HF_LEROBOT_HOME={folder.parent.parent}",
        "HF_HUB_OFFLINE=1",
        EDIT_DATASET,
        f"--repo_id={folder.parent.name}/{folder.name}",
        "--operation.type=delete_episodes",
        f"--operation.episode_indices={json.dumps(episodes)}",
    ]


def repo_id(plan: Plan) -> str:
    """The dataset's repo id as the line names it, else its folder's `<parent>/<name>`."""
    typed = plan.command.repo_id if plan.command is not None else None
    return typed or "/".join(str(plan.src.c.path).rstrip("/").split("/")[-2:])


def _on_data(name: str) -> Any:
    build = getattr(data_remedies, name)
    return lambda check, plan: build(check, plan.src)


BUILDERS: dict[str, Any] = {
    "normalization.mode": _mode,
    "frames.swapped": _rename,
    "layout.key": _camera_key,
    "layout.permutation": _on_data("permutation"),
    "units.scale": _on_data("units"),
    "normalization.stats": lambda check, plan: data_remedies.stats(check, plan.src, repo_id(plan)),
    "normalization.passthrough": _on_data("passthrough"),
    "normalization.renamed": _on_data("renamed"),
    "frames.channels": _on_data("channels"),
    "frames.lag": _on_data("lag"),
}
