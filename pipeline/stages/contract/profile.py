"""The dataset profile as the contract stage's artifacts: `profile.json` (`preflight.profile/1`, read by
the record writers) and `profile.png` (time at the limits and the typical hold per dim, by kind).

What the data is, never a finding: the rows of `readers.profile` from the stats pass's health facts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.readers.profile import profile_rows
from pipeline.record.records import jsonable
from pipeline.stages.contract.health.common import dim_names
from pipeline.stages.contract.rows import Sources
from pipeline.storage import atomic_write_json

SCHEMA = "preflight.profile/1"
MAX_WIDTH_IN = 30.0  # 3,000 px at matplotlib's 100 dpi, whatever the number of dims (ticks thin out)
MAX_BARS = 200  # dims drawn as bars; past that, as one filled step line
COLOURS = {"continuous": "#3465a4", "discrete": "#f57900", "constant": "#888a85"}


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


def write_profile(out_dir: Path, src: Sources) -> dict[str, str]:
    """{"profile": json path, "profile_plot": png path}, or {} where the pass followed no feature."""
    doc = profile(src)
    if doc is None or not doc["rows"]:
        return {}
    path = atomic_write_json(Path(out_dir) / "profile.json", jsonable(doc))
    return {"profile": str(path), "profile_plot": str(_plot(Path(out_dir) / "profile.png", doc["rows"]))}


def _plot(path: Path, rows: list[dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from pipeline.stages.contract.plots import save_png  # matplotlib: imported when a plot is drawn

    width = min(max(6.0, 0.18 * len(rows) + 2), MAX_WIDTH_IN)  # 4,000 dims: 30 in, not 722 in
    fig = Figure(figsize=(width, 3.8))
    ax = fig.subplots()
    x = range(len(rows))
    for kind, colour in COLOURS.items():
        at = [r["at_limits"] if r["kind"] == kind else 0 for r in rows]
        label = f"share of rows at min/max ({kind})"
        if len(rows) <= MAX_BARS:
            ax.bar(x, at, color=colour, label=label)
        else:  # one artist, not one rectangle per dim (4,000 of them took over a minute to lay out)
            ax.stairs(at, [i - 0.5 for i in range(len(rows) + 1)], fill=True, color=colour, label=label)
    ax.plot(x, [r["held_share_p50"] for r in rows], "k.", label="median share of an episode held still")
    step = max(1, len(rows) // 40)
    ticks = [f"{r['feature'][-12:]}:{r['dim']}" for r in rows]
    ax.set_xticks(list(x)[::step], ticks[::step], rotation=90, fontsize=6)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("feature:dim")
    ax.set_ylabel("share")
    ax.set_title("Dataset profile: time at the limits and held still, per dim (what the data is)")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    return save_png(fig, path)
