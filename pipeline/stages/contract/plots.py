"""One PNG per vector feature: the base's per-dim range against the dataset's, so a swap, a unit factor,
a mirrored or an offset dim is visible at a glance in the record.

Each dim is a row; both ranges are scaled to the union of the two (a dim in degrees next to one in
radians stays readable), the base's bar above the dataset's, means as ticks, and dims another check
flagged labelled in red. matplotlib with the Agg backend (no display on a compute node); the file is
written to a temp name in the same folder and moved into place with `os.replace`, so a reader of the
run folder never sees half a PNG.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402  (after the backend is chosen)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pipeline.storage import atomic_write_bytes  # noqa: E402

BASE, DATA, FLAG = "#3465a4", "#f57900", "#cc0000"
PROFILE_MAX_WIDTH_IN = 30.0  # 3,000 px at matplotlib's 100 dpi, whatever the number of dims (ticks thin out)
MAX_BARS = 200  # positions drawn as bars (dims, episodes); past that, as one filled step line
PROFILE_COLOURS = {"continuous": "#3465a4", "discrete": "#f57900", "constant": "#888a85"}
MAX_DIMS = 96  # rows of one plot (a 4,000-dim state would ask for a figure 100,000 px high): the flagged
# dims first, then the first others, and the title says how many of how many are shown


def _unit(a: dict[str, np.ndarray], c: dict[str, np.ndarray], d: int) -> tuple[float, float]:
    """The union of both ranges in dim d: the row's 0..1 scale."""
    lo = np.nanmin([a["lo"][d], c["lo"][d]])
    hi = np.nanmax([a["hi"][d], c["hi"][d]])
    if not np.isfinite(lo):
        lo = 0.0
    span = hi - lo if np.isfinite(hi - lo) and hi > lo else 1.0
    return float(lo), float(span)


def _draw(
    ax, a: dict[str, np.ndarray], c: dict[str, np.ndarray], flagged: set[int], labels: list[int]
) -> None:
    """Row d shows dim `labels[d]`; `flagged` holds row positions."""
    dims = len(a["lo"])
    for d in range(dims):
        lo, span = _unit(a, c, d)
        for src, color, y in ((a, BASE, d - 0.18), (c, DATA, d + 0.18)):
            x0, x1, m = ((np.clip((src[k][d] - lo) / span, 0, 1)) for k in ("lo", "hi", "mean"))
            x0 = float(x0) if np.isfinite(x0) else 0.0
            x1 = float(x1) if np.isfinite(x1) else x0
            ax.barh(y, max(x1 - x0, 0.004), left=x0, height=0.32, color=color)
            if np.isfinite(m):
                ax.plot([m, m], [y - 0.2, y + 0.2], color="black", linewidth=1.2)
    ax.set_yticks(range(dims))
    ax.set_yticklabels([str(n) for n in labels])
    for d, label in enumerate(ax.get_yticklabels()):
        if d in flagged:
            label.set_color(FLAG)
            label.set_fontweight("bold")
    ax.set_ylim(dims - 0.5, -0.5)
    ax.set_xlim(-0.02, 1.02)
    ax.grid(axis="x", color="#e0e0e0")


def range_plot(
    path: Path,
    a: dict[str, np.ndarray],
    c: dict[str, np.ndarray],
    flagged: set[int],
    title: str | None = None,
) -> Path:
    """`a`/`c`: {lo, hi, mean} per dim, each in its own dim order, so a swap shows as crossed rows."""
    path = Path(path)
    total = len(a["lo"])
    shown = shown_dims(total, flagged)
    a, c = ({k: np.asarray(side[k])[shown] for k in ("lo", "hi", "mean")} for side in (a, c))
    dims = len(shown)
    fig = Figure(figsize=(9, 1.6 + 0.32 * dims), dpi=80)
    ax = fig.add_subplot()
    _draw(ax, a, c, {i for i, d in enumerate(shown) if d in flagged}, shown)
    note = f"\n{dims} of {total} dims shown: the flagged ones first" if dims < total else ""
    ax.set_title((title or f"{path.stem}: base (A) vs dataset (C) range per dim") + note)
    ax.set_xlabel("position within the union of both ranges (0 = lower end, 1 = upper end)")
    ax.set_ylabel("dim")
    handles = [
        Patch(color=BASE, label="base (A): q01..q99 or min..max"),
        Patch(color=DATA, label="dataset (C): same stats"),
        Line2D([], [], color="black", label="mean"),
        Line2D([], [], color=FLAG, marker="s", linestyle="", label="flagged by a check"),
    ]
    height = 1.6 + 0.32 * dims
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1))  # room for the legend under the axis label
    return save_png(fig, path)


def shown_dims(total: int, flagged: set[int]) -> list[int]:
    """At most `MAX_DIMS` dims, in order: every flagged dim that fits, then the first others."""
    first = sorted(d for d in flagged if 0 <= d < total)[:MAX_DIMS]
    rest = (d for d in range(total) if d not in flagged)
    return sorted(first + [d for _, d in zip(range(MAX_DIMS - len(first)), rest, strict=False)])


def bars(ax: Axes, values: list[float], colour: str, label: str, where: list[int] | None = None) -> None:
    """A bar per position (only those in `where`, where given), or past MAX_BARS positions one filled
    step line over all of them: one artist, not a rectangle per position (each costs ~1 ms to add and
    lay out: 4,000 dims took over a minute, 1,000 episodes seconds)."""
    if len(values) <= MAX_BARS:
        at = range(len(values)) if where is None else where
        ax.bar(list(at), [values[i] for i in at], color=colour, label=label)
    else:
        ax.stairs(values, [i - 0.5 for i in range(len(values) + 1)], fill=True, color=colour, label=label)


def save_png(fig: Figure, path: Path) -> Path:
    """Render in memory, then the one atomic writer (temp file, fsync, rename; the umask's permissions):
    a reader (the audit record) never sees half a plot."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return atomic_write_bytes(path, buffer.getvalue())


def profile_plot(path: Path, rows: list[dict[str, Any]]) -> Path:
    width = min(max(6.0, 0.18 * len(rows) + 2), PROFILE_MAX_WIDTH_IN)  # 4,000 dims: 30 in, not 722 in
    fig = Figure(figsize=(width, 3.8))
    ax = fig.subplots()
    x = range(len(rows))
    for kind, colour in PROFILE_COLOURS.items():
        at = [r["at_limits"] if r["kind"] == kind else 0 for r in rows]
        label = f"share of rows at min/max ({kind})"
        bars(ax, at, colour, label, [i for i, r in enumerate(rows) if r["kind"] == kind])
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
