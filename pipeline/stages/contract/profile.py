"""The dataset profile as the contract stage's artifacts: `profile.json` (`preflight.profile/1`, read by
the record writers) and `profile.png` (time at the limits and the typical hold per dim, by kind; drawn
by `plots.profile_plot`).

What the data is, never a finding: the rows of `readers.profile` from the stats pass's health facts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.readers.profile import profile_rows
from pipeline.record.records import jsonable
from pipeline.stages.contract.drawing import Plots
from pipeline.stages.contract.health.common import dim_names
from pipeline.stages.contract.rows import Sources
from pipeline.storage import atomic_write_json

SCHEMA = "preflight.profile/1"


def profile(src: Sources) -> dict[str, Any] | None:
    facts = src.c.health
    if not facts or not facts.get("low"):
        return None
    names = {k: dim_names(src, k) for k in facts["low"]}
    episodes = len((facts.get("episodes") or {}).get("index", ()))
    return {
        "schema": SCHEMA,
        "dataset": str(src.c.path),
        "episodes": episodes,
        "rows": profile_rows(facts, names),
    }


def write_profile(out_dir: Path, src: Sources, plots: Plots | None = None) -> dict[str, str]:
    """{"profile": json path, "profile_plot": png path}, or {} where the pass followed no feature. The
    plot exists once `plots` finished (drawn here where no `plots` is given)."""
    doc = profile(src)
    if doc is None or not doc["rows"]:
        return {}
    path = atomic_write_json(Path(out_dir) / "profile.json", jsonable(doc))
    rows = jsonable(doc["rows"])
    plot = (plots or Plots()).draw("profile", Path(out_dir) / "profile.png", rows=rows)
    return {"profile": str(path), "profile_plot": str(plot)}
