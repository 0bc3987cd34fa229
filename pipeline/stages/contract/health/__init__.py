"""Dataset health (rows `contract.health.*`): is this dataset fit to train the audited model on?

`lerobot-doctor` judges a dataset alone; here the same facts are judged with the model in view (its
horizon from its own `config.json`, the dims it reads). The facts come from the contract stage's one pass
over the data (`pipeline.readers.health`); this package only decides. Severity follows one rule, written
down in the README's table: what breaks training or silently corrupts it is hard, what deserves a look is
soft. Every row prints the thresholds it used and names its episodes and dims.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pipeline.readers.lerobot_data import LeRobotData
from pipeline.record.records import Check
from pipeline.stages.contract.health import episodes, meta, motion, timing
from pipeline.stages.contract.health.common import ROWS, listed
from pipeline.stages.contract.rows import Sources


def health_rows(src: Sources) -> list[Check]:
    """Every health row, then `health.episodes`: what was checked and the worst episodes."""
    cfg = src.cfg.health
    if not cfg.enabled:
        return []
    facts = src.c.health
    data = LeRobotData(src.c.path) if src.c.kind.startswith("lerobot") else None  # its metadata, read once
    checks = meta.meta_rows(src, data)
    followed = (facts.get("episodes") or {}).get("index")
    if followed is None or not len(followed):  # metadata only, or a reader that did not follow episodes
        if src.c.rows:
            message = "no episode was followed in the data pass"
            checks.append(ROWS("health.episodes", "episodes", "unverifiable", message, severity="soft"))
        return checks
    checks += timing.time_rows(src, facts) + motion.motion_rows(src, facts)
    checks += episodes.episode_rows(src, facts, data)
    return [*checks, _summary(checks, facts, cfg.worst)]


def worst_episodes(checks: list[Check], limit: int) -> list[dict[str, Any]]:
    """Episodes named by non-match health rows, most reasons first: the record's per-episode table."""
    reasons: dict[int, list[str]] = {}
    frames: Counter[int] = Counter()
    for check in checks:
        if check.verdict == "match" or check.category != "health":
            continue
        for episode in check.evidence.get("episodes", []):
            reasons.setdefault(int(episode), []).append(check.id.split(".", 2)[-1])
        for episode, count in (check.evidence.get("frames_per_episode") or {}).items():
            frames[int(episode)] += int(count)
    ranked = sorted(reasons, key=lambda e: (-len(reasons[e]), -frames[e], e))[:limit]
    return [{"episode": e, "reasons": reasons[e], "flagged_frames": frames[e]} for e in ranked]


def _summary(checks: list[Check], facts: dict[str, Any], limit: int) -> Check:
    followed = len(facts["episodes"]["index"])
    seen = len(facts.get("order", []))
    worst = worst_episodes(checks, limit)
    sampled = "every episode"
    flagged = f"; worst: {listed([w['episode'] for w in worst])}" if worst else "; none flagged"
    return ROWS(
        "health.episodes",
        "episodes",
        "match",
        f"dataset health checked on {followed} episode(s), {sampled}{flagged}",
        severity="soft",
        actual={"followed": followed, "episodes": seen},
        evidence={"worst": worst, "rows": facts.get("rows")},
    )


__all__ = ["health_rows", "worst_episodes"]
